//! Secure launches ([`LaunchOptions::secure`]): each server is reached with its own command-line
//! client, and refuses plaintext, a missing password and a wrong one, while the administrator
//! over TLS verified against the throwaway CA gets in; restarts keep it so.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::process::Command;

use common::native;
use shedlock_launcher::{Backend, Service};

fn start_secure(backend: Backend) -> Service {
    let s = Service::start(backend, &native().secure(true)).unwrap_or_else(|e| panic!("{e}"));
    let sec = s.secure().expect("a secure launch says what it made");
    for secret in [sec.admin_password(), sec.app_password()] {
        assert!(!format!("{s:?}").contains(secret), "Debug shows a password: {s:?}");
    }
    s
}

/// Runs `program`; returns whether it succeeded and what it printed.
fn attempt(program: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn secure_postgres_takes_only_scram_logins_over_tls() {
    let s = start_secure(Backend::Postgres);
    let sec = s.secure().unwrap();
    let port = s.addr().unwrap().port();
    let ca = sec.ca_path().display().to_string();
    let conn = |user: &str, mode: &str| {
        format!(
            "host=127.0.0.1 port={port} user={user} dbname=postgres sslmode={mode} sslrootcert={ca}"
        )
    };
    let psql =
        |c: String, pw: &str, sql: &str| attempt("psql", &[&c, "-Atc", sql], &[("PGPASSWORD", pw)]);
    let (ok, out) = psql(
        conn("postgres", "verify-full"),
        sec.admin_password(),
        "SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    );
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "TLSv1.3");
    let (ok, out) =
        psql(conn(sec.app_user(), "verify-full"), sec.app_password(), "SELECT current_user");
    assert!(ok, "{out}");
    assert_eq!(out.trim(), sec.app_user());
    // The application role can create nothing.
    let (ok, out) =
        psql(conn(sec.app_user(), "verify-full"), sec.app_password(), "CREATE TABLE t(x int)");
    assert!(!ok && out.contains("permission denied"), "{out}");
    let (ok, out) = psql(conn("postgres", "disable"), sec.admin_password(), "SELECT 1");
    assert!(!ok && out.contains("no encryption"), "plaintext must be refused: {out}");
    let (ok, out) = psql(conn("postgres", "verify-full"), "wrong", "SELECT 1");
    assert!(!ok && out.contains("password authentication failed"), "{out}");
    s.restart().unwrap();
    let (ok, out) = psql(conn(sec.app_user(), "verify-full"), sec.app_password(), "SELECT 1");
    assert!(ok, "after a restart: {out}");
}

#[test]
fn secure_mariadb_takes_only_tls_logins_and_the_app_user_has_no_privilege() {
    let s = start_secure(Backend::MariaDb);
    let sec = s.secure().unwrap();
    let port = s.addr().unwrap().port().to_string();
    let ca = format!("--ssl-ca={}", sec.ca_path().display());
    let sql = |user: &str, pw: &str, tls: bool, q: &str| {
        let u = format!("-u{user}");
        let mut args =
            vec!["--no-defaults", "--protocol=tcp", "-h127.0.0.1", "-P", &port, &u, "-N", "-e", q];
        if tls {
            args.extend(["--ssl", &ca, "--ssl-verify-server-cert"]);
        } else {
            args.push("--skip-ssl");
        }
        attempt("mariadb", &args, &[("MYSQL_PWD", pw)])
    };
    let (ok, out) =
        sql(sec.admin_user(), sec.admin_password(), true, "SHOW STATUS LIKE 'Ssl_version'");
    assert!(ok, "{out}");
    assert!(out.contains("TLSv1.3"), "{out}");
    let (ok, out) = sql(sec.app_user(), sec.app_password(), true, "SHOW GRANTS");
    assert!(ok, "{out}");
    assert!(out.contains("GRANT USAGE") && !out.contains("ALL PRIVILEGES"), "{out}");
    let (ok, out) = sql(sec.admin_user(), sec.admin_password(), false, "SELECT 1");
    assert!(!ok, "plaintext must be refused: {out}");
    let (ok, out) = sql(sec.app_user(), "wrong", true, "SELECT 1");
    assert!(!ok && out.contains("Access denied"), "{out}");
    s.restart().unwrap();
    let (ok, out) = sql(sec.app_user(), sec.app_password(), true, "SELECT 1");
    assert!(ok, "after a restart: {out}");
}

#[test]
fn secure_redis_listens_only_on_tls_and_refuses_the_default_user() {
    let s = start_secure(Backend::Redis);
    let sec = s.secure().unwrap();
    let port = s.addr().unwrap().port().to_string();
    let ca = sec.ca_path().display().to_string();
    let cli = |tls: bool, user: Option<&str>, pw: &str, cmd: &[&str]| {
        let mut args = vec!["-h", "127.0.0.1", "-p", &port, "--no-auth-warning"];
        if tls {
            args.extend(["--tls", "--cacert", &ca]);
        }
        if let Some(u) = user {
            args.extend(["--user", u]);
        }
        args.extend(cmd);
        attempt("redis-cli", &args, &[("REDISCLI_AUTH", pw)])
    };
    let admin = Some(sec.admin_user());
    let (_, out) = cli(true, admin, sec.admin_password(), &["PING"]);
    assert_eq!(out.trim(), "PONG");
    let (_, out) = cli(true, None, "", &["PING"]);
    assert!(out.contains("NOAUTH") || out.contains("WRONGPASS"), "{out}");
    let (_, out) = cli(true, admin, "wrong", &["PING"]);
    assert!(out.contains("WRONGPASS") || out.contains("AUTH failed"), "{out}");
    let (_, out) = cli(false, admin, sec.admin_password(), &["PING"]);
    assert_ne!(out.trim(), "PONG", "plaintext must be refused");
    // A user added by a test survives a restart once saved.
    let pw = format!(">{}", sec.app_password());
    let (_, out) = cli(
        true,
        admin,
        sec.admin_password(),
        &["ACL", "SETUSER", sec.app_user(), "on", &pw, "~app:*", "+ping"],
    );
    assert_eq!(out.trim(), "OK");
    let (_, out) = cli(true, admin, sec.admin_password(), &["ACL", "SAVE"]);
    assert_eq!(out.trim(), "OK");
    s.restart().unwrap();
    let (_, out) = cli(true, Some(sec.app_user()), sec.app_password(), &["PING"]);
    assert_eq!(out.trim(), "PONG", "after a restart");
}

/// `cli` (`redis-cli` or `valkey-cli`) against the server at `addr`, over TLS verified against
/// the launcher's CA or in plaintext, as `user` (the password in `REDISCLI_AUTH`) or without a
/// login.
fn resp_cli(
    cli: &str,
    addr: std::net::SocketAddr,
    sec: &shedlock_launcher::Secure,
    tls: bool,
    user: Option<(&str, &str)>,
    cmd: &[&str],
) -> String {
    let (host, port) = (addr.ip().to_string(), addr.port().to_string());
    let ca = sec.ca_path().display().to_string();
    let mut args = vec!["-h", &host, "-p", &port, "--no-auth-warning"];
    if tls {
        args.extend(["--tls", "--cacert", &ca]);
    }
    let mut env = Vec::new();
    if let Some((u, pw)) = user {
        args.extend(["--user", u]);
        env.push(("REDISCLI_AUTH", pw));
    }
    args.extend(cmd);
    attempt(cli, &args, &env).1
}

/// The server at `addr` speaks TLS only and enforces logins: in plaintext it answers no RESP
/// at all (not even an error), over TLS a client without a login gets NOAUTH (`default` is
/// off) and a wrong password WRONGPASS, and the administrator gets in over TLS.
fn assert_only_tls_with_a_login(
    cli: &str,
    addr: std::net::SocketAddr,
    sec: &shedlock_launcher::Secure,
) {
    let admin = Some((sec.admin_user(), sec.admin_password()));
    let plain = plaintext_hello(addr, b"*1\r\n$4\r\nPING\r\n");
    assert!(
        !plain.starts_with('+') && !plain.starts_with('-'),
        "{addr}: a plaintext PING got a RESP answer: {plain:?}"
    );
    let out = resp_cli(cli, addr, sec, false, admin, &["PING"]);
    assert_ne!(out.trim(), "PONG", "{addr}: plaintext must be refused");
    let out = resp_cli(cli, addr, sec, true, None, &["PING"]);
    assert!(out.contains("NOAUTH"), "{addr}: TLS without a login: {out}");
    let out = resp_cli(cli, addr, sec, true, Some((sec.admin_user(), "wrong")), &["PING"]);
    assert!(out.contains("WRONGPASS") || out.contains("AUTH failed"), "{addr}: {out}");
    let out = resp_cli(cli, addr, sec, true, admin, &["PING"]);
    assert_eq!(out.trim(), "PONG", "{addr}: the administrator over TLS");
    let out = resp_cli(cli, addr, sec, true, admin, &["CONFIG", "GET", "port"]);
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), ["port", "0"], "{addr}");
}

