//! The server processes of a secure launch ([`LaunchOptions::secure`](crate::LaunchOptions)) and
//! the set-up that follows their first start: TLS on the client port and authentication
//! enforced, as [`Secure`] describes per backend.

use std::{
    ffi::OsString,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
};

use nix::sys::signal::Signal;

use super::{as_user, chown_tree, fresh_dir, is_root, postgres_settings, service_user};
use crate::{
    Backend, LaunchError,
    locate::{Programs, system_user, which},
    probe::Probe,
    process::NodeSpec,
    secure::{self, CommandProbe, RedisCli, Secure},
};

fn unsupported(backend: Backend) -> LaunchError {
    LaunchError::Unsupported {
        backend: backend.name(),
        what: "a secure launch (authentication and TLS): the launcher secures postgres, \
               mariadb, redis, valkey, redis-cluster, etcd, nats, zookeeper and memcached (TLS \
               only)"
            .to_owned(),
    }
}

fn client(backend: Backend, name: &str, package: &str) -> Result<PathBuf, LaunchError> {
    which(name).ok_or_else(|| LaunchError::NotInstalled {
        backend: backend.name(),
        looked_for: format!(
            "{name} on PATH (a secure launch probes and sets up the server with it)"
        ),
        hint: format!("run `cargo xtask provision` or `apt-get install {package}`"),
    })
}

/// The command-line client of a Redis-protocol server: `valkey-cli` for Valkey, `redis-cli`
/// otherwise, each falling back to the other (their TLS and login options are the same).
fn redis_cli(backend: Backend) -> Result<PathBuf, LaunchError> {
    let (first, second, package) = if backend == Backend::Valkey {
        ("valkey-cli", "redis-cli", "valkey-tools")
    } else {
        ("redis-cli", "valkey-cli", "redis-tools")
    };
    which(first).or_else(|| which(second)).ok_or_else(|| LaunchError::NotInstalled {
        backend: backend.name(),
        looked_for: format!(
            "{first} or {second} on PATH (a secure launch probes and sets up the server with it)"
        ),
        hint: format!("run `cargo xtask provision` or `apt-get install {package}`"),
    })
}

