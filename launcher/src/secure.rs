//! Secure launches ([`LaunchOptions::secure`](crate::LaunchOptions::secure)): a throwaway
//! certificate authority and server certificate made at start-up (rcgen), random passwords, and
//! per backend the settings that make the server require both: TLS on the client port (no
//! plaintext listener) and authentication for every client.
//!
//! What each server gets is said in [`Secure`]'s docs. The launcher creates an administrator and
//! an application user **with no privileges on any lock data**: what the application user may do
//! is the provider's business (its README's "Permissions" section), so the test that uses it
//! grants exactly that, through the administrator.

use std::{
    ffi::OsString,
    io::Write,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::{Backend, LaunchError};

/// The application user's name on every secured backend.
pub const APP_USER: &str = "shedlock_app";
/// The administrator's name on every secured backend (PostgreSQL's is `postgres`, etcd's `root`).
const ADMIN_USER: &str = "shedlock_admin";

/// What a secure launch made: the certificate authority that signed the server's certificate,
/// the administrator's and the application user's credentials, and where the TLS files are.
///
/// Its `Debug` output hides both passwords.
///
/// | backend | TLS | administrator | application user |
/// |---|---|---|---|
/// | PostgreSQL | `ssl=on`, TLS 1.3 only, `hostnossl` rejected | `postgres` (SCRAM) | `shedlock_app` (SCRAM), login only: no table, no `CREATE` on a schema |
/// | MariaDB | `require_secure_transport`, TLS 1.3 only | `shedlock_admin@127.0.0.1` (`ALL … WITH GRANT OPTION`) | `shedlock_app@127.0.0.1`, `REQUIRE SSL`, no privilege |
/// | Redis, Valkey | `tls-port` only (`port 0`), TLS 1.3 | `shedlock_admin` (`~* &* +@all`); `default` is off | none: create it with `ACL SETUSER` and `ACL SAVE` (an `aclfile` keeps it across restarts) |
/// | Redis Cluster | every node `tls-port` only (`port 0`), TLS 1.3, and TLS on the cluster bus and replication (`tls-cluster`, `tls-replication`) | `shedlock_admin` on every node (its own ACL file each); replicas log in to their masters as it (`masteruser`/`masterauth`) | none: create it on every node, masters and replicas (ACL users are per node) |
/// | etcd | `https://` client URL | `root` (role `root`); `auth enable` | `shedlock_app`, no role: grant one |
/// | NATS | `tls` block (`tls_required`) | `shedlock_admin` (all) | `shedlock_app`, permissions in [`app_permissions_path`](Self::app_permissions_path), at first none |
/// | ZooKeeper | `secureClientPort` only (Netty) | none (no super user) | any digest identity, e.g. `shedlock_app` / [`app_password`](Self::app_password): `enforce.auth` refuses sessions without one |
/// | memcached | `-Z` on its one listener, TLS 1.3 (`ssl_min_version=3`) | none | none: no authentication is enabled (memcached 1.6's experimental `-Y` auth file is not used, and the provider sends no login) |
#[derive(Clone)]
pub struct Secure {
    backend: Backend,
    ca_pem: String,
    tls_dir: PathBuf,
    admin_user: String,
    admin_password: String,
    app_password: String,
}

impl std::fmt::Debug for Secure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secure")
            .field("backend", &self.backend)
            .field("tls_dir", &self.tls_dir)
            .field("admin_user", &self.admin_user)
            .field("admin_password", &"***")
            .field("app_user", &APP_USER)
            .field("app_password", &"***")
            .finish()
    }
}

