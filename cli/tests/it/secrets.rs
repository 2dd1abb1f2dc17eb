//! No password, token or key the tool is given, in a URL or in the environment, ever shows in
//! what it prints: for every scheme, against an unreachable store, with credentials a real server
//! refuses and with credentials it accepts (ZooKeeper digest, MongoDB SCRAM; PostgreSQL,
//! MariaDB and Redis in `secure.rs`, NATS in `nats_tls.rs`), in usage errors and in `--help`.
//! Every run has `RUST_LOG=trace` (see [`crate::shedlock`]).

use std::sync::Arc;

use serde_json::Value;
use shedlock::{LockProvider, ProviderBuilder};
use shedlock_launcher::Backend;

use crate::{HOLDER, Ran, cfg, pki::Pki, shedlock, unique};

/// Runs the tool; fails if it printed one of `secrets`.
async fn hidden(args: &[&str], env: &[(&str, &str)], secrets: &[&str]) -> Ran {
    let ran = shedlock(args, env, "").await;
    ran.assert_hides(secrets);
    ran
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_store_of_every_scheme_is_reported_without_its_secret() {
    let port = shedlock_test_support::unreachable::closed_port();
    let at = format!("127.0.0.1:{}", port.port());
    let http = format!("http://{at}");
    // (what, URL, environment)
    type Case = (&'static str, String, Vec<(&'static str, String)>);
    let mut cases: Vec<Case> = Vec::new();
    for (scheme, url) in [
        ("postgres", format!("postgres://ops:s3cret-cli-postgres@{at}/app")),
        ("mysql", format!("mysql://ops:s3cret-cli-mysql@{at}/app")),
        ("mariadb", format!("mariadb://ops:s3cret-cli-mariadb@{at}/app?ssl-mode=REQUIRED")),
        ("redis", format!("redis://ops:s3cret-cli-redis@{at}")),
        ("rediss", format!("rediss://ops:s3cret-cli-rediss@{at}")),
        ("redis-cluster", format!("redis://ops:s3cret-cli-cluster@{at},redis://{at}")),
        ("nats", format!("nats://ops:s3cret-cli-nats@{at}")),
        ("nats-token", format!("tls://s3cret-cli-nats-token@{at}")),
        ("mongodb", format!("mongodb://ops:s3cret-cli-mongodb@{at}/app")),
        ("zookeeper", format!("zookeeper://ops:s3cret-cli-zookeeper@{at}/locks")),
        ("memcached", format!("memcache://ops:s3cret-cli-memcached@{at}")),
        #[cfg(feature = "etcd")]
        ("etcd", format!("etcd://ops:s3cret-cli-etcd@{at}")),
    ] {
        cases.push((scheme, url, vec![]));
    }
    // The password from the environment, the URL naming only the user.
    for (scheme, url) in [
        ("postgres+env", format!("postgres://ops@{at}/app")),
        ("mysql+env", format!("mysql://ops@{at}/app")),
        ("redis+env", format!("redis://ops@{at}")),
        ("nats+env", format!("nats://ops@{at}")),
        ("nats-token+env", format!("nats://{at}")),
        ("mongodb+env", format!("mongodb://ops@{at}/app")),
        ("zookeeper+env", format!("zookeeper://ops@{at}/locks")),
        #[cfg(feature = "etcd")]
        ("etcd+env", format!("etcd://ops@{at}")),
    ] {
        cases.push((scheme, url, vec![("SHEDLOCK_PASSWORD", "s3cret-cli-from-env".into())]));
    }
    for (scheme, url) in [("dynamodb", "dynamodb://locks"), ("s3", "s3://bucket/locks/")] {
        let env = vec![
            ("AWS_ENDPOINT_URL", http.clone()),
            ("AWS_ACCESS_KEY_ID", "ops".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "s3cret-cli-aws-key".to_owned()),
            ("AWS_SESSION_TOKEN", "s3cret-cli-aws-token".to_owned()),
        ];
        cases.push((scheme, url.to_owned(), env));
    }
    let mut runs = tokio::task::JoinSet::new();
    for (what, url, env) in cases {
        runs.spawn(async move {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let args = ["--url", &url, "--timeout-secs", "2", "show", "nightly"];
            let ran = shedlock(&args, &env, "").await;
            (what, ran)
        });
    }
    while let Some(r) = runs.join_next().await {
        let (what, ran) = r.unwrap();
        assert_eq!(ran.code, 2, "{what}: {ran:?}");
        assert!(!ran.stderr.trim().is_empty(), "{what}: an unreachable store is reported");
        for secret in [
            "s3cret-cli-",
            "s3cret-cli-from-env",
            "s3cret-cli-aws-key",
            "s3cret-cli-aws-token",
            "s3cret-cli-nats-token",
        ] {
            assert!(
                !ran.stdout.contains(secret) && !ran.stderr.contains(secret),
                "{what} printed a secret: {ran:?}"
            );
        }
    }
}