/// A secure Redis-protocol server in `d` on TLS port `port` (its plaintext port is off): its
/// ACL file (`default` off, the administrator with every right) and its configuration; for a
/// Redis Cluster node (`bus`: its cluster-bus port) the cluster bus and replication over TLS
/// too, and replicas logging in to their masters as the administrator.
fn redis_node(
    backend: Backend,
    server: &Path,
    cli: &Path,
    d: &Path,
    port: u16,
    bus: Option<u16>,
    s: &Secure,
) -> Result<NodeSpec, LaunchError> {
    fresh_dir(backend, d)?;
    // Users live in an ACL file, so that users a test adds (`ACL SETUSER` then `ACL SAVE`)
    // survive a restart; `default` (the password-less user) is off.
    let acl = d.join("users.acl");
    secure::write_secret(
        backend,
        &acl,
        &format!(
            "user default off\nuser {} on >{} ~* &* +@all\n",
            s.admin_user(),
            s.admin_password()
        ),
    )?;
    let mut conf = format!(
        "port 0\ntls-port {port}\nbind 127.0.0.1\nprotected-mode yes\ndir {dir}\n\
         tls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n\
         tls-auth-clients no\ntls-protocols \"TLSv1.3\"\naclfile {acl}\n\
         save \"\"\nappendonly yes\nappendfsync no\n",
        dir = d.display(),
        cert = s.cert_path().display(),
        key = s.key_path().display(),
        ca = s.ca_path().display(),
        acl = acl.display(),
    );
    if let Some(bus) = bus {
        // As the plaintext cluster (native.rs's `redis_cluster_nodes`): fail-over within about
        // two seconds, replicas syncing at once, a stopping master not waiting for them. The
        // nodes talk to each other over TLS (each presents the server certificate, which is
        // also a client certificate, and verifies the others' against the CA).
        conf.push_str(&format!(
            "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-port {bus}\n\
             tls-cluster yes\ntls-replication yes\nmasteruser {admin}\nmasterauth {pw}\n\
             cluster-node-timeout 1000\nrepl-diskless-sync-delay 0\nshutdown-timeout 1\n",
            admin = s.admin_user(),
            pw = s.admin_password(),
        ));
    }
    let conf_path = d.join("redis.conf");
    secure::write_secret(backend, &conf_path, &conf)?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let probe = RedisCli::new(addr, cli.to_path_buf(), s);
    Ok(NodeSpec::new(server, d.join("server.log"), Probe::RedisTls(Box::new(probe)))
        .arg(conf_path.as_os_str())
        .cwd(d))
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// A probe that sends `request` over TLS with `openssl s_client`, verifying the server against
/// the CA at `ca`, and expects `expect` in the answer (the server must close the connection
/// after it: `-quiet` ignores the end of `request`).
fn openssl_probe(
    backend: Backend,
    addr: SocketAddr,
    ca: &str,
    request: &'static str,
    expect: &'static str,
) -> Result<CommandProbe, LaunchError> {
    let connect = addr.to_string();
    Ok(CommandProbe {
        addr,
        program: client(backend, "openssl", "openssl")?,
        args: os(&[
            "s_client",
            "-connect",
            &connect,
            "-CAfile",
            ca,
            "-verify_return_error",
            "-quiet",
        ]),
        env: Vec::new(),
        expect,
        stdin: None,
    }
    .with_stdin(request))
}

/// The one server of a secure launch on `ports[0]` (and `ports[1]`, etcd's peer port).
pub(super) fn secure_nodes(
    backend: Backend,
    programs: &Programs,
    dir: &Path,
    ports: &[u16],
    s: &Secure,
    durable: bool,
) -> Result<Vec<NodeSpec>, LaunchError> {
    let port = |i: usize| ports.get(i).copied().unwrap_or(0);
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port(0)));
    let ca = s.ca_path().display().to_string();
    let spec = match programs {
        Programs::Postgres { postgres, .. } => {
            let owner = service_user(backend, "postgres", "postgresql")?;
            let pg = dir.join("pg");
            let probe = CommandProbe {
                addr,
                program: client(backend, "pg_isready", "postgresql-client")?,
                // pg_isready answers 0 once the server accepts connections, before any login.
                args: os(&[
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port(0).to_string(),
                    "-d",
                    "postgres",
                    "-t",
                    "2",
                ]),
                env: Vec::new(),
                expect: "accepting connections",
                stdin: None,
            };
            as_user(postgres, owner, pg.join("server.log"), Probe::Command(Box::new(probe)))
                .arg("-D")
                .arg(pg.join("data").as_os_str())
                .arg("-p")
                .arg(port(0).to_string())
                .arg("-k")
                .arg(pg.as_os_str())
                .args(postgres_settings("127.0.0.1", false, Some(s)))
                .cwd(&pg)
                .stop_with(Signal::SIGINT)
        }
        Programs::MariaDb { server, .. } => {
            let m = dir.join("maria");
            let probe = CommandProbe {
                addr,
                program: client(backend, "mariadb-admin", "mariadb-client")?,
                args: os(&[
                    "--no-defaults",
                    "--protocol=tcp",
                    "-h127.0.0.1",
                    &format!("-P{}", port(0)),
                    &format!("-u{}", s.admin_user()),
                    "--ssl",
                    &format!("--ssl-ca={ca}"),
                    "--ssl-verify-server-cert",
                    "--connect-timeout=2",
                    "ping",
                ]),
                env: vec![("MYSQL_PWD".to_owned(), s.admin_password().to_owned())],
                expect: "is alive",
                stdin: None,
            };
            let mut spec =
                NodeSpec::new(server, m.join("server.log"), Probe::Command(Box::new(probe)))
                    .arg("--no-defaults")
                    .arg(format!("--datadir={}", m.join("data").display()))
                    .arg(format!("--port={}", port(0)))
                    .arg("--bind-address=127.0.0.1")
                    .arg(format!("--socket={}", m.join("sock").display()))
                    .arg(format!("--pid-file={}", m.join("pid").display()))
                    .arg(format!("--init-file={}", m.join("init.sql").display()))
                    .arg(format!("--ssl-ca={ca}"))
                    .arg(format!("--ssl-cert={}", s.cert_path().display()))
                    .arg(format!("--ssl-key={}", s.key_path().display()))
                    .args([
                        "--require-secure-transport=ON",
                        "--tls-version=TLSv1.3",
                        "--skip-log-bin",
                        "--skip-name-resolve",
                        "--innodb-flush-log-at-trx-commit=0",
                        "--innodb-buffer-pool-size=64M",
                        "--max-connections=500",
                    ])
                    .cwd(&m);
            if is_root() {
                spec = spec.arg("--user=mysql");
            }
            spec
        }
        Programs::Redis { server } => {
            let cli = redis_cli(backend)?;
            redis_node(backend, server, &cli, &dir.join("redis"), port(0), None, s)?
        }
        Programs::RedisCluster { server, cli } => {
            // ports: the client (TLS) ports of the nodes, then their cluster-bus ports.
            let n = backend.node_count();
            return (0..n)
                .map(|i| {
                    let d = dir.join(format!("redis{i}"));
                    redis_node(backend, server, cli, &d, port(i), Some(port(n + i)), s)
                })
                .collect();
        }
        Programs::Etcd { server } => {
            let d = dir.join("etcd0");
            fresh_dir(backend, &d)?;
            let c = format!("https://{addr}");
            let p = format!("http://127.0.0.1:{}", port(1));
            let probe = CommandProbe {
                addr,
                program: client(backend, "curl", "curl")?,
                // etcd answers /health without a login, also once auth is enabled.
                args: os(&["-s", "--max-time", "2", "--cacert", &ca, &format!("{c}/health")]),
                env: Vec::new(),
                expect: "true",
                stdin: None,
            };
            NodeSpec::new(server, d.join("server.log"), Probe::Command(Box::new(probe)))
                .args(["--name", "n0", "--data-dir"])
                .arg(d.join("data").as_os_str())
                .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
                .args(["--listen-peer-urls", &p, "--initial-advertise-peer-urls", &p])
                .args(["--initial-cluster", &format!("n0={p}"), "--initial-cluster-state", "new"])
                .arg("--cert-file")
                .arg(s.cert_path().as_os_str())
                .arg("--key-file")
                .arg(s.key_path().as_os_str())
                .args(["--logger", "zap", "--log-level", "warn"])
                .cwd(&d)
        }
        Programs::ZooKeeper { java, jar } => {
            let d = dir.join("zk0");
            fresh_dir(backend, &d)?;
            let data = d.join("data");
            std::fs::create_dir_all(&data)
                .map_err(|e| LaunchError::io(backend.name(), "creating the data dir", e))?;
            // The server's key store: its key and certificate in one PEM file.
            let keystore = d.join("keystore.pem");
            let key = std::fs::read_to_string(s.key_path())
                .map_err(|e| LaunchError::io(backend.name(), "reading the server key", e))?;
            let cert = std::fs::read_to_string(s.cert_path()).map_err(|e| {
                LaunchError::io(backend.name(), "reading the server certificate", e)
            })?;
            secure::write_secret(backend, &keystore, &format!("{key}{cert}"))?;
            // TLS only (a `secureClientPort` and no `clientPort`, through Netty), and every
            // session must authenticate with a digest identity before any request
            // (`enforce.auth`): the application's identity is `shedlock_app` (no super user).
            let cfg = format!(
                "tickTime=500\ninitLimit=20\nsyncLimit=10\ndataDir={data}\n\
                 secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n\
                 serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                 ssl.keyStore.location={keystore}\nssl.keyStore.type=PEM\n\
                 ssl.trustStore.location={ca}\nssl.trustStore.type=PEM\n\
                 ssl.clientAuth=none\n\
                 enforce.auth.enabled=true\nenforce.auth.schemes=digest\n\
                 admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr\n\
                 maxClientCnxns=0\n",
                data = data.display(),
                port = port(0),
                keystore = keystore.display(),
            );
            // As the plaintext server: no fsync before an acknowledgement unless `durable`.
            let cfg = if durable { cfg } else { format!("{cfg}forceSync=no\n") };
            let cfg_path = d.join("zoo.cfg");
            secure::write_secret(backend, &cfg_path, &cfg)?;
            let mut classpath = OsString::from(jar.as_os_str());
            // Debian's zookeeper.jar names netty's handler but not the codec its TLS handler
            // needs; it sits beside it.
            if let Some(codec) =
                jar.parent().map(|p| p.join("netty-codec.jar")).filter(|p| p.is_file())
            {
                classpath.push(":");
                classpath.push(codec.as_os_str());
            }
            classpath.push(":");
            classpath.push(d.as_os_str());
            // `srvr` over TLS (four-letter words need no login); the server then closes.
            let probe = openssl_probe(backend, addr, &ca, "srvr", "Mode: standalone")?;
            NodeSpec::new(java, d.join("server.log"), Probe::Command(Box::new(probe)))
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
                .cwd(&d)
        }
        Programs::Memcached { server } => {
            let d = dir.join("memcached");
            fresh_dir(backend, &d)?;
            // TLS 1.3 on the one listener, and no authentication (see `Secure`); the key is
            // readable by the server's user only.
            let user = if system_user("memcache").is_some() { "memcache" } else { "nobody" };
            if is_root() {
                chown_tree(backend, &s.key_path(), system_user(user))?;
            }
            // `quit` makes the server close the connection, and s_client exit.
            let probe = openssl_probe(backend, addr, &ca, "version\r\nquit\r\n", "VERSION ")?;
            let mut spec =
                NodeSpec::new(server, d.join("server.log"), Probe::Command(Box::new(probe)))
                    .args(["-l", "127.0.0.1", "-p"])
                    .arg(port(0).to_string())
                    .args(["-U", "0", "-m", "64", "-Z", "-o"])
                    .arg(format!(
                        "ssl_chain_cert={},ssl_key={},ssl_min_version=3",
                        s.cert_path().display(),
                        s.key_path().display()
                    ))
                    .cwd(&d);
            if is_root() {
                spec = spec.args(["-u", user]);
            }
            spec
        }
        Programs::Nats { server } => {
            let d = dir.join("nats");
            fresh_dir(backend, &d)?;
            // The application user's permissions live in a file of their own, which a test
            // rewrites (`Secure::app_permissions_path`) before `Service::reload`.
            let perms = d.join("app-permissions.conf");
            secure::write_secret(
                backend,
                &perms,
                "permissions: { publish: { deny: \">\" }, subscribe: { deny: \">\" } }\n",
            )?;
            let conf = d.join("nats.conf");
            secure::write_secret(
                backend,
                &conf,
                &format!(
                    "listen: \"127.0.0.1:{port}\"\nhttp: \"127.0.0.1:{monitor}\"\n\
                     jetstream {{ store_dir: \"{js}\" }}\n\
                     tls {{ cert_file: \"{cert}\", key_file: \"{key}\", timeout: 2 }}\n\
                     authorization {{\n  users = [\n    \
                     {{ user: \"{admin_user}\", password: \"{admin}\" }}\n    \
                     {{ user: \"{app_user}\", password: \"{app}\", include \"app-permissions.conf\" }}\n  ]\n}}\n",
                    port = port(0),
                    monitor = port(1),
                    js = d.join("js").display(),
                    cert = s.cert_path().display(),
                    key = s.key_path().display(),
                    admin_user = s.admin_user(),
                    admin = s.admin_password(),
                    app_user = s.app_user(),
                    app = s.app_password(),
                ),
            )?;
            NodeSpec::new(
                server,
                d.join("server.log"),
                Probe::Nats {
                    client: addr,
                    monitor: SocketAddr::from((Ipv4Addr::LOCALHOST, port(1))),
                },
            )
            .arg("-c")
            .arg(conf.as_os_str())
            .cwd(&d)
        }
        _ => return Err(unsupported(backend)),
    };
    Ok(vec![spec])
}