impl Secure {
    /// Makes the CA, the server certificate (for `127.0.0.1`, `::1` and `localhost`) and the
    /// passwords, and writes the PEM files into `dir/tls` (the key readable by its owner only).
    pub(crate) fn generate(backend: Backend, dir: &Path) -> Result<Secure, LaunchError> {
        let tls_dir = dir.join("tls");
        std::fs::create_dir_all(&tls_dir).map_err(io(backend, "creating the TLS directory"))?;
        let pki = Pki::generate().map_err(|e| LaunchError::Unsupported {
            backend: backend.name(),
            what: format!("making a throwaway certificate authority: {e}"),
        })?;
        write_private(backend, &tls_dir.join("ca.pem"), &pki.ca_pem, 0o644)?;
        write_private(backend, &tls_dir.join("server.pem"), &pki.server_pem, 0o644)?;
        write_private(backend, &tls_dir.join("server.key"), &pki.server_key_pem, 0o600)?;
        let admin_user = match backend {
            Backend::Postgres => "postgres",
            Backend::Etcd => "root",
            _ => ADMIN_USER,
        };
        Ok(Secure {
            backend,
            ca_pem: pki.ca_pem,
            tls_dir,
            admin_user: admin_user.to_owned(),
            admin_password: password(backend)?,
            app_password: password(backend)?,
        })
    }

    /// The variable of [`Service::secure_env`](crate::Service::secure_env).
    pub(crate) fn env_var(backend: Backend) -> String {
        format!("SHEDLOCK_SECURE_{}", backend.name().to_ascii_uppercase().replace('-', "_"))
    }

    /// One line per field: the nodes' addresses (comma-separated), TLS directory,
    /// administrator, its password, the application user's password.
    pub(crate) fn encode(&self, addrs: &[SocketAddr]) -> String {
        [
            addrs.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(","),
            self.tls_dir.display().to_string(),
            self.admin_user.clone(),
            self.admin_password.clone(),
            self.app_password.clone(),
        ]
        .join("\n")
    }

    pub(crate) fn decode(backend: Backend, value: &str) -> Option<(Secure, Vec<SocketAddr>)> {
        let mut lines = value.lines();
        let addrs =
            lines.next()?.split(',').map(|a| a.trim().parse().ok()).collect::<Option<Vec<_>>>()?;
        if addrs.is_empty() {
            return None;
        }
        let tls_dir = PathBuf::from(lines.next()?);
        let ca_pem = std::fs::read_to_string(tls_dir.join("ca.pem")).ok()?;
        let secure = Secure {
            backend,
            ca_pem,
            tls_dir,
            admin_user: lines.next()?.to_owned(),
            admin_password: lines.next()?.to_owned(),
            app_password: lines.next()?.to_owned(),
        };
        Some((secure, addrs))
    }

    /// The certificate authority's certificate, PEM: the only root a client should trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The path of [`ca_pem`](Self::ca_pem)'s file (for clients that take a path).
    pub fn ca_path(&self) -> PathBuf {
        self.tls_dir.join("ca.pem")
    }

    pub(crate) fn cert_path(&self) -> PathBuf {
        self.tls_dir.join("server.pem")
    }

    pub(crate) fn key_path(&self) -> PathBuf {
        self.tls_dir.join("server.key")
    }

    /// NATS only: the file holding the application user's `permissions` block (at first, deny
    /// everything). Rewrite it, then [`Service::reload`](crate::Service::reload).
    pub fn app_permissions_path(&self) -> Option<PathBuf> {
        (self.backend == Backend::Nats)
            .then(|| self.tls_dir.parent().map(|d| d.join("nats").join("app-permissions.conf")))
            .flatten()
    }

    /// The administrator's name (`postgres`, `root` on etcd, else `shedlock_admin`).
    pub fn admin_user(&self) -> &str {
        &self.admin_user
    }

    /// The administrator's password.
    pub fn admin_password(&self) -> &str {
        &self.admin_password
    }

