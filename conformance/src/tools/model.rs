//! The model-based property test (C17).
//!
//! Random sequences of [`Op`]s (try_lock / unlock / extend / wait, across three instances and two
//! names) run against the provider under test and, step by step, against the reference model: a
//! [`shedlock_memory`] server on a [`ManualClock`]. Each step's answer (acquired or not, extend
//! accepted or not) must agree.
//!
//! Timing tolerance: model time moves only in whole units `U` (at `Wait` steps); every
//! `lock_at_most_for` and `lock_at_least_for` is a whole number of units plus a half, so every
//! expiry falls half a unit away from any step. Real time is re-synchronised at each `Wait`; a
//! case whose real time drifts more than `U / 4` past model time (a loaded machine) before a step
//! is discarded as inconclusive rather than judged. A step that disagrees is judged only when its
//! call also *ended* less than `U / 2 - g` after model time: a backend that decided later may
//! have seen a half-unit expiry pass that the model has not, so such a step is inconclusive too
//! (a ZooKeeper ensemble under CI load once took over 50 ms to answer a `try_lock` right after
//! an `unlock` that kept `lock_at_least_for = ½ U`). `U = max(200 ms, 5 g)` for granularity `g`,
//! so a correct provider is never misjudged.
//!
//! Failing cases are shrunk with proptest's value trees to a minimal failing sequence, which the
//! failure message shows.

use std::{
    collections::HashMap,
    fmt,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use proptest::{
    prelude::*,
    strategy::ValueTree,
    test_runner::{Config, RngAlgorithm, TestRng, TestRunner},
};
use shedlock::{Error, Lock, LockConfig, LockProvider, ManualClock};
use shedlock_memory::{MemoryLockProvider, MemoryServer};

use crate::{
    outcome::Verdict,
    suite::Suite,
    tools::calls::{bounded, instances},
};

/// Instances per case.
pub const INSTANCES: usize = 3;
/// Names per case.
pub const NAMES: usize = 2;

/// One step of a model-based case.
#[derive(Clone, PartialEq, Eq)]
pub enum Op {
    /// `try_lock` on instance `inst` for name `name`, `lock_at_most_for = (most + ½) U`,
    /// `lock_at_least_for = (least + ½) U` when `least` is set (capped below at-most).
    TryLock {
        /// Instance index.
        inst: usize,
        /// Name index.
        name: usize,
        /// Whole units of at-most.
        most: u8,
        /// Whole units of at-least.
        least: Option<u8>,
    },
    /// Unlock the held handle number `slot` (modulo the number held).
    Unlock {
        /// Handle index.
        slot: usize,
    },
    /// Extend the handle number `slot` to `(most + ½) U`, with `lock_at_least_for =
    /// (least + ½) U` from the extension when `least` is set (below at-most).
    Extend {
        /// Handle index.
        slot: usize,
        /// Whole units of at-most.
        most: u8,
        /// Whole units of at-least.
        least: Option<u8>,
    },
    /// Let `units` units pass.
    Wait {
        /// Units.
        units: u8,
    },
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::TryLock { inst, name, most, least } => match least {
                Some(l) => write!(f, "try_lock(i{inst}, n{name}, most={most}.5U, least={l}.5U)"),
                None => write!(f, "try_lock(i{inst}, n{name}, most={most}.5U)"),
            },
            Op::Unlock { slot } => write!(f, "unlock(h{slot})"),
            Op::Extend { slot, most, least } => match least {
                Some(l) => write!(f, "extend(h{slot}, most={most}.5U, least={l}.5U)"),
                None => write!(f, "extend(h{slot}, most={most}.5U)"),
            },
            Op::Wait { units } => write!(f, "wait({units}U)"),
        }
    }
}

