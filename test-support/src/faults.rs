//! The fault scenarios' clusters ([`shedlock_conformance::faults`]) for the backends the
//! launcher runs: each server of the backend started natively in the namespace the scenario
//! gives it ([`LaunchOptions::placement`]).

use std::{
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use shedlock::BoxError;
use shedlock_conformance::faults::{FaultCluster, FaultPlan, Member, RunningCluster};
use shedlock_launcher::{Backend, LaunchOptions, Placement, Service, Via};

/// `backend` started in the scenario's namespaces; the node processes find it through
/// `env_backend`'s URL variable (the one the suite's factory reads: the `etcd` suite's
/// factory reads `SHEDLOCK_ETCD_URL`, which then names the three nodes of an etcd cluster).
#[derive(Debug, Clone, Copy)]
pub struct Launched {
    backend: Backend,
    env_backend: Backend,
}

impl Launched {
    /// `backend`, announced to the nodes in `env_backend`'s variable.
    pub fn new(backend: Backend, env_backend: Backend) -> Self {
        Launched { backend, env_backend }
    }
}

impl FaultCluster for Launched {
    fn servers(&self) -> usize {
        self.backend.node_count()
    }

    fn targets(&self) -> Vec<usize> {
        match self.backend {
            // The masters `redis-cli --cluster create` made (the first half); after a
            // fail-over a target may be a replica until it is promoted back.
            Backend::RedisCluster => (0..self.backend.node_count() / 2).collect(),
            _ => (0..self.backend.node_count()).collect(),
        }
    }

    fn start(&self, placement: &[Member]) -> Result<Box<dyn RunningCluster>, BoxError> {
        let opts = LaunchOptions::new()
            .via(Via::Native)
            .ignore_env(true)
            .placement(placement.iter().map(|m| Placement::new(&m.netns, m.ip)).collect());
        let service = Service::start(self.backend, &opts)?;
        Ok(Box::new(Running { service, env_var: self.env_backend.env_var() }))
    }
}

struct Running {
    service: Service,
    env_var: &'static str,
}

impl RunningCluster for Running {
    fn node_env(&self) -> Vec<(String, String)> {
        vec![(self.env_var.to_owned(), self.service.url().to_owned())]
    }

    fn describe(&self) -> String {
        self.service.server().replace(
            "native processes on loopback",
            "native processes, each in its own network namespace",
        )
    }

    fn server_pid(&self, i: usize) -> Option<u32> {
        self.service.pids().get(i).copied().flatten()
    }

    fn kill(&self, i: usize) -> Result<(), BoxError> {
        Ok(self.service.kill_node(i)?)
    }

    fn restart(&self, i: usize) -> Result<(), BoxError> {
        Ok(self.service.start_node(i)?)
    }

    /// The Redis Cluster's masters (`ROLE`), the etcd leader (`/v3/maintenance/status`), the
    /// ZooKeeper leader (`srvr`), asked of each node with a short time limit.
    fn primaries(&self) -> Vec<usize> {
        let addrs = self.service.addrs();
        let ask: fn(SocketAddr) -> Option<bool> = match self.service.backend() {
            Backend::RedisCluster => |a| {
                let r = exchange(a, b"*1\r\n$4\r\nROLE\r\n", Some(b"\r\n"))?;
                Some(r.contains("master"))
            },
            Backend::EtcdCluster => |a| {
                let req = format!(
                    "POST /v3/maintenance/status HTTP/1.0\r\nHost: {a}\r\nContent-Type: \
                     application/json\r\nContent-Length: 2\r\n\r\n{{}}"
                );
                let r = exchange(a, req.as_bytes(), None)?;
                let field = |k: &str| {
                    let at = r.find(&format!("\"{k}\":\""))? + k.len() + 4;
                    r[at..].split('"').next().map(str::to_owned)
                };
                Some(field("member_id")? == field("leader")?)
            },
            Backend::ZooKeeperEnsemble => |a| {
                let r = exchange(a, b"srvr", None)?;
                Some(r.contains("Mode: leader"))
            },
            _ => return Vec::new(),
        };
        addrs
            .iter()
            .take(self.service.backend().node_count())
            .enumerate()
            .filter(|(_, a)| ask(**a) == Some(true))
            .map(|(i, _)| i)
            .collect()
    }
}

/// Sends `request` to `addr` and reads the answer (until the peer closes, or until `enough`
/// has been seen after the first bytes), within 300 ms in all; `None` if it did not answer.
fn exchange(addr: SocketAddr, request: &[u8], enough: Option<&[u8]>) -> Option<String> {
    use std::io::{Read, Write};
    let limit = Duration::from_millis(300);
    let deadline = Instant::now() + limit;
    let mut s = TcpStream::connect_timeout(&addr, limit).ok()?;
    s.set_write_timeout(Some(limit)).ok()?;
    s.write_all(request).ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1)))).ok()?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
        if enough.is_some_and(|e| out.windows(e.len()).any(|w| w == e)) && out.len() > 16 {
            break;
        }
        if out.len() > 64 * 1024 {
            break;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// The scenario `name` on `backend`, found by the nodes through `env_backend`'s variable.
pub fn plan(name: &str, backend: Backend, env_backend: Backend) -> FaultPlan {
    FaultPlan::new(name, Launched::new(backend, env_backend))
}