    /// The application user's name, [`APP_USER`].
    pub fn app_user(&self) -> &'static str {
        APP_USER
    }

    /// The application user's password.
    pub fn app_password(&self) -> &str {
        &self.app_password
    }

    /// The TLS version the server is configured to accept (the only one), as a report states it.
    pub fn tls_version(&self) -> &'static str {
        match self.backend {
            // etcd 3.4 and NATS set no minimum version here: Go's TLS server offers 1.2 and
            // 1.3, and the Rust clients (rustls) negotiate 1.3.
            Backend::Etcd | Backend::Nats => "TLS 1.3 (negotiated; the server also offers 1.2)",
            // ZooKeeper 3.8 speaks TLS 1.2 (`ssl.protocol`'s default): with Debian's Netty
            // 4.1.48 on Java 17, `ssl.protocol=TLSv1.3` makes every handshake fail.
            Backend::ZooKeeper => "TLS 1.2 (ZooKeeper 3.8's default ssl.protocol)",
            _ => "TLS 1.3",
        }
    }

    /// The URL of a secure service whose nodes' client addresses are `addrs`, for the
    /// application user: a Redis Cluster's names every node ([`url_for`](Self::url_for) each,
    /// joined by commas, as [`Backend::RedisCluster`]'s plaintext URL), any other's the first.
    pub(crate) fn service_url(&self, addrs: &[SocketAddr]) -> String {
        let first = addrs.first().copied().unwrap_or(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
        match self.backend {
            Backend::RedisCluster => addrs
                .iter()
                .map(|a| self.url_for(*a, self.app_user(), self.app_password()))
                .collect::<Vec<_>>()
                .join(","),
            _ => self.url_for(first, self.app_user(), self.app_password()),
        }
    }

    /// A URL for `user`/`password` at `addr` over TLS, verified against the CA, in the form
    /// this workspace's providers and the CLI take. Redis and etcd clients cannot take a CA in
    /// their URL: give them [`ca_pem`](Self::ca_pem) too.
    pub fn url_for(&self, addr: SocketAddr, user: &str, password: &str) -> String {
        let ca = self.ca_path();
        let ca = ca.display();
        match self.backend {
            Backend::Postgres => format!(
                "postgres://{user}:{password}@{addr}/postgres?sslmode=verify-full&sslrootcert={ca}"
            ),
            Backend::MariaDb => format!(
                "mysql://{user}:{password}@{addr}/shedlock?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"
            ),
            Backend::Redis | Backend::Valkey | Backend::RedisCluster => {
                format!("rediss://{user}:{password}@{addr}")
            }
            Backend::Etcd => format!("https://{addr}"),
            Backend::Nats => format!("tls://{user}:{password}@{addr}"),
            // No credentials: the secure memcached enables no authentication.
            Backend::Memcached => format!("memcache://{addr}"),
            _ => format!("{addr}"),
        }
    }
}

fn io(backend: Backend, step: &str) -> impl FnOnce(std::io::Error) -> LaunchError + '_ {
    move |e| LaunchError::io(backend.name(), step.to_owned(), e)
}

fn write_private(backend: Backend, path: &Path, text: &str, mode: u32) -> Result<(), LaunchError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let step = format!("writing {}", path.display());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(|e| LaunchError::io(backend.name(), step.clone(), e))?;
    f.write_all(text.as_bytes()).map_err(|e| LaunchError::io(backend.name(), step.clone(), e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| LaunchError::io(backend.name(), step, e))
}

/// Writes a file only its owner may read (a config or script that carries a password).
pub(crate) fn write_secret(backend: Backend, path: &Path, text: &str) -> Result<(), LaunchError> {
    write_private(backend, path, text, 0o600)
}

/// 24 random bytes as 48 hex digits, from the kernel's generator.
fn password(backend: Backend) -> Result<String, LaunchError> {
    use std::io::Read;
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io(backend, "reading /dev/urandom for a password"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

struct Pki {
    ca_pem: String,
    server_pem: String,
    server_key_pem: String,
}

impl Pki {
    fn generate() -> Result<Pki, rcgen::Error> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
            IsCa, KeyPair, KeyUsagePurpose, SanType,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "shedlock-launcher throwaway CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        let mut server = CertificateParams::new(vec!["localhost".to_owned()])?;
        server.distinguished_name.push(DnType::CommonName, "localhost");
        server.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        server
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)));
        server.key_usages =
            vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        server.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate()?;
        let cert = server.signed_by(&key, &ca)?;
        Ok(Pki { ca_pem: ca.pem(), server_pem: cert.pem(), server_key_pem: key.serialize_pem() })
    }
}

