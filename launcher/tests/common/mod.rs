//! Helpers for the launcher's tests: independent clients that talk to the servers.
#![allow(dead_code, missing_docs)]

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use shedlock_launcher::{Backend, LaunchOptions, Service, Via};

/// Native, private (the environment's URL is ignored), 120 s readiness limit.
pub fn native() -> LaunchOptions {
    LaunchOptions::new().via(Via::Native).ignore_env(true).ready_timeout(Duration::from_secs(120))
}

pub fn start(backend: Backend) -> Service {
    let s = Service::start(backend, &native()).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{backend}: ready in {} ms at {}", s.started_in().as_millis(), s.url());
    s
}

/// Runs a command; panics with its output unless it succeeds; returns stdout.
pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A live (non-zombie) process?
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next()).unwrap_or(None);
            !matches!(state, Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// Stops the service and checks that its processes and its dir are gone.
pub fn stop_and_check_gone(s: Service) {
    let pids: Vec<u32> = s.pids().into_iter().flatten().collect();
    let dir = s.dir();
    assert!(!pids.is_empty() || s.backend() == Backend::Sqlite);
    for p in &pids {
        assert!(pid_alive(*p), "server pid {p} not running before stop");
    }
    s.stop().unwrap();
    for p in &pids {
        assert!(!pid_alive(*p), "server pid {p} still running after stop()");
    }
    if let Some(d) = dir {
        assert!(!d.exists(), "{} not removed", d.display());
    }
    drop(s);
}

/// A minimal HTTP/1.1 exchange; returns (status, body).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.split(' ').nth(1).unwrap().parse().unwrap();
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// Sends `request` and reads until `done(reply)` or the connection closes.
pub fn tcp_exchange(addr: SocketAddr, request: &[u8], done: impl Fn(&str) -> bool) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                reply.extend_from_slice(&buf[..n]);
                if done(&String::from_utf8_lossy(&reply)) {
                    break;
                }
            }
            Err(e) => {
                panic!("read from {addr}: {e}; got so far {:?}", String::from_utf8_lossy(&reply))
            }
        }
    }
    String::from_utf8_lossy(&reply).into_owned()
}

pub fn zk_mode(addr: SocketAddr) -> String {
    let out = tcp_exchange(addr, b"srvr", |_| false);
    out.lines()
        .find_map(|l| l.strip_prefix("Mode:"))
        .map(|m| m.trim().to_owned())
        .unwrap_or_default()
}

pub fn venv_python() -> std::path::PathBuf {
    shedlock_launcher::backends_dir().join("venv/bin/python")
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}
