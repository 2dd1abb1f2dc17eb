//! Soak runs: C15, C16 and C28 repeated for a given time, C16 under injected faults.

use std::time::{Duration, Instant};

use crate::{
    check::Check,
    outcome::{CheckResult, Outcome},
    suite::Suite,
    tools::proxy::FaultProxy,
};

/// The checks a soak run repeats.
pub const SOAK_CHECKS: [&str; 3] = ["C15", "C16", "C28"];

/// Repeats `check` for its share (a third) of `total`, and returns one result for all runs: a
/// failure of any run fails it (the first failure is reported). C16 runs through the kit's
/// fault proxy, which delays and cuts connections at random moments, when the factory offers
/// a backend address; its workload then tolerates retryable errors.
pub async fn soak_check(suite: &Suite, check: &Check, total: Duration) -> CheckResult {
    let slice = total / 3;
    let started = Instant::now();
    let faults = if check.id == "C16" { suite.hooks().backend_address() } else { None };
    let proxy = match faults {
        Some(addr) => FaultProxy::start(addr).await.ok().map(std::sync::Arc::new),
        None => None,
    };
    let injector = proxy.as_ref().map(|p| {
        suite.set_soak_proxy(Some(p.addr()));
        let p = p.clone();
        let mut rng = suite.rng();
        tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                tokio::time::sleep(Duration::from_millis(rng.u64(1500..4000))).await;
                if rng.bool() {
                    p.set_delay(Duration::from_millis(rng.u64(5..60)));
                    tokio::time::sleep(Duration::from_millis(rng.u64(300..1200))).await;
                    p.set_delay(Duration::ZERO);
                } else {
                    p.cut_all();
                }
                n += 1;
                if n == u64::MAX {
                    break;
                }
            }
        })
    });
    let mut runs = 0u32;
    let mut failed: Option<(u32, String)> = None;
    let mut last = String::new();
    let mut outcome = Outcome::Pass;
    while runs == 0 || started.elapsed() < slice {
        runs += 1;
        let v = (check.run)(suite).await;
        match v.outcome {
            Outcome::Pass => last = v.detail,
            Outcome::Fail => {
                failed.get_or_insert((runs, v.detail));
            }
            other => {
                outcome = other;
                last = v.detail;
                break;
            }
        }
    }
    if let Some(task) = injector {
        task.abort();
        suite.set_soak_proxy(None);
    }
    let with_faults = if proxy.is_some() { " with delays and cuts injected" } else { "" };
    let (outcome, detail) = match failed {
        Some((run, d)) => {
            (Outcome::Fail, format!("soak: run {run} of {runs}{with_faults} failed: {d}"))
        }
        None if outcome == Outcome::Pass => (
            Outcome::Pass,
            format!(
                "soak: {runs} runs in {} s{with_faults}, all passed; last: {last}",
                started.elapsed().as_secs()
            ),
        ),
        None => (outcome, last),
    };
    CheckResult {
        id: check.id,
        name: check.name,
        outcome,
        detail,
        duration: started.elapsed(),
        expected: suite.options().expectation(check.id).cloned(),
    }
}