#[test]
fn secure_valkey_listens_only_on_tls_and_refuses_the_default_user() {
    if shedlock_launcher::skip_requested(Backend::Valkey) {
        return;
    }
    // valkey-cli may be missing where only valkey-server is installed; redis-cli speaks RESP
    // and TLS too (the launcher's probe falls back the same way).
    let cli =
        if shedlock_launcher::which("valkey-cli").is_some() { "valkey-cli" } else { "redis-cli" };
    let s = start_secure(Backend::Valkey);
    let sec = s.secure().unwrap();
    let redacted = s.url().replace(sec.app_password(), "***");
    assert!(s.url().starts_with("rediss://"), "{redacted}");
    let addr = s.addr().unwrap();
    assert_only_tls_with_a_login(cli, addr, sec);
    let admin = Some((sec.admin_user(), sec.admin_password()));
    let out = resp_cli(cli, addr, sec, true, admin, &["INFO", "server"]);
    assert!(out.contains("valkey_version:"), "not a Valkey server: {out}");
    let out = resp_cli(cli, addr, sec, true, admin, &["CONFIG", "GET", "tls-protocols"]);
    assert!(out.contains("TLSv1.3") && !out.contains("TLSv1.2"), "{out}");
}

#[test]
fn secure_redis_cluster_nodes_speak_only_tls_with_logins_and_the_cluster_is_ok() {
    let s = start_secure(Backend::RedisCluster);
    let sec = s.secure().unwrap();
    let addrs = s.addrs();
    assert_eq!(addrs.len(), 6, "{addrs:?}");
    // The application user's URL names every node, over TLS.
    let urls: Vec<&str> = s.url().split(',').collect();
    assert_eq!(urls.len(), 6);
    for (url, addr) in urls.iter().zip(&addrs) {
        let redacted = url.replace(sec.app_password(), "***");
        assert!(url.starts_with("rediss://") && url.ends_with(&format!("@{addr}")), "{redacted}");
    }
    let admin = Some((sec.admin_user(), sec.admin_password()));
    for &addr in &addrs {
        assert_only_tls_with_a_login("redis-cli", addr, sec);
        let info = resp_cli("redis-cli", addr, sec, true, admin, &["CLUSTER", "INFO"]);
        assert!(info.lines().any(|l| l.trim() == "cluster_state:ok"), "{addr}: {info}");
        assert!(info.lines().any(|l| l.trim() == "cluster_known_nodes:6"), "{addr}: {info}");
        for setting in ["tls-cluster", "tls-replication"] {
            let out = resp_cli("redis-cli", addr, sec, true, admin, &["CONFIG", "GET", setting]);
            assert_eq!(out.split_whitespace().collect::<Vec<_>>(), [setting, "yes"], "{addr}");
        }
    }
    // 3 masters and 3 replicas, each replica's link to its master up (over TLS, logged in as
    // the administrator).
    let nodes = resp_cli("redis-cli", addrs[0], sec, true, admin, &["CLUSTER", "NODES"]);
    let role = |r: &str| {
        nodes.lines().filter(|l| l.split(' ').nth(2).is_some_and(|f| f.contains(r))).count()
    };
    assert_eq!((role("master"), role("slave")), (3, 3), "{nodes}");
    for &addr in &addrs {
        let repl = resp_cli("redis-cli", addr, sec, true, admin, &["INFO", "replication"]);
        if repl.contains("role:slave") {
            assert!(repl.contains("master_link_status:up"), "{addr}: {repl}");
        }
    }
    // A restart re-forms it from each node's nodes.conf, over TLS.
    s.restart().unwrap();
    let info = resp_cli("redis-cli", addrs[5], sec, true, admin, &["CLUSTER", "INFO"]);
    assert!(info.contains("cluster_state:ok"), "after a restart: {info}");
}

