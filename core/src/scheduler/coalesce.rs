//! Coalesced fires: the jobs of one [`Scheduler`](super::Scheduler) that fall due together ask
//! for their locks in one batch ([`LockProvider::try_lock_many`](crate::LockProvider::try_lock_many)),
//! and an optional capacity bounds how many this instance claims.
//!
//! Each job's runner sends a [`Claim`] when its fire is due and waits for the answer. The
//! coalescer takes the first claim, waits the coalescing window for the others due with it
//! (not when the scheduler has a single task), and answers them all:
//!
//! - without a capacity, the whole batch goes to the provider at once;
//! - with a capacity `c`, it claims at most as many names as it has free slots, picked at
//!   random (so instances that fire together try different names first and share the work),
//!   and tries further names while slots are left and names are untried. A name it does not try
//!   because its slots are full is left for the other instances. So no instance claims more
//!   than it can start, and every due job is tried somewhere unless every instance is full: a
//!   fire time runs exactly once when the fleet's total capacity allows.

use std::{
    collections::VecDeque,
    hash::{BuildHasher, Hasher},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use crate::{
    batch::BatchOptions, config::LockConfig, error::Error, executor::LockingExecutor,
    provider::Lock,
};

/// A runner's request: the lock of its fire that is due now.
pub(super) struct Claim {
    pub(super) config: LockConfig,
    pub(super) reply: oneshot::Sender<Claimed>,
}

/// The answer to a [`Claim`].
pub(super) enum Claimed {
    /// Won; run the task under it, holding the capacity slot (if any) until it ends.
    Won(Lock, Option<OwnedSemaphorePermit>),
    /// Held elsewhere.
    NotWon,
    /// Not tried: this instance's capacity is full; left for the other instances.
    LeftForOthers,
    /// The attempt failed.
    Failed(Error),
}

/// How the coalescer batches.
#[derive(Debug, Clone)]
pub(super) struct Coalescing {
    /// How long to wait, after the first due claim, for the others due with it.
    pub(super) window: Duration,
    /// The most tasks of this scheduler running at once (`None`: no limit).
    pub(super) capacity: Option<Arc<Semaphore>>,
    /// The batch's options (how many requests in flight at once).
    pub(super) options: BatchOptions,
    /// How many tasks claim through this coalescer: with one, there is nothing to wait for.
    pub(super) tasks: Arc<AtomicUsize>,
}

/// Runs the coalescer until every sender of `claims` is gone.
pub(super) async fn run(
    executor: LockingExecutor,
    coalescing: Coalescing,
    mut claims: mpsc::UnboundedReceiver<Claim>,
) {
    let mut shuffle = Shuffle::new();
    while let Some(first) = claims.recv().await {
        // A lone task has no one to wait for: its fire is not delayed.
        if !coalescing.window.is_zero() && coalescing.tasks.load(Ordering::SeqCst) > 1 {
            tokio::time::sleep(coalescing.window).await;
        }
        let mut due = vec![first];
        while let Ok(more) = claims.try_recv() {
            due.push(more);
        }
        // A runner that gave up (shutdown) is not asked for.
        due.retain(|c| !c.reply.is_closed());
        if due.is_empty() {
            continue;
        }
        shuffle.apply(&mut due);
        answer(&executor, &coalescing, due).await;
    }
}

/// Answers every claim of `due`.
async fn answer(executor: &LockingExecutor, coalescing: &Coalescing, due: Vec<Claim>) {
    let mut untried: VecDeque<Claim> = due.into();
    while !untried.is_empty() {
        // One slot per name tried: a slot is given back at once when the name is not won.
        let slots: Vec<Option<OwnedSemaphorePermit>> = match &coalescing.capacity {
            None => (0..untried.len()).map(|_| None).collect(),
            Some(capacity) => {
                let mut slots = Vec::new();
                while slots.len() < untried.len() {
                    match Arc::clone(capacity).try_acquire_owned() {
                        Ok(permit) => slots.push(Some(permit)),
                        Err(_) => break,
                    }
                }
                slots
            }
        };
        if slots.is_empty() {
            break;
        }
        let batch: Vec<Claim> = untried.drain(..slots.len()).collect();
        let configs: Vec<LockConfig> = batch.iter().map(|c| c.config.clone()).collect();
        match executor.try_acquire_many(&configs, coalescing.options).await {
            Ok(answers) => {
                for ((claim, slot), answer) in batch.into_iter().zip(slots).zip(answers) {
                    let claimed = match answer {
                        Ok(Some(lock)) => Claimed::Won(lock, slot),
                        Ok(None) => Claimed::NotWon,
                        Err(e) => Claimed::Failed(e),
                    };
                    reply(claim, claimed);
                }
            }
            Err(e) => {
                let n = batch.len();
                for (claim, e) in batch.into_iter().zip(e.fan_out(n)) {
                    reply(claim, Claimed::Failed(e));
                }
            }
        }
        if coalescing.capacity.is_none() {
            break;
        }
    }
    for claim in untried {
        tracing::debug!(
            lock = claim.config.name(),
            "capacity full: this fire is left for the other instances"
        );
        reply(claim, Claimed::LeftForOthers);
    }
}

/// Sends `claimed`; a lock won for a runner that is gone (its scheduler stopped meanwhile) is
/// released at once instead of being held until `lock_at_most_for`.
fn reply(claim: Claim, claimed: Claimed) {
    if let Err(Claimed::Won(lock, _slot)) = claim.reply.send(claimed) {
        tokio::spawn(async move {
            let name = lock.name().to_owned();
            if let Err(error) = lock.unlock().await {
                tracing::warn!(lock = name, %error, "releasing a lock won for a stopped runner failed");
            }
        });
    }
}

/// A small random permutation source (no dependency): std's randomly keyed hasher over a
/// counter.
struct Shuffle {
    state: std::collections::hash_map::RandomState,
    counter: u64,
}

impl Shuffle {
    fn new() -> Self {
        Self { state: std::collections::hash_map::RandomState::new(), counter: 0 }
    }

    fn next(&mut self) -> u64 {
        self.counter = self.counter.wrapping_add(1);
        let mut h = self.state.build_hasher();
        h.write_u64(self.counter);
        h.finish()
    }

    /// Fisher–Yates.
    fn apply<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = usize::try_from(self.next() % (i as u64 + 1)).unwrap_or(0);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_a_permutation_and_varies() {
        let mut s = Shuffle::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let mut v: Vec<u32> = (0..8).collect();
            s.apply(&mut v);
            let mut sorted = v.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..8).collect::<Vec<_>>());
            seen.insert(v);
        }
        assert!(seen.len() > 10, "only {} distinct orders in 50", seen.len());
    }
}
