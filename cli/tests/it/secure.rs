//! TLS against the launcher's secure servers (`shedlock_launcher::shared_secure`: TLS required,
//! every client authenticated, a throwaway CA; PostgreSQL, MariaDB, Redis, NATS, etcd,
//! ZooKeeper):
//! the tool reads a held lock over TLS verified
//! against that CA, given in the URL or by `--ca-file`/`SHEDLOCK_CA_FILE`, with the password in
//! the URL or in `SHEDLOCK_PASSWORD`; without the CA (the system's roots) or with another CA it
//! fails, saying why; a wrong password fails too; and no password ever shows in what it prints.
//!
//! The tool runs as each server's administrator: the launcher's application user holds no
//! privilege on lock data (ZooKeeper has no administrator: there both are the application's
//! digest identity).

use std::{net::SocketAddr, sync::Arc};

use serde_json::Value;
use shedlock::{Lock, LockProvider, ProviderBuilder};
use shedlock_launcher::{Backend, Secure};

use crate::{HOLDER, cfg, pki::Pki, shedlock, unique};

/// One secure server, the holder of a lock on it, and the ways of reaching it.
struct Session {
    /// Who holds the lock the tool shows.
    holder: Arc<dyn LockProvider>,
    _lock: Lock,
    name: String,
    /// The store options besides the URL (`--table`, `--prefix`).
    options: Vec<String>,
    /// The administrator's URL with the CA (in the URL, or as `--ca-file` in `options_ca`).
    with_ca: String,
    /// `--ca-file CA` when the URL cannot carry the CA; empty when it does.
    options_ca: Vec<String>,
    /// The administrator's URL without a password and with TLS required but no CA: the
    /// environment then gives both.
    no_password: String,
    /// The administrator's URL with TLS verified but no CA: the system's roots are used.
    without_ca: String,
    /// The URL with the CA and a wrong password, [`Session::wrong`].
    wrong_password: String,
    /// The password of the URLs' user (the administrator's, or ZooKeeper's application
    /// identity's).
    password: &'static str,
    secure: &'static Secure,
    /// A CA this server's certificate was not signed by (and its directory).
    other_ca: String,
    _dir: tempfile::TempDir,
}

impl Session {
    /// The secrets no run may print: both of the server's passwords and the wrong one.
    fn secrets(&self) -> [&str; 3] {
        [self.secure.admin_password(), self.secure.app_password(), self.wrong()]
    }

