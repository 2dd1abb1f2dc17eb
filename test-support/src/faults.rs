//! The fault scenarios' clusters ([`shedlock_conformance::faults`]) for the backends the
//! launcher runs: each server of the backend started natively in the namespace the scenario
//! gives it ([`LaunchOptions::placement`]).

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

    /// The leader or masters right now, as the launcher finds them
    /// ([`Service::primaries`]).
    fn primaries(&self) -> Vec<usize> {
        self.service.primaries()
    }
}

/// The scenario `name` on `backend`, found by the nodes through `env_backend`'s variable.
pub fn plan(name: &str, backend: Backend, env_backend: Backend) -> FaultPlan {
    FaultPlan::new(name, Launched::new(backend, env_backend))
}