/// The strategy for one op; `extend` is generated only when the provider declares it.
///
/// Ops are drawn as plain integer tuples (so shrinking moves towards `try_lock` on instance 0,
/// name 0, short durations) and mapped to [`Op`].
pub fn op_strategy(extend: bool) -> impl Strategy<Value = Op, Tree: Send> + Send {
    (0u8..10, 0usize..4, 0u8..3, 0u8..4).prop_map(move |(kind, a, b, c)| match kind {
        0..=3 => Op::TryLock {
            inst: a % INSTANCES,
            name: usize::from(b) % NAMES,
            most: 1 + c % 3,
            least: (kind == 3).then(|| (c % 3).min(b)),
        },
        4 | 5 => Op::Wait { units: 1 + b % 2 },
        8 | 9 if extend => {
            Op::Extend { slot: a, most: 1 + c % 3, least: (kind == 9).then(|| (c % 3).min(b)) }
        }
        _ => Op::Unlock { slot: a },
    })
}

/// How one case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseOutcome {
    /// Every step agreed with the model.
    Agreed,
    /// Real time drifted too far from model time; not judged.
    Inconclusive(String),
    /// A step disagreed (or a call failed).
    Disagreed(String),
}

struct Held {
    name: usize,
    seq: u64,
    real: Lock,
    model: Lock,
}

