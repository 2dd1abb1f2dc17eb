//! The `shedlock` binary end to end, against real stores: a process holds a lock, the tool lists
//! and shows it with its holder and expiry, refuses to release it unconfirmed, releases it with
//! `--yes`, and the holder's next extend reports `LockLost`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod nats_tls;
mod pki;
mod secrets;
mod secure;

use std::{
    process::Stdio,
    sync::Arc,
    time::{Duration, SystemTime},
};

use serde_json::Value;
use shedlock::{Error, LockConfig, LockProvider, ProviderBuilder};
use shedlock_launcher::Backend;
use shedlock_sql::{Dialect, SqlLockProviderBuilder};
use tokio::io::AsyncWriteExt;

const HOLDER: &str = "ops-test-holder";

/// What one run of the tool printed, and its exit code.
#[derive(Debug)]
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// Fails the test if any of `secrets` is in what the tool printed.
    #[track_caller]
    fn assert_hides(&self, secrets: &[&str]) {
        for s in secrets.iter().filter(|s| !s.is_empty()) {
            assert!(
                !self.stdout.contains(s) && !self.stderr.contains(s),
                "the tool printed a secret:\nstdout: {}\nstderr: {}",
                self.stdout.replace(s, "<THE SECRET>"),
                self.stderr.replace(s, "<THE SECRET>"),
            );
        }
    }
}

