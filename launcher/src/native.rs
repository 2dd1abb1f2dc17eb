//! How to run each backend natively: one-time preparation of its data directory, and the
//! processes (with their readiness probes) for a given set of ports.

use std::{
    ffi::OsString,
    net::{Ipv4Addr, SocketAddr, SocketAddrV4},
    path::{Path, PathBuf},
    process::Command,
};

use nix::sys::signal::Signal;

use crate::{
    Backend, LaunchError, Placement,
    locate::{Programs, system_user},
    probe::Probe,
    process::{NodeSpec, shell_quote},
    secure::{self, Secure},
};

#[path = "native_secure.rs"]
mod native_secure;
use native_secure::{secure_nodes, secure_setup};

/// Where each node runs: its placement's address, or 127.0.0.1.
#[derive(Clone, Copy)]
struct Hosts<'a>(&'a [Placement]);

impl<'a> Hosts<'a> {
    fn ip(self, i: usize) -> Ipv4Addr {
        self.0.get(i).map_or(Ipv4Addr::LOCALHOST, |p| p.ip)
    }

    fn at(self, i: usize, port: u16) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.ip(i), port))
    }

    fn netns(self, i: usize) -> Option<&'a str> {
        self.0.get(i).map(|p| p.netns.as_str())
    }
}

pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Redis's `protected-mode` for node `i`: on (its default) on loopback; off when placed in a
/// namespace, where the clients come from the other namespaces of the scenario (it would answer
/// them DENIED; nothing outside the namespaces it made can reach the address).
fn protected(hosts: Hosts<'_>, i: usize) -> &'static str {
    if hosts.netns(i).is_some() { "no" } else { "yes" }
}

/// How many loopback ports a native launch needs.
pub(crate) fn ports_needed(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => 0,
        Backend::Nats | Backend::Etcd => 2,
        Backend::EtcdCluster => 6,
        // A client port and a cluster-bus port per node.
        Backend::RedisCluster => 12,
        Backend::ZooKeeperEnsemble => 9,
        _ => 1,
    }
}

fn io(backend: Backend, step: String) -> impl FnOnce(std::io::Error) -> LaunchError {
    move |e| LaunchError::io(backend.name(), step, e)
}

fn mkdir(backend: Backend, dir: &Path) -> Result<(), LaunchError> {
    std::fs::create_dir_all(dir).map_err(io(backend, format!("creating {}", dir.display())))
}

/// A fresh, empty directory.
fn fresh_dir(backend: Backend, dir: &Path) -> Result<(), LaunchError> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io(backend, format!("removing {}", dir.display())))?;
    }
    mkdir(backend, dir)
}

fn write(backend: Backend, path: &Path, text: &str) -> Result<(), LaunchError> {
    std::fs::write(path, text).map_err(io(backend, format!("writing {}", path.display())))
}

/// uid/gid of the system user a server must run as when we are root.
fn service_user(
    backend: Backend,
    user: &str,
    package: &str,
) -> Result<Option<(u32, u32)>, LaunchError> {
    if !is_root() {
        return Ok(None);
    }
    system_user(user).map(Some).ok_or_else(|| LaunchError::NotInstalled {
        backend: backend.name(),
        looked_for: format!("system user {user:?} (a root launch runs the server as that user)"),
        hint: format!(
            "run `cargo xtask provision` or `apt-get install {package}`, which creates it"
        ),
    })
}

fn chown_tree(backend: Backend, dir: &Path, owner: Option<(u32, u32)>) -> Result<(), LaunchError> {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .map_err(io(backend, format!("chown {}", dir.display())))?;
    }
    Ok(())
}

/// `program args...`, run as `owner` (via setpriv, which execs, so the pid stays the server's)
/// when we are root.
fn as_user(program: &Path, owner: Option<(u32, u32)>, log: PathBuf, probe: Probe) -> NodeSpec {
    match owner {
        Some((uid, gid)) => NodeSpec::new(Path::new("/usr/bin/setpriv"), log, probe)
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg("--")
            .arg(program.as_os_str()),
        None => NodeSpec::new(program, log, probe),
    }
}

/// Runs a preparation command to completion; its output goes to `log`.
fn run(backend: Backend, cmd: &mut Command, log: &Path) -> Result<(), LaunchError> {
    let line = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(io(backend, format!("running `{line}`")))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::write(log, &text);
    if out.status.success() {
        Ok(())
    } else {
        let lines: Vec<&str> = text.lines().collect();
        Err(LaunchError::CommandFailed {
            backend: backend.name(),
            command: line,
            status: out.status.to_string(),
            output: lines[lines.len().saturating_sub(30)..].join("\n"),
        })
    }
}