/// Runs one case against `real` instances (at least [`INSTANCES`]); `names` are fresh lock
/// names (at least [`NAMES`]).
pub async fn run_case(
    suite: &Suite,
    real: &[Arc<dyn LockProvider>],
    names: &[String],
    unit: Duration,
    ops: &[Op],
) -> CaseOutcome {
    let caps = suite.capabilities().clone();
    let g = caps.granularity;
    let clock = ManualClock::new(SystemTime::now());
    let server = MemoryServer::with_clock(Arc::new(clock.clone()));
    let model: Vec<MemoryLockProvider> =
        (0..INSTANCES).map(|_| MemoryLockProvider::new(&server)).collect();
    let mut held: Vec<Held> = Vec::new();
    let mut latest: HashMap<usize, u64> = HashMap::new();
    let mut last_token: HashMap<usize, u64> = HashMap::new();
    let mut seq = 0u64;
    let start = Instant::now();
    let mut model_time = Duration::ZERO;
    let half = |n: u8| unit * u32::from(n) + unit / 2;
    let outcome = 'case: {
        for (k, op) in ops.iter().enumerate() {
            let drift = start.elapsed().saturating_sub(model_time);
            if drift > unit / 4 {
                break 'case CaseOutcome::Inconclusive(format!(
                    "step {k}: real time {} ms behind the model",
                    drift.as_millis()
                ));
            }
            match op {
                Op::TryLock { inst, name, most, least } => {
                    let at_least = least.map(half).unwrap_or(Duration::ZERO);
                    let cfg = match LockConfig::new(names[*name].clone(), half(*most), at_least) {
                        Ok(c) => c,
                        Err(e) => {
                            break 'case CaseOutcome::Disagreed(format!(
                                "step {k}: bad config {e}"
                            ));
                        }
                    };
                    let r = match bounded(suite, "try_lock", real[*inst].try_lock(&cfg)).await {
                        Ok(Ok(r)) => r,
                        Ok(Err(e)) => {
                            break 'case CaseOutcome::Disagreed(format!(
                                "step {k} {op:?}: error {e}"
                            ));
                        }
                        Err(v) => {
                            break 'case CaseOutcome::Disagreed(format!(
                                "step {k} {op:?}: {}",
                                v.detail
                            ));
                        }
                    };
                    let m = model[*inst].try_lock(&cfg).await.ok().flatten();
                    match (r, m) {
                        (Some(r), Some(m)) => {
                            if caps.fencing {
                                match r.fencing_token() {
                                    Some(t) if last_token.get(name).is_none_or(|p| t > *p) => {
                                        last_token.insert(*name, t);
                                    }
                                    t => {
                                        break 'case CaseOutcome::Disagreed(format!(
                                            "step {k} {op:?}: fencing token {t:?} not above {:?}",
                                            last_token.get(name)
                                        ));
                                    }
                                }
                            }
                            seq += 1;
                            latest.insert(*name, seq);
                            held.push(Held { name: *name, seq, real: r, model: m });
                        }
                        (None, None) => {}
                        (Some(r), None) => {
                            let lag = overran(start, model_time, unit, g);
                            let _ = r.unlock().await;
                            break 'case judge(
                                k,
                                lag,
                                format!(
                                    "step {k} {op:?}: the provider granted a lock the model holds"
                                ),
                            );
                        }
                        (None, Some(_)) => {
                            break 'case judge(
                                k,
                                overran(start, model_time, unit, g),
                                format!(
                                    "step {k} {op:?}: the provider refused a lock the model grants"
                                ),
                            );
                        }
                    }
                }
                Op::Unlock { slot } => {
                    if held.is_empty() {
                        continue;
                    }
                    let h = held.remove(slot % held.len());
                    let stale = latest.get(&h.name) != Some(&h.seq);
                    if stale && !caps.owner_checked {
                        continue; // not owner-checked: a stale unlock may clear the new holder
                    }
                    match bounded(suite, "unlock", h.real.unlock()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            break 'case CaseOutcome::Disagreed(format!(
                                "step {k} {op:?}: error {e}"
                            ));
                        }
                        Err(v) => {
                            break 'case CaseOutcome::Disagreed(format!(
                                "step {k} {op:?}: {}",
                                v.detail
                            ));
                        }
                    }
                    let _ = h.model.unlock().await;
                }
                Op::Extend { slot, most, least } => {
                    if held.is_empty() || !caps.extend {
                        continue;
                    }
                    let i = slot % held.len();
                    let h = &mut held[i];
                    let stale = latest.get(&h.name) != Some(&h.seq);
                    if stale && !caps.owner_checked {
                        continue;
                    }
                    let at_least = least.map(half).unwrap_or(Duration::ZERO);
                    let r = match bounded(suite, "extend", h.real.extend(half(*most), at_least))
                        .await
                    {
                        Ok(r) => r,
                        Err(v) => {
                            break 'case CaseOutcome::Disagreed(format!(
                                "step {k} {op:?}: {}",
                                v.detail
                            ));
                        }
                    };
                    let m = h.model.extend(half(*most), at_least).await;
                    match (r, m) {
                        (Ok(()), Ok(())) | (Err(Error::LockLost { .. }), Err(_)) => {}
                        (Ok(()), Err(_)) => {
                            break 'case judge(
                                k,
                                overran(start, model_time, unit, g),
                                format!(
                                    "step {k} {op:?}: the provider extended a lock the model says is lost"
                                ),
                            );
                        }
                        (Err(e), Ok(())) => {
                            break 'case judge(
                                k,
                                overran(start, model_time, unit, g),
                                format!(
                                    "step {k} {op:?}: the provider refused to extend a held lock: {e}"
                                ),
                            );
                        }
                        (Err(e), Err(_)) => {
                            break 'case CaseOutcome::Disagreed(format!(
                                "step {k} {op:?}: extend of a lost lock gave {e:?}, expected LockLost"
                            ));
                        }
                    }
                }
                Op::Wait { units } => {
                    let d = unit * u32::from(*units);
                    model_time += d;
                    clock.advance(d);
                    tokio::time::sleep_until((start + model_time).into()).await;
                }
            }
        }
        CaseOutcome::Agreed
    };
    for h in held {
        let _ = bounded(suite, "unlock", h.real.unlock()).await;
    }
    outcome
}

/// How far past model time the step that just ended ran, when that is too far to judge it: a
/// backend that decided `U / 2 - g` or more after model time may have seen a half-unit expiry
/// pass that the model has not reached.
fn overran(start: Instant, model_time: Duration, unit: Duration, g: Duration) -> Option<Duration> {
    let lag = start.elapsed().saturating_sub(model_time);
    (lag >= (unit / 2).saturating_sub(g)).then_some(lag)
}