    fn wrong(&self) -> &'static str {
        "s3cret-cli-wrong-password"
    }

    fn ca(&self) -> String {
        self.secure.ca_path().display().to_string()
    }

    /// Runs `show NAME --json` with `url` and `extra` options and `env`.
    async fn show(&self, url: Option<&str>, extra: &[&str], env: &[(&str, &str)]) -> crate::Ran {
        let mut args: Vec<&str> = url.map_or_else(Vec::new, |u| vec!["--url", u]);
        args.extend(self.options.iter().map(String::as_str));
        args.extend(extra);
        args.extend(["--timeout-secs", "5", "--json", "show", &self.name]);
        let ran = shedlock(&args, env, "").await;
        ran.assert_hides(&self.secrets());
        ran
    }

    /// The tool shows the held lock over TLS verified against the CA: URL with the CA and the
    /// password; URL without either, both from the environment; and `--ca-file`.
    async fn verified_tls_shows_the_lock(&self) {
        let ca = self.ca();
        let ca_opts: Vec<&str> = self.options_ca.iter().map(String::as_str).collect();
        let runs = [
            self.show(Some(&self.with_ca), &ca_opts, &[]).await,
            self.show(
                None,
                &[],
                &[
                    ("SHEDLOCK_URL", &self.no_password),
                    ("SHEDLOCK_PASSWORD", self.password),
                    ("SHEDLOCK_CA_FILE", &ca),
                ],
            )
            .await,
            self.show(Some(&self.without_ca), &["--ca-file", &ca], &[]).await,
        ];
        for ran in runs {
            assert_eq!(ran.code, 0, "the held lock, over TLS: {}", ran.stderr);
            let v: Value = serde_json::from_str(&ran.stdout).expect(&ran.stdout);
            assert_eq!((v["held"].clone(), v["locked_by"].clone()), (true.into(), HOLDER.into()));
        }
        assert!(self.holder.inspect(&self.name).await.unwrap().unwrap().held);
    }

    /// Without the CA (the system's roots) and with another CA, the server's certificate is
    /// refused, and the error says it is about the certificate.
    async fn an_unknown_authority_is_refused(&self) {
        let other = [
            self.show(Some(&self.without_ca), &[], &[]).await,
            self.show(Some(&self.without_ca), &["--ca-file", &self.other_ca], &[]).await,
        ];
        for ran in other {
            assert_eq!(ran.code, 2, "an unverified server must be refused: {}", ran.stdout);
            // A certificate not signed by the CA trusted; ZooKeeper without a CA is a plaintext
            // client on a TLS-only port, which the provider's error says.
            let err = ran.stderr.to_ascii_lowercase();
            assert!(
                ["certificate", "unknownissuer", "tls"].iter().any(|w| err.contains(w)),
                "{err}"
            );
            if err.contains("unknownissuer") {
                assert!(err.contains("--ca-file"), "the tool says how to trust a CA: {err}");
            }
        }
    }

    /// A wrong password, in the URL or in the environment, is refused over verified TLS.
    async fn a_wrong_password_is_refused(&self) {
        let ca = self.ca();
        let ca_opts: Vec<&str> = self.options_ca.iter().map(String::as_str).collect();
        let runs = [
            self.show(Some(&self.wrong_password), &ca_opts, &[]).await,
            self.show(
                Some(&self.no_password),
                &["--ca-file", &ca],
                &[("SHEDLOCK_PASSWORD", self.wrong())],
            )
            .await,
        ];
        for ran in runs {
            assert_eq!(ran.code, 2, "a wrong password must be refused: {}", ran.stdout);
            let err = ran.stderr.to_ascii_lowercase();
            assert!(
                ["password", "auth", "access denied", "wrongpass"].iter().any(|w| err.contains(w)),
                "the refusal says why: {err}"
            );
        }
    }
}

async fn secure(backend: Backend, label: &str) -> (&'static Secure, SocketAddr) {
    let service = shedlock_test_support::secure::service(backend, label)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (service.secure().expect("a secure launch"), service.addr().expect("its address"))
}

fn other_ca() -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::generate(dir.path());
    (pki.ca.display().to_string(), dir)
}

async fn postgres() -> Session {
    let (secure, addr) = secure(Backend::Postgres, "PostgreSQL").await;
    let (user, pw) = (secure.admin_user(), secure.admin_password());
    let with_ca = secure.url_for(addr, user, pw);
    let pool = shedlock_postgres::recommended_pool_options().connect(&with_ca).await.unwrap();
    let table = unique("cli_tls").replace('-', "_");
    let holder = shedlock_postgres::PostgresLockProvider::builder(pool)
        .table(&table)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    holder.create_table().await.unwrap();
    let name = "jobs/tls".to_owned();
    let lock = holder.try_lock(&cfg(&name)).await.unwrap().expect("free");
    let (other_ca, dir) = other_ca();
    Session {
        holder: Arc::new(holder),
        _lock: lock,
        name,
        options: vec!["--table".into(), table],
        options_ca: vec![],
        no_password: format!("postgres://{user}@{addr}/postgres?sslmode=require"),
        without_ca: format!("postgres://{user}:{pw}@{addr}/postgres?sslmode=verify-full"),
        wrong_password: secure.url_for(addr, user, "s3cret-cli-wrong-password"),
        with_ca,
        password: pw,
        secure,
        other_ca,
        _dir: dir,
    }
}

async fn mariadb() -> Session {
    let (secure, addr) = secure(Backend::MariaDb, "MariaDB").await;
    let (user, pw) = (secure.admin_user(), secure.admin_password());
    let with_ca = secure.url_for(addr, user, pw);
    let pool = shedlock_mysql::recommended_pool_options().connect(&with_ca).await.unwrap();
    let table = unique("cli_tls").replace('-', "_");
    let holder = shedlock_mysql::MySqlLockProvider::builder(pool)
        .table(&table)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    holder.create_table().await.unwrap();
    let name = "jobs/tls".to_owned();
    let lock = holder.try_lock(&cfg(&name)).await.unwrap().expect("free");
    let (other_ca, dir) = other_ca();
    Session {
        holder: Arc::new(holder),
        _lock: lock,
        name,
        options: vec!["--table".into(), table],
        options_ca: vec![],
        // The mariadb:// spelling.
        no_password: format!("mariadb://{user}@{addr}/shedlock?ssl-mode=REQUIRED"),
        without_ca: format!("mysql://{user}:{pw}@{addr}/shedlock?ssl-mode=VERIFY_IDENTITY"),
        wrong_password: secure.url_for(addr, user, "s3cret-cli-wrong-password"),
        with_ca,
        password: pw,
        secure,
        other_ca,
        _dir: dir,
    }
}