/// The role whose host connections must give a password (SCRAM), while every other role is
/// trusted: the PostgreSQL tests create it to see what a wrong password gives, as a server with
/// `POSTGRES_PASSWORD` (Docker) answers it for every role.
pub const PG_PASSWORD_ROLE: &str = "shedlock_password_check";

/// Puts a `scram-sha-256` rule for [`PG_PASSWORD_ROLE`] ahead of initdb's `trust` rules.
fn require_password_for_test_role(backend: Backend, hba: &Path) -> Result<(), LaunchError> {
    let step = || format!("adding a rule to {}", hba.display());
    let rules = std::fs::read_to_string(hba).map_err(io(backend, step()))?;
    let rule = format!(
        "host all {PG_PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\nhost all {PG_PASSWORD_ROLE} ::1/128 scram-sha-256\n"
    );
    // Clients in the network namespaces of a placed launch (LaunchOptions::placement) come
    // from 10.0.0.0/8; an unplaced server listens on 127.0.0.1 only, so this admits no one else.
    let placed = "host all all 10.0.0.0/8 trust\n";
    std::fs::write(hba, rule + &rules + placed).map_err(io(backend, step()))
}

/// One-time preparation (initdb, mariadb-install-db) in the service directory `dir`.
pub(crate) fn prepare(
    backend: Backend,
    programs: &Programs,
    dir: &Path,
    secure: Option<&Secure>,
) -> Result<(), LaunchError> {
    match programs {
        Programs::Postgres { initdb, .. } => {
            let owner = service_user(backend, "postgres", "postgresql")?;
            let pg = dir.join("pg");
            mkdir(backend, &pg)?;
            chown_tree(backend, &pg, owner)?;
            if let Some(s) = secure {
                chown_tree(backend, &s.key_path(), owner)?;
            }
            let mut cmd = match owner {
                Some((uid, gid)) => {
                    let mut c = Command::new("/usr/bin/setpriv");
                    c.arg(format!("--reuid={uid}"))
                        .arg(format!("--regid={gid}"))
                        .arg("--clear-groups")
                        .arg("--")
                        .arg(initdb);
                    c
                }
                None => Command::new(initdb),
            };
            cmd.current_dir(&pg).arg("-D").arg(pg.join("data")).args([
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ]);
            let Some(s) = secure else {
                cmd.arg("--auth=trust");
                run(backend, &mut cmd, &pg.join("initdb.log"))?;
                return require_password_for_test_role(
                    backend,
                    &pg.join("data").join("pg_hba.conf"),
                );
            };
            // Every role authenticates with SCRAM, and only over TLS (no `host` rule: a
            // plaintext TCP connection matches `hostnossl ... reject`).
            let pwfile = pg.join("pwfile");
            secure::write_secret(backend, &pwfile, &format!("{}\n", s.admin_password()))?;
            chown_tree(backend, &pwfile, owner)?;
            cmd.args(["--auth-local=scram-sha-256", "--auth-host=scram-sha-256"])
                .arg(format!("--pwfile={}", pwfile.display()));
            run(backend, &mut cmd, &pg.join("initdb.log"))?;
            let _ = std::fs::remove_file(&pwfile);
            write(
                backend,
                &pg.join("data").join("pg_hba.conf"),
                "local all all scram-sha-256\n\
                 hostssl all all 127.0.0.1/32 scram-sha-256\n\
                 hostssl all all ::1/128 scram-sha-256\n\
                 hostnossl all all all reject\n",
            )
        }
        Programs::MariaDb { install_db, .. } => {
            let owner = service_user(backend, "mysql", "mariadb-server")?;
            let m = dir.join("maria");
            mkdir(backend, &m)?;
            chown_tree(backend, &m, owner)?;
            if let Some(s) = secure {
                chown_tree(backend, &s.key_path(), owner)?;
            }
            let mut cmd = Command::new(install_db);
            cmd.current_dir(&m)
                .arg("--no-defaults")
                .arg(format!("--datadir={}", m.join("data").display()))
                .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
            if owner.is_some() {
                cmd.arg("--user=mysql");
            }
            run(backend, &mut cmd, &m.join("install-db.log"))?;
            if let Some(s) = secure {
                // Run at every start (so idempotent): root gets a password, the administrator
                // and the application user connect over TLS only (the server also refuses any
                // plaintext TCP connection), and the application user has no privilege at all.
                let init = format!(
                    "CREATE DATABASE IF NOT EXISTS shedlock;\n\
                     ALTER USER 'root'@'localhost' IDENTIFIED BY '{admin}';\n\
                     CREATE USER IF NOT EXISTS '{admin_user}'@'127.0.0.1' IDENTIFIED BY '{admin}' REQUIRE SSL;\n\
                     GRANT ALL PRIVILEGES ON *.* TO '{admin_user}'@'127.0.0.1' WITH GRANT OPTION;\n\
                     CREATE USER IF NOT EXISTS '{app_user}'@'127.0.0.1' IDENTIFIED BY '{app}' REQUIRE SSL;\n",
                    admin = s.admin_password(),
                    admin_user = s.admin_user(),
                    app_user = s.app_user(),
                    app = s.app_password(),
                );
                secure::write_secret(backend, &m.join("init.sql"), &init)?;
                return chown_tree(backend, &m.join("init.sql"), owner);
            }
            // root from the namespaces of a placed launch (10.0.0.0/8); an unplaced server
            // listens on 127.0.0.1 only, so this admits no one else.
            write(
                backend,
                &m.join("init.sql"),
                "CREATE DATABASE IF NOT EXISTS shedlock;\n\
                 CREATE USER IF NOT EXISTS 'root'@'10.%';\n\
                 GRANT ALL PRIVILEGES ON *.* TO 'root'@'10.%' WITH GRANT OPTION;\n",
            )
        }
        _ => Ok(()),
    }
}