/// Turns a disagreement at step `k` into an inconclusive outcome when the step overran.
fn judge(k: usize, lag: Option<Duration>, why: String) -> CaseOutcome {
    match lag {
        Some(lag) => CaseOutcome::Inconclusive(format!(
            "step {k} ended {} ms after model time, too late to judge ({why})",
            lag.as_millis()
        )),
        None => CaseOutcome::Disagreed(why),
    }
}

/// The unit for granularity `g`.
pub fn unit_for(g: Duration) -> Duration {
    (g * 5).max(Duration::from_millis(200))
}

fn ops_text(ops: &[Op]) -> String {
    ops.iter().map(|o| format!("{o:?}")).collect::<Vec<_>>().join(", ")
}

/// C17's body: generates cases, runs them, shrinks the first failure.
pub(crate) async fn run_model_check(suite: &Suite) -> Result<String, Verdict> {
    let unit = unit_for(suite.capabilities().granularity);
    let cases = suite.options().model_cases.unwrap_or_else(|| {
        let per_case = unit.as_secs_f64() * 4.0;
        ((25.0 / per_case) as u32).clamp(3, 30)
    });
    let max_steps = suite.options().model_max_steps.max(2);
    let real = instances(suite, INSTANCES).await?;
    let strategy =
        proptest::collection::vec(op_strategy(suite.capabilities().extend), 1..=max_steps);
    let mut seed = [0u8; 32];
    for (i, b) in suite.seed().to_le_bytes().iter().enumerate() {
        seed[i] = *b;
        seed[i + 8] = b.wrapping_mul(31);
    }
    let config = Config { failure_persistence: None, ..Config::default() };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let mut agreed = 0;
    let mut inconclusive = 0;
    let mut steps = 0;
    let started = Instant::now();
    for case in 0..cases {
        let mut tree = strategy
            .new_tree(&mut runner)
            .map_err(|e| Verdict::fail(format!("proptest could not generate a case: {e}")))?;
        let ops = tree.current();
        steps += ops.len();
        let names = case_names(suite, case);
        match run_case(suite, &real, &names, unit, &ops).await {
            CaseOutcome::Agreed => agreed += 1,
            CaseOutcome::Inconclusive(why) => {
                inconclusive += 1;
                tracing::debug!(case, %why, "model case inconclusive");
            }
            CaseOutcome::Disagreed(why) => {
                // Shrink (proptest's algorithm: simplify while it fails, complicate when it passes).
                let mut best = (ops.clone(), why);
                let mut iters: u32 = 0;
                let mut more = tree.simplify();
                while more && iters < 64 && started.elapsed() < Duration::from_secs(120) {
                    iters += 1;
                    let candidate = tree.current();
                    let names = case_names(suite, case * 1000 + iters);
                    match run_case(suite, &real, &names, unit, &candidate).await {
                        CaseOutcome::Disagreed(why) => {
                            best = (candidate, why);
                            more = tree.simplify();
                        }
                        _ => more = tree.complicate(),
                    }
                }
                return Err(Verdict::fail(format!(
                    "case {case} disagreed with the model (U = {} ms, seed {}); minimal failing sequence after \
                     {iters} shrink runs: [{}]: {}",
                    unit.as_millis(),
                    suite.seed(),
                    ops_text(&best.0),
                    best.1
                )));
            }
        }
    }
    if agreed * 2 < cases {
        return Err(Verdict::fail(format!(
            "inconclusive: only {agreed} of {cases} cases ran without the machine lagging more than U/4"
        )));
    }
    Ok(format!(
        "{agreed} cases ({steps} steps, U = {} ms) agreed with the reference model; {inconclusive} inconclusive",
        unit.as_millis()
    ))
}

fn case_names(suite: &Suite, case: u32) -> Vec<String> {
    (0..NAMES).map(|n| suite.lock_name(&format!("c17-{case}-{n}"))).collect()
}