async fn redis() -> Session {
    let (secure, addr) = secure(Backend::Redis, "Redis").await;
    let (user, pw) = (secure.admin_user(), secure.admin_password());
    let url = secure.url_for(addr, user, pw);
    let client = redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(secure.ca_pem().as_bytes().to_vec()),
        },
    )
    .unwrap();
    let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    let prefix = format!("{}:", unique("cli-tls"));
    let holder = shedlock_redis::RedisLockProvider::builder(conn)
        .key_prefix(&prefix)
        .locked_by(HOLDER)
        .build()
        .await
        .unwrap();
    let name = "jobs/tls".to_owned();
    let lock = holder.try_lock(&cfg(&name)).await.unwrap().expect("free");
    let (other_ca, dir) = other_ca();
    Session {
        holder: Arc::new(holder),
        _lock: lock,
        name,
        options: vec!["--prefix".into(), prefix],
        // A Redis URL cannot carry a CA.
        options_ca: vec!["--ca-file".into(), secure.ca_path().display().to_string()],
        no_password: format!("rediss://{user}@{addr}"),
        without_ca: url.clone(),
        wrong_password: secure.url_for(addr, user, "s3cret-cli-wrong-password"),
        with_ca: url,
        password: pw,
        secure,
        other_ca,
        _dir: dir,
    }
}

async fn nats() -> Session {
    let (secure, addr) = secure(Backend::Nats, "NATS").await;
    let (user, pw) = (secure.admin_user(), secure.admin_password());
    let client = async_nats::ConnectOptions::new()
        .user_and_password(user.into(), pw.into())
        .add_root_certificates(secure.ca_path())
        .require_tls(true)
        .connect(format!("tls://{addr}"))
        .await
        .unwrap();
    let bucket = unique("cli_tls").replace(['-', '.'], "_");
    let holder = shedlock_nats::NatsLockProvider::builder(client)
        .bucket(&bucket)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    holder.create_bucket().await.unwrap();
    let name = "jobs/tls".to_owned();
    let lock = holder.try_lock(&cfg(&name)).await.unwrap().expect("free");
    let (other_ca, dir) = other_ca();
    let url = secure.url_for(addr, user, pw);
    Session {
        holder: Arc::new(holder),
        _lock: lock,
        name,
        options: vec!["--bucket".into(), bucket],
        // A NATS URL cannot carry a CA.
        options_ca: vec!["--ca-file".into(), secure.ca_path().display().to_string()],
        no_password: format!("tls://{user}@{addr}"),
        without_ca: url.clone(),
        wrong_password: secure.url_for(addr, user, "s3cret-cli-wrong-password"),
        with_ca: url,
        password: pw,
        secure,
        other_ca,
        _dir: dir,
    }
}

/// etcd's administrator is `root`; the prefix is the provider's key prefix.
#[cfg(all(feature = "etcd", feature = "tls-rustls"))]
async fn etcd() -> Session {
    let (secure, addr) = secure(Backend::Etcd, "etcd").await;
    let (user, pw) = (secure.admin_user(), secure.admin_password());
    let client = shedlock_etcd::EtcdClientBuilder::new([format!("https://{addr}")])
        .tls_ca_pem(secure.ca_pem())
        .user(user, pw)
        .connect()
        .await
        .unwrap();
    let prefix = format!("{}/", unique("cli-tls"));
    let holder = shedlock_etcd::EtcdLockProvider::builder(client)
        .key_prefix(&prefix)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    let name = "jobs-tls".to_owned();
    let lock = holder.try_lock(&cfg(&name)).await.unwrap().expect("free");
    let (other_ca, dir) = other_ca();
    let url = format!("https://{user}:{pw}@{addr}");
    Session {
        holder: Arc::new(holder),
        _lock: lock,
        name,
        options: vec!["--prefix".into(), prefix],
        // An etcd URL cannot carry a CA.
        options_ca: vec!["--ca-file".into(), secure.ca_path().display().to_string()],
        no_password: format!("https://{user}@{addr}"),
        without_ca: url.clone(),
        wrong_password: format!("https://{user}:s3cret-cli-wrong-password@{addr}"),
        with_ca: url,
        password: pw,
        secure,
        other_ca,
        _dir: dir,
    }
}

