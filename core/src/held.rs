//! The locks this process holds right now through a [`LockingExecutor`], and draining: stop
//! taking locks, let the tasks in flight finish, report.
//!
//! [`LockingExecutor`]: crate::LockingExecutor

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, SystemTime},
};

use tokio::{sync::Notify, time::Instant};

use crate::lease::Lease;

/// One lock this process holds through an executor, as seen by
/// [`LockingExecutor::held`](crate::LockingExecutor::held).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldLock {
    /// The lock name.
    pub name: String,
    /// When it was won, by this process's wall clock.
    pub since: SystemTime,
    /// How long it has been held.
    pub held_for: Duration,
    /// Until when this process may rely on it ([`Lock::valid_until`](crate::Lock::valid_until),
    /// its lease, moved forward by each extension), on tokio's clock.
    pub valid_until: Instant,
    /// The acquisition's fencing token, where the provider has them.
    pub fencing_token: Option<u64>,
}

/// A lock a drain waited for, and how that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainedLock {
    /// The lock as it was when the drain began.
    pub lock: HeldLock,
    /// How long after the drain began its task finished and the lock's release completed;
    /// `None` if it was still running at the deadline.
    pub released_after: Option<Duration>,
    /// Whether that release failed (or could not be made): the lock then stays held until its
    /// `lock_at_most_for` has passed, and another instance can take it only after that.
    pub release_failed: bool,
}

/// What a drain ([`LockingExecutor::drain`](crate::LockingExecutor::drain),
/// [`Scheduler::drain`](crate::Scheduler::drain)) waited for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Every lock held when the drain began, in name order.
    pub waited_for: Vec<DrainedLock>,
    /// How long the drain took.
    pub took: Duration,
    /// Whether the deadline passed with tasks still running. An executor's drain leaves them
    /// running; a scheduler's drain then cancels them (their locks are released as for any
    /// cancelled execution).
    pub deadline_passed: bool,
}

impl DrainReport {
    /// Whether every task in flight finished before the deadline and its lock's release
    /// succeeded.
    pub fn is_complete(&self) -> bool {
        !self.deadline_passed && !self.waited_for.iter().any(|d| d.release_failed)
    }

    /// The names still held at the deadline.
    pub fn unfinished(&self) -> impl Iterator<Item = &str> {
        self.waited_for.iter().filter(|d| d.released_after.is_none()).map(|d| d.lock.name.as_str())
    }
}

/// A registered execution: enough to describe it without touching its lock (the lease is read
/// without waiting for an extension or release under way).
#[derive(Clone)]
struct Entry {
    name: Arc<str>,
    since: SystemTime,
    started: Instant,
    fencing_token: Option<u64>,
    lease: Lease,
}

/// The executions in flight of an executor and its clones, and its draining flag.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Mutex<BTreeMap<u64, Entry>>,
    /// The executions whose release failed or was never made, noted only while draining (so it
    /// stays as small as the drain).
    failed: Mutex<std::collections::BTreeSet<u64>>,
    next: AtomicU64,
    draining: AtomicBool,
    changed: Notify,
}

/// Removes its execution from the registry when dropped. The executor drops it once the lock's
/// release has completed (also the release spawned for a cancelled execution), or when no
/// release can be made (the lock then expires after `lock_at_most_for`).
pub(crate) struct Registration {
    registry: Arc<Registry>,
    id: u64,
    released: bool,
}

impl Registration {
    /// Ends the registration after the lock's release: `released` says whether it succeeded.
    pub(crate) fn finish(mut self, released: bool) {
        self.released = released;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if !self.released && self.registry.is_draining() {
            self.registry.failed.lock().unwrap_or_else(PoisonError::into_inner).insert(self.id);
        }
        self.registry.entries.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
        self.registry.changed.notify_waiters();
    }
}

impl Registry {
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub(crate) fn register(
        self: &Arc<Self>,
        name: Arc<str>,
        fencing_token: Option<u64>,
        lease: Lease,
    ) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let entry =
            Entry { name, since: SystemTime::now(), started: Instant::now(), fencing_token, lease };
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).insert(id, entry);
        Registration { registry: Arc::clone(self), id, released: false }
    }

    /// The executions in flight, by id. Never waits.
    pub(crate) fn snapshot(&self) -> BTreeMap<u64, HeldLock> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(id, e)| {
                let held = HeldLock {
                    name: e.name.to_string(),
                    since: e.since,
                    held_for: e.started.elapsed(),
                    valid_until: e.lease.valid_until(),
                    fencing_token: e.fencing_token,
                };
                (*id, held)
            })
            .collect()
    }

    /// Waits until `done` holds for the registered executions, or `until`; `done` is asked
    /// again after every change and once more at `until`. Whether it held.
    async fn wait_for(
        &self,
        until: Instant,
        mut done: impl FnMut(&BTreeMap<u64, Entry>) -> bool,
    ) -> bool {
        loop {
            // Enabled before the look, so a change between the look and the wait is not lost.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done(&self.entries.lock().unwrap_or_else(PoisonError::into_inner)) {
                return true;
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                return done(&self.entries.lock().unwrap_or_else(PoisonError::into_inner));
            }
        }
    }

    /// Waits until no execution is registered, or `until`. Whether none is left.
    pub(crate) async fn wait_empty(&self, until: Instant) -> bool {
        self.wait_for(until, BTreeMap::is_empty).await
    }

    /// Stops new executions, then waits until the ones in flight have finished or `deadline`
    /// has passed.
    pub(crate) async fn drain(&self, deadline: Duration) -> DrainReport {
        self.draining.store(true, Ordering::SeqCst);
        let began = Instant::now();
        let waiting = self.snapshot();
        let mut released: BTreeMap<u64, Duration> = BTreeMap::new();
        self.wait_for(began + deadline, |entries| {
            for id in waiting.keys().filter(|id| !entries.contains_key(id)) {
                released.entry(*id).or_insert_with(|| began.elapsed());
            }
            released.len() == waiting.len()
        })
        .await;
        let deadline_passed = released.len() < waiting.len();
        let failed =
            std::mem::take(&mut *self.failed.lock().unwrap_or_else(PoisonError::into_inner));
        let mut waited_for: Vec<DrainedLock> = waiting
            .into_iter()
            .map(|(id, lock)| DrainedLock {
                lock,
                released_after: released.get(&id).copied(),
                release_failed: failed.contains(&id),
            })
            .collect();
        waited_for.sort_by(|a, b| a.lock.name.cmp(&b.lock.name));
        DrainReport { waited_for, took: began.elapsed(), deadline_passed }
    }
}