/// What a secure server needs once it answers, on its first start: PostgreSQL's application
/// role; etcd's root user and role, the application user, and `auth enable`; the Redis
/// Cluster's creation over TLS. (MariaDB's users come from its init file at every start,
/// Redis's from its ACL file.) `addrs`: the nodes' client addresses.
pub(super) fn secure_setup(
    backend: Backend,
    programs: &Programs,
    addrs: &[SocketAddr],
    s: &Secure,
) -> Result<(), LaunchError> {
    let ca = s.ca_path().display().to_string();
    let addr = addrs.first().copied().unwrap_or(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
    match programs {
        Programs::Postgres { postgres, .. } => {
            let psql = postgres
                .parent()
                .map(|d| d.join("psql"))
                .filter(|p| p.is_file())
                .map_or_else(|| client(backend, "psql", "postgresql-client"), Ok)?;
            let conn = format!(
                "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert={ca}",
                addr.port()
            );
            // A login role and nothing more: no table of its own, and no CREATE on `public`
            // (PostgreSQL 15 grants PUBLIC only USAGE there).
            let sql =
                format!("CREATE ROLE {} LOGIN PASSWORD '{}';\n", s.app_user(), s.app_password());
            run_secret(
                backend,
                s,
                "creating the application role",
                &psql,
                &[&conn, "-v", "ON_ERROR_STOP=1", "-q"],
                &[("PGPASSWORD", s.admin_password())],
                Some(&sql),
            )
        }
        Programs::Etcd { .. } => {
            let etcdctl = client(backend, "etcdctl", "etcd-client")?;
            let endpoint = format!("--endpoints=https://{addr}");
            let cacert = format!("--cacert={ca}");
            let root = format!("root:{}", s.admin_password());
            let app = format!("{}:{}", s.app_user(), s.app_password());
            let steps: [(&str, Vec<&str>); 5] = [
                ("adding user root", vec!["user", "add", &root]),
                ("adding role root", vec!["role", "add", "root"]),
                ("granting role root to root", vec!["user", "grant-role", "root", "root"]),
                ("adding the application user", vec!["user", "add", &app]),
                ("enabling authentication", vec!["auth", "enable"]),
            ];
            for (what, args) in steps {
                let mut all = vec![endpoint.as_str(), cacert.as_str()];
                all.extend(args);
                run_secret(backend, s, what, &etcdctl, &all, &[("ETCDCTL_API", "3")], None)?;
            }
            Ok(())
        }
        Programs::RedisCluster { cli, .. } => {
            // 3 masters and 3 replicas, as the plaintext cluster; the administrator's password
            // in REDISCLI_AUTH only.
            let cli = RedisCli::new(addr, cli.clone(), s);
            let nodes: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
            let mut rest = vec!["--cluster", "create"];
            rest.extend(nodes.iter().map(String::as_str));
            rest.extend(["--cluster-replicas", "1", "--cluster-yes"]);
            let args = cli.args_with(&rest);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> =
                cli.env().iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            run_secret(backend, s, "creating the cluster", cli.program(), &args, &env, None)
        }
        _ => Ok(()),
    }
}

/// [`secure::setup_step`] with both passwords hidden from whatever its error quotes.
fn run_secret(
    backend: Backend,
    s: &Secure,
    what: &str,
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&str>,
) -> Result<(), LaunchError> {
    let env: Vec<(String, String)> =
        env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    secure::setup_step(backend, what, program, args, &env, stdin).map(drop).map_err(|e| match e {
        LaunchError::CommandFailed { backend, command, status, output } => {
            let hide =
                |t: String| t.replace(s.admin_password(), "***").replace(s.app_password(), "***");
            LaunchError::CommandFailed {
                backend,
                command: hide(command),
                status,
                output: hide(output),
            }
        }
        other => other,
    })
}