/// The `-c` settings of a native PostgreSQL listening on `ip`: for speed, no commit waits for a
/// disk (`fsync`, `synchronous_commit` and `full_page_writes` off) unless `durable`, which keeps
/// PostgreSQL's own defaults (all three on; [`LaunchOptions::durable`](crate::LaunchOptions)).
fn postgres_settings(ip: &str, durable: bool, secure: Option<&Secure>) -> Vec<String> {
    let mut settings = vec![format!("listen_addresses={ip}")];
    if let Some(s) = secure {
        settings.extend([
            "ssl=on".to_owned(),
            format!("ssl_cert_file={}", s.cert_path().display()),
            format!("ssl_key_file={}", s.key_path().display()),
            "ssl_min_protocol_version=TLSv1.3".to_owned(),
            "password_encryption=scram-sha-256".to_owned(),
        ]);
    }
    if !durable {
        settings.extend(
            ["fsync=off", "synchronous_commit=off", "full_page_writes=off"].map(String::from),
        );
    }
    settings.push("max_connections=300".to_owned());
    settings.into_iter().flat_map(|s| ["-c".to_owned(), s]).collect()
}

/// The server processes for `ports` (as many as [`ports_needed`]); the first `node_count` probes'
/// addresses are the client ports.
pub(crate) fn nodes(
    backend: Backend,
    programs: &Programs,
    dir: &Path,
    ports: &[u16],
    placement: &[Placement],
    durable: bool,
    secure: Option<&Secure>,
) -> Result<Vec<NodeSpec>, LaunchError> {
    let hosts = Hosts(placement);
    let specs = nodes_at(backend, programs, dir, ports, hosts, durable, secure)?;
    Ok(specs.into_iter().enumerate().map(|(i, s)| s.in_netns(hosts.netns(i))).collect())
}