/// A readiness probe that runs a client program: ready when it exits 0 within `limit` and its
/// output contains `expect`. Secrets go in `env`, never in `args` (which an error may quote).
#[derive(Clone)]
pub(crate) struct CommandProbe {
    pub(crate) addr: SocketAddr,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) expect: &'static str,
    pub(crate) stdin: Option<&'static str>,
}

impl std::fmt::Debug for CommandProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandProbe")
            .field("addr", &self.addr)
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("expect", &self.expect)
            .field("stdin", &self.stdin)
            .finish()
    }
}

/// How long a probe's client may run.
const PROBE_LIMIT: Duration = Duration::from_secs(5);

impl CommandProbe {
    /// The same probe, writing `text` to the client's standard input.
    pub(crate) fn with_stdin(mut self, text: &'static str) -> Self {
        self.stdin = Some(text);
        self
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        let (ok, out) = run_bounded(&self.program, &self.args, &self.env, self.stdin, PROBE_LIMIT)?;
        if ok && out.contains(self.expect) {
            Ok(())
        } else {
            let cut: String = out.trim().chars().take(200).collect();
            Err(format!("{}: {cut}", self.program.display()))
        }
    }
}

/// A Redis-protocol server of a secure launch, reached with its own command-line client
/// (`redis-cli` or `valkey-cli`) over TLS verified against the launcher's CA, as the
/// administrator: the password goes in `REDISCLI_AUTH`, never in the arguments (which an error
/// may quote), and `Debug` shows only the variable's name.
#[derive(Clone)]
pub(crate) struct RedisCli {
    pub(crate) addr: SocketAddr,
    program: PathBuf,
    /// `--tls --cacert CA -h IP -p PORT --user ADMIN --no-auth-warning`.
    connect: Vec<OsString>,
    env: Vec<(String, String)>,
}

impl std::fmt::Debug for RedisCli {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCli")
            .field("addr", &self.addr)
            .field("program", &self.program)
            .field("connect", &self.connect)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .finish()
    }
}

impl RedisCli {
    pub(crate) fn new(addr: SocketAddr, program: PathBuf, s: &Secure) -> RedisCli {
        let connect = [
            "--tls".to_owned(),
            "--cacert".to_owned(),
            s.ca_path().display().to_string(),
            "-h".to_owned(),
            addr.ip().to_string(),
            "-p".to_owned(),
            addr.port().to_string(),
            "--user".to_owned(),
            s.admin_user().to_owned(),
            "--no-auth-warning".to_owned(),
        ]
        .map(OsString::from)
        .to_vec();
        RedisCli {
            addr,
            program,
            connect,
            env: vec![("REDISCLI_AUTH".to_owned(), s.admin_password().to_owned())],
        }
    }

    /// The client program.
    pub(crate) fn program(&self) -> &Path {
        &self.program
    }

    /// The connection arguments followed by `rest` (no secret among them).
    pub(crate) fn args_with(&self, rest: &[&str]) -> Vec<String> {
        self.connect
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .chain(rest.iter().map(|r| (*r).to_owned()))
            .collect()
    }

    /// The environment that carries the administrator's password.
    pub(crate) fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// `PING` answers `PONG`.
    pub(crate) fn ping(&self) -> Result<(), String> {
        let mut args = self.connect.clone();
        args.push("PING".into());
        CommandProbe {
            addr: self.addr,
            program: self.program.clone(),
            args,
            env: self.env.clone(),
            expect: "PONG",
            stdin: None,
        }
        .check()
    }

    /// [`redis_cluster_ok`](crate::probe::redis_cluster_ok) over TLS: the three answers come
    /// from one client run (the commands on its standard input).
    pub(crate) fn cluster_ok(&self) -> Result<(), String> {
        let (ok, out) = run_bounded(
            &self.program,
            &self.connect,
            &self.env,
            Some("CLUSTER INFO\nINFO replication\nINFO persistence\n"),
            PROBE_LIMIT,
        )?;
        if !ok {
            let cut: String = out.trim().chars().take(200).collect();
            return Err(format!("{}: {cut}", self.program.display()));
        }
        crate::probe::redis_cluster_judge(self.addr, &out, &out, &out)
    }
}