/// ZooKeeper has no administrator: every session authenticates (`enforce.auth`, digest), here
/// as the application's identity, whose nodes are creator-only.
async fn zookeeper() -> Session {
    let (secure, addr) = secure(Backend::ZooKeeper, "ZooKeeper").await;
    let (user, pw) = (secure.app_user(), secure.app_password());
    let root = format!("/{}", unique("cli-tls"));
    let holder = shedlock_zookeeper::ZooKeeperLockProvider::builder(addr.to_string())
        .tls_ca_pem(secure.ca_pem())
        .digest_auth(user, pw)
        .root(&root)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    let name = "jobs-tls".to_owned();
    let lock = holder.try_lock(&cfg(&name)).await.unwrap().expect("free");
    let (other_ca, dir) = other_ca();
    let url = format!("zookeeper://{user}:{pw}@{addr}{root}");
    Session {
        holder: Arc::new(holder),
        _lock: lock,
        name,
        options: vec![],
        // ZooKeeper has no URL form for TLS: the CA is always given apart.
        options_ca: vec!["--ca-file".into(), secure.ca_path().display().to_string()],
        no_password: format!("zookeeper://{user}@{addr}{root}"),
        without_ca: url.clone(),
        wrong_password: format!("zookeeper://{user}:s3cret-cli-wrong-password@{addr}{root}"),
        with_ca: url,
        password: pw,
        secure,
        other_ca,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_verified_against_the_ca_shows_the_lock_and_never_the_password() {
    postgres().await.verified_tls_shows_the_lock().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_without_the_servers_ca_refuses_its_certificate() {
    postgres().await.an_unknown_authority_is_refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_wrong_password_is_refused_and_never_printed() {
    postgres().await.a_wrong_password_is_refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_over_tls_verified_against_the_ca_shows_the_lock_and_never_the_password() {
    mariadb().await.verified_tls_shows_the_lock().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_without_the_servers_ca_refuses_its_certificate() {
    mariadb().await.an_unknown_authority_is_refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_wrong_password_is_refused_and_never_printed() {
    mariadb().await.a_wrong_password_is_refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_verified_against_the_ca_shows_the_lock_and_never_the_password() {
    redis().await.verified_tls_shows_the_lock().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_without_the_servers_ca_refuses_its_certificate() {
    redis().await.an_unknown_authority_is_refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_wrong_password_is_refused_and_never_printed() {
    redis().await.a_wrong_password_is_refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_over_tls_verified_against_the_ca_shows_the_lock_and_never_the_password() {
    nats().await.verified_tls_shows_the_lock().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_without_the_servers_ca_refuses_its_certificate() {
    nats().await.an_unknown_authority_is_refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_wrong_password_is_refused_and_never_printed() {
    nats().await.a_wrong_password_is_refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_over_tls_verified_against_the_ca_shows_the_lock_and_never_the_password() {
    zookeeper().await.verified_tls_shows_the_lock().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_without_the_servers_ca_refuses_its_certificate() {
    zookeeper().await.an_unknown_authority_is_refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_wrong_digest_password_is_refused_and_never_printed() {
    zookeeper().await.a_wrong_password_is_refused().await;
}

#[cfg(all(feature = "etcd", feature = "tls-rustls"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_over_tls_verified_against_the_ca_shows_the_lock_and_never_the_password() {
    etcd().await.verified_tls_shows_the_lock().await;
}

#[cfg(all(feature = "etcd", feature = "tls-rustls"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_without_the_servers_ca_refuses_its_certificate() {
    etcd().await.an_unknown_authority_is_refused().await;
}

#[cfg(all(feature = "etcd", feature = "tls-rustls"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_wrong_password_is_refused_and_never_printed() {
    etcd().await.a_wrong_password_is_refused().await;
}

/// etcd's login carries the password as is: the tool never sends it over `etcd://` or
/// `http://` (checked without a server: it is refused before connecting).
#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_a_password_is_never_sent_over_plaintext() {
    for url in ["etcd://ops:s3cret-cli-etcd@127.0.0.1:1", "http://ops:s3cret-cli-etcd@127.0.0.1:1"]
    {
        let ran = shedlock(&["--url", url, "--timeout-secs", "2", "show", "x"], &[], "").await;
        ran.assert_hides(&["s3cret-cli-etcd"]);
        assert_eq!(ran.code, 2, "{url}");
        assert!(ran.stderr.contains("plaintext"), "{url}: {}", ran.stderr);
    }
}

/// The launcher's application user on NATS may publish nothing at first: the tool says which
/// permission is missing at once (the provider's permission watch), not after its time limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_user_without_permissions_is_told_which_one_at_once() {
    let session = nats().await;
    let secure = session.secure;
    let addr = session.with_ca.rsplit_once('@').unwrap().1.to_owned();
    let url = format!("tls://{}@{addr}", secure.app_user());
    let ca = session.ca();
    let started = std::time::Instant::now();
    let mut args = vec!["--url", &url, "--ca-file", &ca, "--timeout-secs", "20"];
    args.extend(session.options.iter().map(String::as_str));
    args.extend(["show", &session.name]);
    let ran = shedlock(&args, &[("SHEDLOCK_PASSWORD", secure.app_password())], "").await;
    ran.assert_hides(&session.secrets());
    assert_eq!(ran.code, 2, "{}", ran.stdout);
    assert!(ran.stderr.contains("permission"), "{}", ran.stderr);
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "{:?}", started.elapsed());
}

/// A Redis Cluster's nodes over TLS take the same `--ca-file` (the cluster client's `certs`);
/// checked without a server: a CA with a plaintext node URL is refused before connecting.
#[tokio::test]
async fn a_ca_file_with_a_plaintext_redis_cluster_node_is_refused() {
    let (ca, _dir) = other_ca();
    let ran = shedlock(
        &["--url", "rediss://127.0.0.1:1,redis://127.0.0.1:2", "--ca-file", &ca, "list"],
        &[],
        "",
    )
    .await;
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("plaintext") && ran.stderr.contains("rediss://"), "{}", ran.stderr);
}

/// memcached has no login: over its TLS listener (`-Z`) the tool shows a lock with `--ca-file`,
/// and without the CA, or with another one, it is refused, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_over_tls_verified_against_the_ca_shows_the_lock_and_refuses_another_ca() {
    let (secure, addr) = secure(Backend::Memcached, "memcached").await;
    let prefix = format!("{}:", unique("cli-tls"));
    let holder = shedlock_memcached::MemcachedLockProvider::builder(addr.to_string())
        .tls_ca_pem(secure.ca_pem())
        .key_prefix(&prefix)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    let name = "jobs-tls";
    let _lock = holder.try_lock(&cfg(name)).await.unwrap().expect("free");
    let url = format!("memcache://{addr}");
    let ca = secure.ca_path().display().to_string();
    let (other, _dir) = other_ca();
    let show = |extra: Vec<String>| {
        let url = url.clone();
        let prefix = prefix.clone();
        async move {
            let mut args = vec!["--url".to_owned(), url, "--prefix".to_owned(), prefix];
            args.extend(extra);
            args.extend(["--timeout-secs", "5", "--json", "show", name].map(String::from));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            shedlock(&args, &[], "").await
        }
    };
    let ran = show(vec!["--ca-file".into(), ca]).await;
    assert_eq!(ran.code, 0, "the held lock, over TLS: {}", ran.stderr);
    let v: Value = serde_json::from_str(&ran.stdout).expect(&ran.stdout);
    assert_eq!((v["held"].clone(), v["locked_by"].clone()), (true.into(), HOLDER.into()));
    for (what, extra) in
        [("no CA: plaintext", vec![]), ("another CA", vec!["--ca-file".into(), other])]
    {
        let ran = show(extra).await;
        assert_eq!(ran.code, 2, "{what} must be refused: {}", ran.stdout);
        let err = ran.stderr.to_ascii_lowercase();
        assert!(["certificate", "tls"].iter().any(|w| err.contains(w)), "{what}: {err}");
    }
}