#[tokio::test]
async fn memcached_credentials_are_refused_without_repeating_them() {
    let ran = hidden(
        &["--url", "memcache://ops:s3cret-cli-memcached@127.0.0.1:11211", "show", "x"],
        &[],
        &["s3cret-cli-memcached"],
    )
    .await;
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("sends no login"), "{}", ran.stderr);
}

#[tokio::test]
async fn a_url_given_in_the_wrong_place_is_not_echoed_with_its_password() {
    // The URL where the subcommand should be: the parser's error quotes it.
    let ran =
        hidden(&["postgres://ops:s3cret-cli-argv@db/app", "list"], &[], &["s3cret-cli-argv"]).await;
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("postgres://ops:***@db/app"), "{}", ran.stderr);
}

#[tokio::test]
async fn help_documents_credentials_and_the_ca_and_never_shows_the_environments_url() {
    let env = [
        ("SHEDLOCK_URL", "postgres://ops:s3cret-cli-help@db/app"),
        ("SHEDLOCK_PASSWORD", "s3cret-cli-help-env"),
    ];
    let ran = hidden(&["--help"], &env, &["s3cret-cli-help", "s3cret-cli-help-env"]).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    for documented in ["SHEDLOCK_PASSWORD", "SHEDLOCK_CA_FILE", "--ca-file", "sslrootcert"] {
        assert!(ran.stdout.contains(documented), "--help names {documented}: {}", ran.stdout);
    }
}

#[tokio::test]
async fn a_ca_file_with_a_url_that_asks_for_plaintext_or_a_store_without_tls_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Pki::generate(dir.path()).ca.display().to_string();
    let plaintext = [
        "postgres://ops@127.0.0.1:1/app?sslmode=disable",
        "mysql://ops@127.0.0.1:1/app?ssl-mode=DISABLED",
        "redis://127.0.0.1:1",
        "mongodb://127.0.0.1:1/app?tls=false",
    ];
    for url in plaintext {
        let ran = hidden(&["--url", url, "--ca-file", &ca, "show", "x"], &[], &[]).await;
        assert_eq!(ran.code, 2, "{url}");
        assert!(ran.stderr.contains("plaintext"), "{url}: {}", ran.stderr);
    }
    let aws = [("AWS_ENDPOINT_URL", "http://127.0.0.1:1"), ("AWS_ACCESS_KEY_ID", "x")];
    let aws = [aws[0], aws[1], ("AWS_SECRET_ACCESS_KEY", "s3cret-cli-aws")];
    for url in ["dynamodb://locks", "s3://bucket/"] {
        let ran =
            hidden(&["--url", url, "--ca-file", &ca, "show", "x"], &aws, &["s3cret-cli-aws"]).await;
        assert_eq!(ran.code, 2, "{url}");
        assert!(ran.stderr.contains("plaintext"), "{url}: {}", ran.stderr);
    }
    let db = dir.path().join("locks.db");
    let sqlite = format!("sqlite://{}", db.display());
    // memcached takes a CA (its TLS listener, -Z: tests/it/secure.rs); SQLite has no TLS.
    for url in [&sqlite] {
        let ran = hidden(&["--url", url, "--ca-file", &ca, "show", "x"], &[], &[]).await;
        assert_eq!(ran.code, 2, "{url}");
        assert!(ran.stderr.contains("TLS cannot be used"), "{url}: {}", ran.stderr);
    }
    let ran =
        hidden(&["--url", "redis://h:1", "--ca-file", "/nonexistent/ca.pem", "list"], &[], &[])
            .await;
    assert_eq!(ran.code, 2);
}

#[tokio::test]
async fn a_ca_file_that_is_not_a_pem_certificate_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("not-a-ca.pem");
    std::fs::write(&bad, "hello").unwrap();
    let bad = bad.display().to_string();
    for url in ["rediss://127.0.0.1:1", "nats://127.0.0.1:1", "mongodb://127.0.0.1:1/app"] {
        let ran = hidden(&["--url", url, "--ca-file", &bad, "show", "x"], &[], &[]).await;
        assert_eq!(ran.code, 2, "{url}");
        assert!(
            ran.stderr.contains("not-a-ca.pem") && ran.stderr.contains("no PEM certificate"),
            "{url}: {}",
            ran.stderr
        );
    }
}