/// Runs `program` with `stdin` fed to it, killed after `limit`; returns whether it exited 0
/// and its output (stdout then stderr; at most 64 KiB of each is kept).
pub(crate) fn run_bounded(
    program: &Path,
    args: &[OsString],
    env: &[(String, String)],
    stdin: Option<&str>,
    limit: Duration,
) -> Result<(bool, String), String> {
    use std::io::Read;
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {}: {e}", program.display()))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(text.as_bytes());
    }
    let readers = [
        child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>),
        child.stderr.take().map(|e| Box::new(e) as Box<dyn Read + Send>),
    ]
    .map(|r| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(r) = r {
                let _ = r.take(64 * 1024).read_to_end(&mut buf);
            }
            buf
        })
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut out = String::new();
    for r in readers {
        out.push_str(&String::from_utf8_lossy(&r.join().unwrap_or_default()));
    }
    match status {
        Some(s) => Ok((s.success(), out)),
        None => Err(format!("{} did not finish within {limit:?}", program.display())),
    }
}

/// Runs a set-up step that must succeed (its secrets in `env` or `stdin`); the error quotes its
/// program and output, never the secrets.
pub(crate) fn setup_step(
    backend: Backend,
    what: &str,
    program: &Path,
    args: &[&str],
    env: &[(String, String)],
    stdin: Option<&str>,
) -> Result<String, LaunchError> {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let failed = |output: String| LaunchError::CommandFailed {
        backend: backend.name(),
        command: format!(
            "{} {} ({what})",
            program.display(),
            args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
        ),
        status: "failed".to_owned(),
        output,
    };
    match run_bounded(program, &args, env, stdin, Duration::from_secs(30)) {
        Ok((true, out)) => Ok(out),
        Ok((false, out)) => Err(failed(out)),
        Err(e) => Err(failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throwaway_ca_signs_a_server_certificate_for_loopback() {
        let pki = Pki::generate().unwrap();
        assert!(pki.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"), "{}", pki.ca_pem);
        assert!(pki.server_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pki.server_key_pem.contains("PRIVATE KEY"));
        assert_ne!(pki.ca_pem, pki.server_pem);
    }

    #[test]
    fn debug_hides_both_passwords() {
        let dir = std::env::temp_dir().join(format!("shedlock-secure-test-{}", std::process::id()));
        let s = Secure::generate(Backend::Postgres, &dir).unwrap();
        let shown = format!("{s:?}");
        assert!(!shown.contains(s.admin_password()), "{shown}");
        assert!(!shown.contains(s.app_password()), "{shown}");
        assert_eq!(s.admin_password().len(), 48);
        assert_ne!(s.admin_password(), s.app_password());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_secure_cluster_names_every_node_over_tls_and_its_env_carries_every_address() {
        let dir = std::env::temp_dir()
            .join(format!("shedlock-secure-cluster-test-{}", std::process::id()));
        let s = Secure::generate(Backend::RedisCluster, &dir).unwrap();
        let addrs: Vec<SocketAddr> =
            (1..=6).map(|p| SocketAddr::from((Ipv4Addr::LOCALHOST, 7000 + p))).collect();
        let url = s.service_url(&addrs);
        let urls: Vec<&str> = url.split(',').collect();
        assert_eq!(urls.len(), 6);
        for (u, a) in urls.iter().zip(&addrs) {
            assert_eq!(*u, format!("rediss://shedlock_app:{}@{a}", s.app_password()));
        }
        let (back, back_addrs) = Secure::decode(Backend::RedisCluster, &s.encode(&addrs)).unwrap();
        assert_eq!(back_addrs, addrs);
        assert_eq!(back.service_url(&back_addrs), url);
        assert!(Secure::decode(Backend::RedisCluster, "").is_none());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_probe_that_outlives_its_limit_is_killed_and_reported() {
        let started = Instant::now();
        let r = run_bounded(
            Path::new("/bin/sleep"),
            &["30".into()],
            &[],
            None,
            Duration::from_millis(200),
        );
        assert!(r.unwrap_err().contains("did not finish"));
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