#[test]
fn secure_etcd_serves_https_only_and_enforces_authentication() {
    let s = start_secure(Backend::Etcd);
    let sec = s.secure().unwrap();
    assert!(s.url().starts_with("https://"), "{}", s.url());
    let endpoint = format!("--endpoints={}", s.url());
    let ca = format!("--cacert={}", sec.ca_path().display());
    let ctl = |user: Option<String>, args: &[&str]| {
        let mut all = vec![endpoint.as_str(), ca.as_str(), "--command-timeout=3s"];
        let u = user.map(|u| format!("--user={u}"));
        if let Some(u) = &u {
            all.push(u);
        }
        all.extend(args);
        attempt("etcdctl", &all, &[("ETCDCTL_API", "3")])
    };
    let root = Some(format!("root:{}", sec.admin_password()));
    let (ok, out) = ctl(root.clone(), &["put", "/x", "1"]);
    assert!(ok, "{out}");
    let (ok, out) = ctl(None, &["get", "/x"]);
    assert!(!ok && out.contains("user name is empty"), "no login must be refused: {out}");
    let app = Some(format!("{}:{}", sec.app_user(), sec.app_password()));
    let (ok, out) = ctl(app.clone(), &["get", "/x"]);
    assert!(!ok && out.contains("permission denied"), "the app user has no role yet: {out}");
    let (ok, out) = ctl(Some(format!("{}:wrong", sec.app_user())), &["get", "/x"]);
    assert!(!ok && out.contains("authentication failed"), "{out}");
    let plain = s.url().replacen("https://", "http://", 1);
    let (ok, out) = attempt(
        "etcdctl",
        &[
            &format!("--endpoints={plain}"),
            "--command-timeout=2s",
            "--dial-timeout=2s",
            "get",
            "/x",
        ],
        &[("ETCDCTL_API", "3")],
    );
    assert!(!ok, "plaintext must be refused: {out}");
}

