//! Free loopback ports that two launchers (even in two test runs at once) never hand out twice.
//!
//! A candidate port is drawn at random from 20000..32000 — below Linux's ephemeral range, so the
//! kernel does not give it to an outgoing connection meanwhile — must be bindable on 127.0.0.1,
//! and is reserved by creating `<tmp>/shedlock-launcher-ports/<port>` exclusively (holding our
//! pid; a file whose pid is dead is taken over). The reservation covers the window between the
//! check and the server's own bind; if a server still loses its port, the launcher retries with
//! new ones.

use std::{
    collections::hash_map::RandomState,
    hash::{BuildHasher, Hasher},
    io::Write,
    net::{Ipv4Addr, SocketAddrV4, TcpListener},
    path::PathBuf,
};

const LOW: u16 = 20000;
const HIGH: u16 = 32000;

/// Reserved ports, released when dropped.
#[derive(Debug)]
pub(crate) struct PortLease {
    ports: Vec<u16>,
    files: Vec<PathBuf>,
}

impl PortLease {
    pub(crate) fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The reservation files (removed on drop; the watchdog removes them if we die).
    pub(crate) fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

fn lease_dir() -> PathBuf {
    std::env::temp_dir().join("shedlock-launcher-ports")
}

fn random_port() -> u16 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    let span = u64::from(HIGH - LOW);
    LOW + u16::try_from(h.finish() % span).unwrap_or(0)
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).is_ok()
}

fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')).unwrap_or(true),
        Err(_) => false,
    }
}

/// Tries to reserve one port; `None` if it is taken.
fn reserve(port: u16) -> Option<PathBuf> {
    let dir = lease_dir();
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(port.to_string());
    for _ in 0..2 {
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => {
                let _ = write!(f, "{}", std::process::id());
                return Some(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let owner = std::fs::read_to_string(&path).ok()?;
                let pid: u32 = owner.trim().parse().ok()?;
                if pid_alive(pid) {
                    return None;
                }
                // A dead launcher's reservation: take it over.
                let _ = std::fs::remove_file(&path);
            }
            // The directory is not writable (another user's /tmp dir): rely on the bind check.
            Err(_) => return Some(PathBuf::new()),
        }
    }
    None
}

/// Reserves `n` distinct free loopback ports.
pub(crate) fn lease(n: usize) -> std::io::Result<PortLease> {
    lease_with(&[], n)
}

/// Reserves `n` ports, the `preferred` ones first — taken as given, even if something is bound
/// there (the server's bind then fails and the launcher retries on free ports) — then free ones.
pub(crate) fn lease_with(preferred: &[u16], n: usize) -> std::io::Result<PortLease> {
    let mut lease = PortLease { ports: Vec::with_capacity(n), files: Vec::with_capacity(n) };
    for &port in preferred.iter().take(n) {
        if lease.ports.contains(&port) {
            continue;
        }
        lease.ports.push(port);
        if let Some(file) = reserve(port).filter(|f| !f.as_os_str().is_empty()) {
            lease.files.push(file);
        }
    }
    let mut tries = 0;
    while lease.ports.len() < n {
        tries += 1;
        if tries > 2000 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("no free loopback port in {LOW}..{HIGH} after 2000 tries"),
            ));
        }
        let port = random_port();
        if lease.ports.contains(&port) || !bindable(port) {
            continue;
        }
        if let Some(file) = reserve(port) {
            // Re-check after reserving: someone may have bound it meanwhile.
            if !bindable(port) {
                if !file.as_os_str().is_empty() {
                    let _ = std::fs::remove_file(&file);
                }
                continue;
            }
            lease.ports.push(port);
            if !file.as_os_str().is_empty() {
                lease.files.push(file);
            }
        }
    }
    Ok(lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_distinct_and_exclusive() {
        let a = lease(5).unwrap();
        let b = lease(5).unwrap();
        let mut all: Vec<u16> = a.ports().iter().chain(b.ports()).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 10);
        for p in a.ports() {
            assert!(reserve(*p).is_none(), "port {p} reserved twice");
            assert!((LOW..HIGH).contains(p));
        }
        let first = a.ports()[0];
        drop(a);
        let again = reserve(first);
        assert!(again.is_some(), "released port {first} cannot be reserved again");
        let _ = std::fs::remove_file(again.unwrap());
    }

    #[test]
    fn a_bound_port_is_never_leased() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        assert!(!bindable(port));
    }
}