/// Runs `shedlock ARGS` with `env`, writing `stdin` to it. `RUST_LOG=trace` is always set, so
/// that a log subscriber added later is covered by every test's check that no secret is printed.
async fn shedlock(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Ran {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_shedlock"))
        .args(args)
        .env_remove("SHEDLOCK_URL")
        .env_remove("SHEDLOCK_PASSWORD")
        .env_remove("SHEDLOCK_CA_FILE")
        .env("RUST_LOG", "trace")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the shedlock binary runs");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("shedlock finished within 60 s")
        .unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn cfg(name: &str) -> LockConfig {
    LockConfig::new(name, Duration::from_secs(3600), Duration::ZERO).unwrap()
}

/// The whole operator's session on one store: `store` are the tool's store options, `holder`
/// a provider on the same table whose `locked_by` is [`HOLDER`].
async fn an_operator_sees_the_holder_and_releases_the_lock_safely(
    store: &[&str],
    env: &[(&str, &str)],
    holder: Arc<dyn LockProvider>,
    prefix: &str,
) {
    let name = format!("{prefix}digest");
    let other = format!("{prefix}other");
    let args = |extra: &[&str]| -> Vec<String> {
        store.iter().chain(extra).map(|s| (*s).to_owned()).collect()
    };
    // The secrets of the session (an AWS secret key, a URL's password), never printed.
    let mut secrets: Vec<String> = env
        .iter()
        .filter(|(k, _)| k.contains("SECRET") || k.contains("PASSWORD"))
        .map(|(_, v)| (*v).to_owned())
        .collect();
    secrets.extend(store.iter().chain(env.iter().map(|(_, v)| v)).filter_map(|s| {
        let rest = s.split_once("://")?.1;
        let userinfo = rest[..rest.find('/').unwrap_or(rest.len())].rsplit_once('@')?.0;
        Some(userinfo.split_once(':')?.1.to_owned())
    }));
    let run = async |extra: &[&str], stdin: &str| {
        let a = args(extra);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let ran = shedlock(&refs, env, stdin).await;
        ran.assert_hides(&secrets.iter().map(String::as_str).collect::<Vec<_>>());
        ran
    };
    let mut lock = holder.try_lock(&cfg(&name)).await.unwrap().expect("free");
    let _other = holder.try_lock(&cfg(&other)).await.unwrap().expect("free");
    let taken = SystemTime::now();

    let caps = holder.capabilities();
    let list = run(&["list", prefix], "").await;
    if caps.list {
        assert_eq!(list.code, 0, "{}", list.stderr);
        let line = list.stdout.lines().find(|l| l.starts_with(&name)).expect(&list.stdout);
        assert!(line.contains("held") && line.contains(HOLDER), "{line}");
        assert!(list.stdout.lines().any(|l| l.starts_with(&other)), "{}", list.stdout);
    } else {
        assert_eq!(list.code, 2, "a store that cannot list says so: {}", list.stdout);
        assert!(list.stderr.contains("list"), "{}", list.stderr);
    }

    let show = run(&["--json", "show", &name], "").await;
    assert_eq!(show.code, 0, "show exits 0 for a held lock: {}", show.stderr);
    let v: Value = serde_json::from_str(&show.stdout).expect(&show.stdout);
    assert_eq!(v["held"], true);
    assert_eq!(v["locked_by"], HOLDER);
    assert_eq!(v["judged_by"], if caps.server_time { "server" } else { "client" });
    assert_eq!(v["fencing_token"].as_u64(), lock.fencing_token());
    // Every store here keeps the lease's end, except ZooKeeper's ephemeral nodes (the session
    // is the lease).
    if let Some(until) = v["lock_until"].as_str() {
        let until = chrono::DateTime::parse_from_rfc3339(until).unwrap();
        let expected = chrono::DateTime::<chrono::Utc>::from(taken + Duration::from_secs(3600));
        let off = (until.timestamp_millis() - expected.timestamp_millis()).abs();
        assert!(off < 60_000, "lock_until {until} is not an hour after the acquisition ({off} ms)");
    } else {
        assert_eq!(v["lock_until"], Value::Null, "{v}");
    }

    let none = run(&["show", &format!("{prefix}never")], "").await;
    assert_eq!(none.code, 1, "show exits 1 when there is no record: {}", none.stderr);

    let declined = run(&["release", &name], "n\n").await;
    assert_eq!(declined.code, 3, "not confirmed: {}", declined.stderr);
    assert!(holder.inspect(&name).await.unwrap().unwrap().held, "declined: still held");

    let released = run(&["release", &name, "--yes"], "").await;
    assert_eq!(released.code, 0, "{}", released.stderr);
    assert!(released.stdout.contains("released"), "{}", released.stdout);
    let lost = lock.extend(Duration::from_secs(3600), Duration::ZERO).await.unwrap_err();
    assert!(matches!(lost, Error::LockLost { .. }), "the holder's extend gave {lost:?}");
    let free = run(&["show", &name], "").await;
    assert_eq!(free.code, 1, "show exits 1 once released: {}", free.stdout);
    let again = run(&["release", &name, "--yes"], "").await;
    assert_eq!(again.code, 1, "nothing left to release: {}", again.stderr);

    if !caps.list {
        return;
    }
    let watch = run(&["--json", "watch", prefix, "--count", "2", "--interval-secs", "1"], "").await;
    assert_eq!(watch.code, 0, "{}", watch.stderr);
    let refreshes: Vec<Value> =
        watch.stdout.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
    assert_eq!(refreshes.len(), 2);
    let held: Vec<&str> = refreshes[1]["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["held"] == true)
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(held, [other.as_str()], "only the other lock is still held");
}

fn unique(prefix: &str) -> String {
    shedlock_test_support::unique(prefix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    let pool = shedlock_sqlite::recommended_pool_options()
        .connect_with(shedlock_sqlite::recommended_connect_options(&path))
        .await
        .unwrap();
    let holder =
        shedlock_sqlite::SqliteLockProvider::builder(pool).locked_by(HOLDER).build().unwrap();
    holder.create_table().await.unwrap();
    let url = format!("sqlite://{}", path.display());
    an_operator_sees_the_holder_and_releases_the_lock_safely(
        &[],
        &[("SHEDLOCK_URL", &url)],
        Arc::new(holder),
        "jobs/",
    )
    .await;
}

/// The session on a database server: a holder on a fresh table of `builder`'s database.
async fn on_a_server<D: Dialect>(
    builder: SqlLockProviderBuilder<D>,
    store: &[&str],
    env: &[(&str, &str)],
    table: &str,
) {
    let holder = builder.table(table).locked_by(HOLDER).build().unwrap();
    holder.create_table().await.unwrap();
    an_operator_sees_the_holder_and_releases_the_lock_safely(store, env, Arc::new(holder), "jobs/")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let url = shedlock_test_support::url(Backend::Postgres, "PostgreSQL").await;
    let table = unique("cli_ops").replace('-', "_");
    let pool = shedlock_postgres::recommended_pool_options().connect(&url).await.unwrap();
    let builder = shedlock_postgres::PostgresLockProvider::builder(pool);
    on_a_server(builder, &["--url", &url, "--table", &table], &[], &table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let url = shedlock_test_support::url(Backend::MariaDb, "MariaDB").await;
    let table = unique("cli_ops").replace('-', "_");
    let pool = shedlock_mysql::recommended_pool_options().connect(&url).await.unwrap();
    let builder = shedlock_mysql::MySqlLockProvider::builder(pool);
    // The mariadb:// spelling, from the environment.
    let mariadb_url = url.replacen("mysql://", "mariadb://", 1);
    on_a_server(builder, &["--table", &table], &[("SHEDLOCK_URL", &mariadb_url)], &table).await;
}

#[tokio::test]
async fn an_unknown_scheme_is_refused_naming_the_known_ones() {
    let ran = shedlock(&["--url", "cassandra://127.0.0.1:1", "list"], &[], "").await;
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("cassandra") && ran.stderr.contains("redis://"), "{}", ran.stderr);
}

/// The key-value stores: a holder with its own prefix (or bucket, collection, root) and the
/// tool's options that name the same one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let url = shedlock_test_support::url(Backend::Redis, "Redis").await;
    let prefix = format!("{}:", unique("cli"));
    let conn = redis::aio::ConnectionManager::new(redis::Client::open(url.as_str()).unwrap())
        .await
        .unwrap();
    let holder = shedlock_redis::RedisLockProvider::builder(conn)
        .key_prefix(&prefix)
        .environment("ops")
        .locked_by(HOLDER)
        .build()
        .await
        .unwrap();
    let store = ["--url", &url, "--prefix", &prefix, "--environment", "ops"];
    an_operator_sees_the_holder_and_releases_the_lock_safely(
        &store,
        &[],
        Arc::new(holder),
        "jobs/",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let urls = shedlock_test_support::url(Backend::RedisCluster, "Redis Cluster").await;
    let prefix = format!("{}:", unique("cli"));
    let nodes: Vec<&str> = urls.split(',').collect();
    let client = redis::cluster::ClusterClientBuilder::new(nodes).build().unwrap();
    let holder =
        shedlock_redis::RedisLockProvider::builder(client.get_async_connection().await.unwrap())
            .key_prefix(&prefix)
            .locked_by(HOLDER)
            .build()
            .await
            .unwrap();
    // The node URLs, comma-separated, from the environment: a cluster.
    an_operator_sees_the_holder_and_releases_the_lock_safely(
        &["--prefix", &prefix],
        &[("SHEDLOCK_URL", &urls)],
        Arc::new(holder),
        "jobs/",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let url = shedlock_test_support::url(Backend::Memcached, "memcached").await;
    let address = url.trim_start_matches("memcache://").to_owned();
    let prefix = format!("{}:", unique("cli"));
    let holder = shedlock_memcached::MemcachedLockProvider::builder(address)
        .key_prefix(&prefix)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    an_operator_sees_the_holder_and_releases_the_lock_safely(
        &["--url", &url, "--prefix", &prefix],
        &[],
        Arc::new(holder),
        "jobs/",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let url = shedlock_test_support::url(Backend::Nats, "NATS").await;
    let bucket = unique("cli").replace(['-', '.'], "_");
    let client = async_nats::connect(url.as_str()).await.unwrap();
    let holder = shedlock_nats::NatsLockProvider::builder(client)
        .bucket(&bucket)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    holder.create_bucket().await.unwrap();
    an_operator_sees_the_holder_and_releases_the_lock_safely(
        &["--url", &url, "--bucket", &bucket],
        &[],
        Arc::new(holder),
        "jobs/",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongodb_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let url = shedlock_test_support::url(Backend::MongoDb, "MongoDB").await;
    let collection = unique("cli");
    let client = mongodb::Client::with_uri_str(&url).await.unwrap();
    let holder = shedlock_mongodb::MongoLockProvider::builder(client.database("shedlock_cli"))
        .collection(&collection)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    holder.create_collection().await.unwrap();
    // The launcher's URL names no database (`mongodb://HOST:PORT/?…`): the tool's names one.
    let (base, query) = url.split_once("/?").unwrap_or((url.trim_end_matches('/'), ""));
    let with_db = format!("{base}/shedlock_cli?{query}");
    an_operator_sees_the_holder_and_releases_the_lock_safely(
        &["--url", &with_db, "--collection", &collection],
        &[],
        Arc::new(holder),
        "jobs/",
    )
    .await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let url = shedlock_test_support::url(Backend::Etcd, "etcd").await;
    let prefix = format!("{}/", unique("cli"));
    let client = etcd_client::Client::connect([url.as_str()], None).await.unwrap();
    let holder = shedlock_etcd::EtcdLockProvider::builder(client)
        .key_prefix(&prefix)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    // The etcd:// spelling of the launcher's http:// endpoint.
    let etcd_url = url.replacen("http://", "etcd://", 1);
    an_operator_sees_the_holder_and_releases_the_lock_safely(
        &["--url", &etcd_url, "--prefix", &prefix],
        &[],
        Arc::new(holder),
        "jobs/",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let connect = shedlock_test_support::url(Backend::ZooKeeper, "ZooKeeper").await;
    let root = format!("/{}", unique("cli"));
    let holder = shedlock_zookeeper::ZooKeeperLockProvider::builder(connect.as_str())
        .root(&root)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    let url = format!("zookeeper://{connect}{root}");
    an_operator_sees_the_holder_and_releases_the_lock_safely(
        &["--url", &url],
        &[],
        Arc::new(holder),
        "jobs-",
    )
    .await;
}

/// The AWS settings of the tool's process for the local server at `endpoint`.
fn aws_env(endpoint: &str) -> Vec<(&'static str, String)> {
    let (id, secret) = shedlock_test_support::aws::credentials();
    vec![
        ("AWS_ENDPOINT_URL", endpoint.to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", id),
        ("AWS_SECRET_ACCESS_KEY", secret),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let endpoint = shedlock_test_support::url(Backend::DynamoDb, "DynamoDB").await;
    let table = unique("cli");
    let config = shedlock_test_support::aws::sdk_config(&endpoint);
    let holder = shedlock_dynamodb::DynamoDbLockProvider::builder_from_config(&config)
        .table(&table)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    holder.create_table().await.unwrap();
    let env = aws_env(&endpoint);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let url = format!("dynamodb://{table}");
    an_operator_sees_the_holder_and_releases_the_lock_safely(
        &["--url", &url],
        &env,
        Arc::new(holder),
        "jobs/",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_an_operator_sees_the_holder_and_releases_the_lock_safely() {
    let endpoint = shedlock_test_support::url(Backend::S3, "S3").await;
    let bucket = unique("cli").to_ascii_lowercase().replace('_', "-");
    let config = shedlock_test_support::aws::sdk_config(&endpoint);
    let holder = shedlock_s3::S3LockProvider::builder_from_config(&config, &bucket)
        .prefix("ops/locks/")
        .locked_by(HOLDER)
        .build()
        .unwrap();
    holder.create_bucket().await.unwrap();
    let env = aws_env(&endpoint);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let url = format!("s3://{bucket}/ops/locks/");
    an_operator_sees_the_holder_and_releases_the_lock_safely(
        &["--url", &url],
        &env,
        Arc::new(holder),
        "jobs/",
    )
    .await;
}

#[tokio::test]
async fn no_url_is_an_error_saying_how_to_give_one() {
    let ran = shedlock(&["list"], &[], "").await;
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("--url") && ran.stderr.contains("SHEDLOCK_URL"), "{}", ran.stderr);
}

#[tokio::test]
async fn a_password_is_never_printed_even_when_the_server_is_unreachable() {
    let in_url = shedlock(
        &["--url", "postgres://ops:url-secret-5150@127.0.0.1:1/db", "--timeout-secs", "2", "list"],
        &[],
        "",
    )
    .await;
    let in_env = shedlock(
        &["--url", "mysql://ops@127.0.0.1:1/db", "--timeout-secs", "2", "show", "x"],
        &[("SHEDLOCK_PASSWORD", "env-secret-5150")],
        "",
    )
    .await;
    for (ran, secret) in [(in_url, "url-secret-5150"), (in_env, "env-secret-5150")] {
        assert_eq!(ran.code, 2, "{}", ran.stderr);
        assert!(!ran.stderr.is_empty(), "an unreachable server is reported");
        assert!(!ran.stderr.contains(secret) && !ran.stdout.contains(secret), "{}", ran.stderr);
    }
}

#[tokio::test]
async fn a_missing_table_is_reported_with_the_statement_that_creates_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    let pool = shedlock_sqlite::recommended_pool_options()
        .connect_with(shedlock_sqlite::recommended_connect_options(&path))
        .await
        .unwrap();
    pool.close().await;
    let url = format!("sqlite://{}", path.display());
    let ran = shedlock(&["--url", &url, "list"], &[], "").await;
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("CREATE TABLE"), "{}", ran.stderr);
}

#[tokio::test]
async fn a_mistyped_sqlite_path_is_an_error_and_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let ran = shedlock(&["--url", &format!("sqlite://{}", path.display()), "list"], &[], "").await;
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(!path.exists(), "the tool created {}", path.display());
}