fn nodes_at(
    backend: Backend,
    programs: &Programs,
    dir: &Path,
    ports: &[u16],
    hosts: Hosts<'_>,
    durable: bool,
    secure: Option<&Secure>,
) -> Result<Vec<NodeSpec>, LaunchError> {
    if let Some(s) = secure {
        return secure_nodes(backend, programs, dir, ports, s, durable);
    }
    let port = |i: usize| ports.get(i).copied().unwrap_or(0);
    let local = |p: u16| hosts.at(0, p);
    let ip0 = hosts.ip(0).to_string();
    let ip0 = ip0.as_str();
    let spec = match programs {
        Programs::Sqlite => return Ok(Vec::new()),
        Programs::Postgres { postgres, .. } => {
            let owner = service_user(backend, "postgres", "postgresql")?;
            let pg = dir.join("pg");
            as_user(postgres, owner, pg.join("server.log"), Probe::Postgres(local(port(0))))
                .arg("-D")
                .arg(pg.join("data").as_os_str())
                .arg("-p")
                .arg(port(0).to_string())
                .arg("-k")
                .arg(pg.as_os_str())
                .args(postgres_settings(ip0, durable, None))
                .cwd(&pg)
                // SIGINT is PostgreSQL's "fast" shutdown; SIGTERM would wait for clients to leave.
                .stop_with(Signal::SIGINT)
        }
        Programs::MariaDb { server, .. } => {
            let m = dir.join("maria");
            let mut s = NodeSpec::new(server, m.join("server.log"), Probe::MySql(local(port(0))))
                .arg("--no-defaults")
                .arg(format!("--datadir={}", m.join("data").display()))
                .arg(format!("--port={}", port(0)))
                .arg(format!("--bind-address={ip0}"))
                .arg(format!("--socket={}", m.join("sock").display()))
                .arg(format!("--pid-file={}", m.join("pid").display()))
                .arg(format!("--init-file={}", m.join("init.sql").display()))
                .args([
                    "--skip-log-bin",
                    "--skip-name-resolve",
                    "--innodb-flush-log-at-trx-commit=0",
                    "--innodb-buffer-pool-size=64M",
                    "--max-connections=500",
                ])
                .cwd(&m);
            if is_root() {
                s = s.arg("--user=mysql");
            }
            s
        }
        Programs::Redis { server } => {
            let d = dir.join("redis");
            fresh_dir(backend, &d)?;
            NodeSpec::new(server, d.join("server.log"), Probe::Redis(local(port(0))))
                .arg("--port")
                .arg(port(0).to_string())
                .args(["--bind", ip0, "--protected-mode", protected(hosts, 0), "--dir"])
                .arg(d.as_os_str())
                // An append-only file (not fsynced) keeps the data across restart().
                .args(["--save", "", "--appendonly", "yes", "--appendfsync", "no"])
                .cwd(&d)
        }
        Programs::Memcached { server } => {
            let d = dir.join("memcached");
            fresh_dir(backend, &d)?;
            let mut s =
                NodeSpec::new(server, d.join("server.log"), Probe::Memcached(local(port(0))))
                    .args(["-l", ip0, "-p"])
                    .arg(port(0).to_string())
                    .args(["-U", "0", "-m", "64"])
                    .cwd(&d);
            if is_root() {
                let user = if system_user("memcache").is_some() { "memcache" } else { "nobody" };
                s = s.args(["-u", user]);
            }
            s
        }
        Programs::Nats { server } => {
            let d = dir.join("nats");
            fresh_dir(backend, &d)?;
            NodeSpec::new(
                server,
                d.join("server.log"),
                Probe::Nats { client: local(port(0)), monitor: local(port(1)) },
            )
            .args(["-a", ip0, "-p"])
            .arg(port(0).to_string())
            .arg("-m")
            .arg(port(1).to_string())
            .args(["-js", "-sd"])
            .arg(d.join("js").as_os_str())
            .cwd(&d)
        }
        Programs::MongoDb { server } => {
            let d = dir.join("mongo");
            fresh_dir(backend, &d)?;
            NodeSpec::new(server, d.join("server.log"), Probe::MongoDb(local(port(0))))
                .args(["--host", ip0, "--port"])
                .arg(port(0).to_string())
                .arg("--storage-path")
                .arg(d.join("data").as_os_str())
                .args(["--log-level", "WARNING", "--standalone"])
                .cwd(&d)
        }
        Programs::DynamoDb { script, node } => {
            let d = dir.join("dynamo");
            fresh_dir(backend, &d)?;
            NodeSpec::new(node, d.join("server.log"), Probe::DynamoDb(local(port(0))))
                .arg(script.as_os_str())
                .args(["--host", ip0, "--port"])
                .arg(port(0).to_string())
                .args([
                    "--createTableMs",
                    "0",
                    "--deleteTableMs",
                    "0",
                    "--updateTableMs",
                    "0",
                    "--path",
                ])
                .arg(d.join("data").as_os_str())
                .cwd(&d)
        }
        Programs::S3 { server } => {
            let d = dir.join("s3");
            fresh_dir(backend, &d)?;
            NodeSpec::new(server, d.join("server.log"), Probe::S3(local(port(0))))
                .args(["-H", ip0, "-p"])
                .arg(port(0).to_string())
                .cwd(&d)
        }
        Programs::RedisCluster { server, .. } => {
            return redis_cluster_nodes(backend, server, dir, ports, hosts);
        }
        Programs::Etcd { server } => return etcd_nodes(backend, server, dir, ports, hosts),
        Programs::ZooKeeper { java, jar } => {
            return zookeeper_nodes(backend, java, jar, dir, ports, hosts, durable);
        }
    };
    Ok(vec![spec])
}