/// The INFO line a NATS (or the first bytes a ZooKeeper) server sends a plaintext client.
fn plaintext_hello(addr: std::net::SocketAddr, send: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
    let _ = s.write_all(send);
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// What the server at `addr` answers `request` over TLS verified against the CA at `ca`
/// (`openssl s_client`; the server must close the connection after it).
fn over_tls(addr: std::net::SocketAddr, ca: &std::path::Path, request: &[u8]) -> String {
    use std::io::Write;
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string(), "-CAfile"])
        .arg(ca)
        .args(["-verify_return_error", "-quiet"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(request)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn secure_zookeeper_speaks_only_tls_and_answers_srvr_over_it() {
    let s = start_secure(Backend::ZooKeeper);
    let sec = s.secure().unwrap();
    let addr = s.addr().unwrap();
    let text = over_tls(addr, &sec.ca_path(), b"srvr");
    assert!(text.contains("Mode: standalone"), "{text}");
    // A plaintext four-letter word gets no answer: the port speaks TLS only.
    let plain = plaintext_hello(addr, b"srvr");
    assert!(!plain.contains("Mode:"), "{plain}");
}

#[test]
fn secure_nats_requires_tls_and_a_login_and_reloads_permissions() {
    let s = start_secure(Backend::Nats);
    let sec = s.secure().unwrap();
    assert!(
        s.url().starts_with("tls://"),
        "redacted: {}",
        s.url().replace(sec.app_password(), "***")
    );
    let info = plaintext_hello(s.addr().unwrap(), b"");
    assert!(info.starts_with("INFO {"), "{info}");
    assert!(info.contains("\"tls_required\":true"), "{info}");
    assert!(info.contains("\"auth_required\":true"), "{info}");
    let perms = sec.app_permissions_path().unwrap();
    assert!(std::fs::read_to_string(&perms).unwrap().contains("deny"));
    std::fs::write(&perms, "permissions: { publish: \">\", subscribe: \">\" }\n").unwrap();
    s.reload().unwrap();
    s.restart().unwrap();
    let info = plaintext_hello(s.addr().unwrap(), b"");
    assert!(info.contains("\"tls_required\":true"), "after a restart: {info}");
}

#[test]
fn secure_memcached_speaks_only_tls() {
    let s = start_secure(Backend::Memcached);
    let sec = s.secure().unwrap();
    let addr = s.addr().unwrap();
    let text = over_tls(addr, &sec.ca_path(), b"version\r\nquit\r\n");
    assert!(text.starts_with("VERSION "), "{text}");
    let plain = plaintext_hello(addr, b"version\r\n");
    assert!(!plain.starts_with("VERSION"), "plaintext must get no answer: {plain}");
}