/// A ZooKeeper tree whose nodes a digest-authenticated holder created (creator-only ACL).
async fn zookeeper_holder(user: &str, password: &str) -> (String, String, shedlock::Lock) {
    let connect = shedlock_test_support::url(Backend::ZooKeeper, "ZooKeeper").await;
    let root = format!("/{}", unique("cli-auth"));
    let holder = shedlock_zookeeper::ZooKeeperLockProvider::builder(connect.as_str())
        .root(&root)
        .digest_auth(user, password)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    let lock = holder.try_lock(&cfg("nightly")).await.unwrap().expect("free");
    (connect, root, lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_digest_credentials_from_the_url_or_the_environment_read_a_creator_only_tree() {
    let (user, password) = ("cli-ops", "s3cret-cli-zookeeper");
    let (connect, root, _lock) = zookeeper_holder(user, password).await;
    let in_url = format!("zookeeper://{user}:{password}@{connect}{root}");
    let user_only = format!("zookeeper://{user}@{connect}{root}");
    for (url, env) in
        [(in_url.as_str(), vec![]), (&user_only, vec![("SHEDLOCK_PASSWORD", password)])]
    {
        for cmd in [&["--json", "show", "nightly"][..], &["list"]] {
            let mut args = vec!["--url", url];
            args.extend(cmd);
            let ran = hidden(&args, &env, &[password]).await;
            assert_eq!(ran.code, 0, "{cmd:?}: {}", ran.stderr);
            assert!(ran.stdout.contains(HOLDER), "{}", ran.stdout);
        }
    }
    let ran = hidden(&["--url", &in_url, "--json", "show", "nightly"], &[], &[password]).await;
    let v: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(v["held"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_wrong_or_missing_digest_password_is_refused_by_the_acl_and_never_printed() {
    let (user, password) = ("cli-ops", "s3cret-cli-zookeeper-right");
    let (connect, root, _lock) = zookeeper_holder(user, password).await;
    let wrong = "s3cret-cli-zookeeper-wrong";
    let secrets = [password, wrong];
    let urls = [
        format!("zookeeper://{user}:{wrong}@{connect}{root}"),
        format!("zookeeper://{connect}{root}"),
    ];
    for url in &urls {
        let ran = hidden(&["--url", url, "show", "nightly"], &[], &secrets).await;
        assert_eq!(ran.code, 2, "the ACL refuses another identity: {}", ran.stdout);
        assert!(
            ran.stderr.contains("NoAuth") || ran.stderr.contains("permission"),
            "{}",
            ran.stderr
        );
    }
    let ran = hidden(
        &["--url", &format!("zookeeper://{user}@{connect}{root}"), "show", "nightly"],
        &[],
        &secrets,
    )
    .await;
    assert_eq!(ran.code, 2, "a user without a password is refused by the tool");
    assert!(ran.stderr.contains("needs a password"), "{}", ran.stderr);
}

/// A MongoDB user (SCRAM) on the launcher's server, created for this test.
async fn mongodb_user(password: &str) -> (String, String, String) {
    use mongodb::bson::doc;
    let url = shedlock_test_support::url(Backend::MongoDb, "MongoDB").await;
    let client = mongodb::Client::with_uri_str(&url).await.unwrap();
    let db = "shedlock_cli";
    let user = unique("cli-ops");
    client
        .database(db)
        .run_command(doc! {
            "createUser": &user,
            "pwd": password,
            "roles": [{ "role": "readWrite", "db": db }],
        })
        .await
        .unwrap();
    // The launcher's URL names no database (`mongodb://HOST:PORT/?…`).
    let rest = url.trim_start_matches("mongodb://");
    let (hosts, query) = rest.split_once("/?").unwrap_or((rest.trim_end_matches('/'), ""));
    (user, hosts.to_owned(), format!("{query}&authSource={db}").trim_start_matches('&').to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongodb_a_users_password_works_from_the_url_or_the_environment_and_is_never_printed() {
    let password = "s3cret-cli-mongodb";
    let (user, hosts, query) = mongodb_user(password).await;
    let collection = unique("cli");
    let client = mongodb::Client::with_uri_str(format!(
        "mongodb://{user}:{password}@{hosts}/shedlock_cli?{query}"
    ))
    .await
    .unwrap();
    let holder = shedlock_mongodb::MongoLockProvider::builder(client.database("shedlock_cli"))
        .collection(&collection)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    holder.create_collection().await.unwrap();
    let _lock = holder.try_lock(&cfg("nightly")).await.unwrap().expect("free");
    let holder: Arc<dyn LockProvider> = Arc::new(holder);
    let in_url = format!("mongodb://{user}:{password}@{hosts}/shedlock_cli?{query}");
    let user_only = format!("mongodb://{user}@{hosts}/shedlock_cli?{query}");
    let wrong = "s3cret-cli-mongodb-wrong";
    let secrets = [password, wrong];
    for (url, env) in
        [(in_url.as_str(), vec![]), (&user_only, vec![("SHEDLOCK_PASSWORD", password)])]
    {
        let args = ["--url", url, "--collection", &collection, "--json", "show", "nightly"];
        let ran = hidden(&args, &env, &secrets).await;
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        let v: Value = serde_json::from_str(&ran.stdout).unwrap();
        assert_eq!((v["held"].clone(), v["locked_by"].clone()), (true.into(), HOLDER.into()));
    }
    let wrong_url = format!("mongodb://{user}:{wrong}@{hosts}/shedlock_cli?{query}");
    for (url, env) in
        [(wrong_url.as_str(), vec![]), (&user_only, vec![("SHEDLOCK_PASSWORD", wrong)])]
    {
        let args = ["--url", url, "--collection", &collection, "--timeout-secs", "5", "list"];
        let ran = hidden(&args, &env, &secrets).await;
        assert_eq!(ran.code, 2, "a wrong password is refused: {}", ran.stdout);
        assert!(ran.stderr.contains("uthentication"), "{}", ran.stderr);
    }
    assert!(holder.inspect("nightly").await.unwrap().unwrap().held);
}
