//! C18 against the memory provider in client-time mode (expiry judged by each node's own,
//! skewed clock): the skew bound is measured, the violation past it is detected, and a
//! documented bound above the real one is refuted. Also: a factory that ignores the clock it is
//! given is caught.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use shedlock::{BoxError, LockProvider, system_clock};
use shedlock_conformance::{InstanceOptions, Options, Outcome, ProviderFactory, Suite, checks};
use shedlock_memory::{MemoryLockProvider, MemoryServer, TimeSource};

struct ClientTime {
    server: MemoryServer,
    honour_clock: bool,
}

#[async_trait::async_trait]
impl ProviderFactory for ClientTime {
    fn name(&self) -> &str {
        "memory-client-time"
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let clock = if self.honour_clock { options.clock_or_system() } else { system_clock() };
        let p = MemoryLockProvider::new(&self.server).with_time_source(TimeSource::Client);
        Ok(Arc::new(p.with_clock(clock)))
    }
}

async fn suite(honour_clock: bool, options: Options) -> Suite {
    Suite::new(ClientTime { server: MemoryServer::new(), honour_clock }, options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_time_skew_bound_is_measured_and_the_violation_detected() {
    let s = suite(true, Options::new()).await;
    assert!(!s.capabilities().server_time);
    let v = checks::c18_clock_skew(&s).await;
    println!("{}", v.detail);
    assert_eq!(v.outcome, Outcome::Pass, "{}", v.detail);
    assert!(v.detail.contains("violation detected at"), "{}", v.detail);
    let bound = s.figures().skew_bound_ms.expect("skew bound measured");
    // Client time with a 300 ms lock: safe only within the kit's tolerance (granularity + 10 ms).
    assert!(bound < 20.0, "measured bound {bound} ms");
    let report = s.report(vec![s.run_check(checks::by_id("C18").unwrap()).await]);
    assert!(report.to_json().contains("\"skew_bound_ms\": "), "{}", report.to_json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_documented_bound_above_the_real_one_fails() {
    let s =
        suite(true, Options::new().with_documented_skew_bound(Duration::from_millis(200))).await;
    let v = checks::c18_clock_skew(&s).await;
    println!("{}", v.detail);
    assert_eq!(v.outcome, Outcome::Fail, "{}", v.detail);
    assert!(v.detail.contains("documented skew bound 200 ms"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_factory_ignoring_the_clock_is_caught() {
    let s = suite(false, Options::new()).await;
    let v = checks::c18_clock_skew(&s).await;
    println!("{}", v.detail);
    assert_eq!(v.outcome, Outcome::Fail, "{}", v.detail);
    assert!(v.detail.contains("InstanceOptions::clock"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_time_scheduler_with_small_skew_runs_each_fire_once() {
    // C19 injects skew below lock_at_least_for / 3: a client-time provider stays correct there.
    let s = suite(true, Options::new()).await;
    let v = checks::c19_scheduler_once(&s).await;
    println!("{}", v.detail);
    assert_eq!(v.outcome, Outcome::Pass, "{}", v.detail);
}