fn redis_cluster_nodes(
    backend: Backend,
    server: &Path,
    dir: &Path,
    ports: &[u16],
    hosts: Hosts<'_>,
) -> Result<Vec<NodeSpec>, LaunchError> {
    let n = backend.node_count();
    // ports: client_0..client_{n-1}, then the cluster-bus ports (not client + 10000, which
    // may be taken or out of range).
    let client = |i: usize| ports.get(i).copied().unwrap_or(0);
    let bus = |i: usize| ports.get(n + i).copied().unwrap_or(0);
    (0..n)
        .map(|i| {
            let d = dir.join(format!("redis{i}"));
            fresh_dir(backend, &d)?;
            Ok(NodeSpec::new(server, d.join("server.log"), Probe::Redis(hosts.at(i, client(i))))
                .arg("--port")
                .arg(client(i).to_string())
                .arg("--cluster-port")
                .arg(bus(i).to_string())
                .args(["--bind", &hosts.ip(i).to_string()])
                .args(["--protected-mode", protected(hosts, i), "--dir"])
                .arg(d.as_os_str())
                .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
                // Fail-over within about two seconds on loopback.
                .args(["--cluster-node-timeout", "1000"])
                // Replicas sync at once (the default waits 5 s to batch diskless syncs, and a
                // replica that has not synced cannot take over).
                .args(["--repl-diskless-sync-delay", "0"])
                // A stopping master does not wait for its replicas (its append-only file keeps
                // the data for a restart).
                .args(["--shutdown-timeout", "1"])
                .args(["--save", "", "--appendonly", "yes", "--appendfsync", "no"])
                .cwd(&d))
        })
        .collect()
}

/// What a backend needs once all its nodes answer, on its first start: the Redis Cluster is
/// created (`redis-cli --cluster create`, 3 masters and 3 replicas). A restart keeps each node's
/// `nodes.conf`, so the cluster re-forms by itself.
pub(crate) fn after_first_start(
    backend: Backend,
    programs: &Programs,
    dir: &Path,
    specs: &[NodeSpec],
    secure: Option<&Secure>,
) -> Result<(), LaunchError> {
    if let Some(s) = secure {
        let addrs: Vec<SocketAddr> = specs.iter().map(|n| n.probe.addr()).collect();
        return secure_setup(backend, programs, &addrs, s);
    }
    let Programs::RedisCluster { cli, .. } = programs else {
        return Ok(());
    };
    let mut cmd = Command::new(cli);
    cmd.args(["--cluster", "create"]);
    for s in specs {
        cmd.arg(s.probe.addr().to_string());
    }
    cmd.args(["--cluster-replicas", "1", "--cluster-yes"]);
    run(backend, &mut cmd, &dir.join("cluster-create.log"))
}

