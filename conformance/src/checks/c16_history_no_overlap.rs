//! C16 `history_no_overlap`: recorded holder intervals of one name never overlap.

use std::{sync::Arc, time::Instant};

use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{R, finish, instances, ms},
        history::History,
        workload::{Workload, run_workload},
    },
};

/// C16: history check: every acquire/extend/release is recorded against one monotonic clock;
/// no two holders' certain intervals of one name overlap beyond the granularity.
pub async fn c16_history_no_overlap(suite: &Suite) -> Verdict {
    finish(c16(suite).await)
}

async fn c16(suite: &Suite) -> R {
    let t = suite.timing();
    let n = suite.options().instances.max(2);
    let p = instances(suite, n).await?;
    let w = Workload {
        names: vec![suite.lock_name("c16a"), suite.lock_name("c16b")],
        ops_per_instance: suite.options().history_ops,
        at_most: t.at_most,
        extend: suite.capabilities().extend,
        owner_checked: suite.capabilities().owner_checked,
        tolerate_faults: suite.soaking(),
    };
    let history = Arc::new(History::new());
    let started = Instant::now();
    let acquired = run_workload(suite, &p, &w, &history).await?;
    suite.count_checked(acquired);
    let tol = t.early;
    history.check(tol).map_err(|o| {
        suite.count_overlap();
        Verdict::fail(format!("two holders at once: {o}"))
    })?;
    ensure!(acquired > n, "only {acquired} acquisitions in the workload: too few to judge");
    Ok(format!(
        "{acquired} acquisitions by {n} instances on 2 names with expiries, at-least and extends: \
         no overlap beyond {} ms ({} ms)",
        ms(tol),
        started.elapsed().as_millis()
    ))
}