/// Waits, after the nodes answer, until the backend as a whole is ready: every Redis Cluster
/// node reports `cluster_state:ok`. Other backends are ready when their nodes are.
pub(crate) fn settle(
    backend: Backend,
    specs: &[NodeSpec],
    limit: std::time::Duration,
) -> Result<(), LaunchError> {
    if backend != Backend::RedisCluster {
        return Ok(());
    }
    let start = std::time::Instant::now();
    loop {
        // A secure cluster's nodes answer over TLS only: asked through its client.
        let failing = specs.iter().find_map(|s| {
            match &s.probe {
                Probe::RedisTls(cli) => cli.cluster_ok(),
                other => crate::probe::redis_cluster_ok(other.addr()),
            }
            .err()
        });
        let Some(last_probe) = failing else {
            return Ok(());
        };
        if start.elapsed() > limit {
            return Err(LaunchError::StartFailed {
                backend: backend.name(),
                reason: format!(
                    "the cluster did not reach cluster_state:ok within {limit:?}: {last_probe}"
                ),
                output: crate::error::ServerOutput::new(
                    specs.first().map(NodeSpec::command_line).unwrap_or_default(),
                    specs.first().map(|s| s.log.clone()).unwrap_or_default(),
                    String::new(),
                ),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn etcd_nodes(
    backend: Backend,
    server: &Path,
    dir: &Path,
    ports: &[u16],
    hosts: Hosts<'_>,
) -> Result<Vec<NodeSpec>, LaunchError> {
    let n = backend.node_count();
    // ports: client_0, peer_0, client_1, peer_1, ...
    let client = |i: usize| ports.get(2 * i).copied().unwrap_or(0);
    let peer = |i: usize| ports.get(2 * i + 1).copied().unwrap_or(0);
    let cluster = (0..n)
        .map(|i| format!("n{i}=http://{}", hosts.at(i, peer(i))))
        .collect::<Vec<_>>()
        .join(",");
    let token = format!("shedlock-{}-{}", std::process::id(), client(0));
    (0..n)
        .map(|i| {
            let d = dir.join(format!("etcd{i}"));
            fresh_dir(backend, &d)?;
            let c = format!("http://{}", hosts.at(i, client(i)));
            let p = format!("http://{}", hosts.at(i, peer(i)));
            Ok(NodeSpec::new(server, d.join("server.log"), Probe::Etcd(hosts.at(i, client(i))))
                .arg("--name")
                .arg(format!("n{i}"))
                .arg("--data-dir")
                .arg(d.join("data").as_os_str())
                .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
                .args(["--listen-peer-urls", &p, "--initial-advertise-peer-urls", &p])
                .args(["--initial-cluster", &cluster, "--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", &token])
                .args(["--logger", "zap", "--log-level", "warn"])
                // Elections in well under a second on loopback.
                .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
                .cwd(&d))
        })
        .collect()
}

/// The nodes of a native ZooKeeper (one server or an ensemble). For speed, and as PostgreSQL here,
/// the transaction log is not fsynced before a write is acknowledged (`forceSync=no`) unless
/// `durable`: under a CI run's load the fsyncs of three servers sharing one disk made a
/// `try_lock` answer after its 300 ms lease. A killed process loses nothing (the page cache
/// keeps the log); a machine crash may.
fn zookeeper_nodes(
    backend: Backend,
    java: &Path,
    jar: &Path,
    dir: &Path,
    ports: &[u16],
    hosts: Hosts<'_>,
    durable: bool,
) -> Result<Vec<NodeSpec>, LaunchError> {
    let n = backend.node_count();
    // ports: client_0..client_{n-1}, then quorum/election pairs for an ensemble.
    let client = |i: usize| ports.get(i).copied().unwrap_or(0);
    let quorum = |i: usize| ports.get(n + 2 * i).copied().unwrap_or(0);
    let election = |i: usize| ports.get(n + 2 * i + 1).copied().unwrap_or(0);
    (0..n)
        .map(|i| {
            let d = dir.join(format!("zk{i}"));
            fresh_dir(backend, &d)?;
            let data = d.join("data");
            mkdir(backend, &data)?;
            let mut cfg = format!(
                "tickTime=500\ninitLimit=20\nsyncLimit=10\ndataDir={}\nclientPort={}\nclientPortAddress={}\n\
                 admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr\nmaxClientCnxns=0\n",
                data.display(),
                client(i),
                hosts.ip(i)
            );
            if !durable {
                cfg.push_str("forceSync=no\n");
            }
            if n > 1 {
                for k in 0..n {
                    cfg.push_str(&format!(
                        "server.{}={}:{}:{}\n",
                        k + 1,
                        hosts.ip(k),
                        quorum(k),
                        election(k)
                    ));
                }
                write(backend, &data.join("myid"), &format!("{}\n", i + 1))?;
            }
            let cfg_path = d.join("zoo.cfg");
            write(backend, &cfg_path, &cfg)?;
            let mut classpath = OsString::from(jar.as_os_str());
            classpath.push(":");
            classpath.push(d.as_os_str());
            Ok(NodeSpec::new(java, d.join("server.log"), Probe::ZooKeeper(hosts.at(i, client(i))))
                .args([
                    "-Xmx256m",
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",
                    "-Xshare:auto",
                    "-Dzookeeper.jmx.log4j.disable=true",
                ])
                .arg(format!("-Dzookeeper.log.dir={}", d.display()))
                .arg("-cp")
                .arg(classpath)
                .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
                .arg(cfg_path.as_os_str())
                .cwd(&d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_durable_postgres_keeps_its_own_durability_defaults() {
        let fast = postgres_settings("127.0.0.1", false, None);
        assert_eq!(fast.len(), 10, "{fast:?}");
        assert!(fast.chunks(2).all(|c| c[0] == "-c"), "{fast:?}");
        for off in ["fsync=off", "synchronous_commit=off", "full_page_writes=off"] {
            assert!(fast.iter().any(|a| a == off), "{fast:?}");
        }
        let durable = postgres_settings("127.0.0.1", true, None);
        assert_eq!(
            durable,
            ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"].map(String::from)
        );
    }
}
