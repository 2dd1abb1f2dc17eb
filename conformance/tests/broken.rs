//! Proof that the checks can fail: deliberately broken providers, each rejected by the check
//! meant to catch it, while the same provider without the bug passes that check.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use shedlock::{
    Acquisition, BoxError, Capabilities, Error, Lock, LockConfig, LockHandle, LockProvider, Result,
};
use shedlock_conformance::{
    Hooks, InstanceOptions, Options, Outcome, ProviderFactory, RecordHooks, RestartHook, Suite,
    Verdict, checks,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// No bug: the control.
    None,
    /// Unlock removes the record whoever owns it.
    NoOwnerCheck,
    /// try_lock reads, yields, then writes: racing instances all win.
    ReadThenWrite,
    /// Unlock frees at once, ignoring lock_at_least_for.
    AtLeastIgnored,
    /// Extend succeeds on an expired lock.
    ExpiredExtendable,
    /// Fencing tokens decrease.
    TokenNotMonotonic,
    /// Names are silently truncated to 24 bytes.
    TruncatesNames,
    /// lock_at_most_for is ignored: locks never expire.
    NeverExpires,
    /// The fencing token is a counter kept in the lock's own record (previous token + 1), so it
    /// starts over when the record is deleted or the backend restarts.
    TokenInRecord,
    /// Extend moves the expiry but not `locked_at`: an unlock counts the extension's
    /// `lock_at_least_for` from the acquisition.
    AtLeastFromAcquisition,
}

#[derive(Debug, Clone)]
struct Rec {
    until: SystemTime,
    locked_at: SystemTime,
    owner: u64,
    token: u64,
}

#[derive(Debug, Default)]
struct Backend {
    recs: Mutex<HashMap<String, Rec>>,
    next: AtomicU64,
}

#[derive(Clone)]
struct Broken {
    backend: Arc<Backend>,
    bug: Bug,
}

fn key(bug: Bug, name: &str) -> String {
    if bug == Bug::TruncatesNames { name.chars().take(24).collect() } else { name.to_owned() }
}

#[async_trait]
impl LockProvider for Broken {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let acquisition = Acquisition::begin(config);
        let k = key(self.bug, config.name());
        let now = SystemTime::now();
        let until = if self.bug == Bug::NeverExpires {
            now + Duration::from_secs(86_400)
        } else {
            now + config.lock_at_most_for()
        };
        let owner = self.backend.next.fetch_add(1, Ordering::SeqCst) + 1;
        let free = |recs: &HashMap<String, Rec>| recs.get(&k).is_none_or(|r| r.until <= now);
        let token_after = |recs: &HashMap<String, Rec>| match self.bug {
            Bug::TokenNotMonotonic => 1_000_000 - owner,
            Bug::TokenInRecord => recs.get(&k).map_or(0, |r| r.token) + 1,
            _ => owner,
        };
        let token;
        if self.bug == Bug::ReadThenWrite {
            if !free(&self.backend.recs.lock().unwrap()) {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            let mut recs = self.backend.recs.lock().unwrap();
            token = token_after(&recs);
            recs.insert(k.clone(), Rec { until, locked_at: now, owner, token });
        } else {
            let mut recs = self.backend.recs.lock().unwrap();
            if !free(&recs) {
                return Ok(None);
            }
            token = token_after(&recs);
            recs.insert(k.clone(), Rec { until, locked_at: now, owner, token });
        }
        acquisition.grant(Handle { p: self.clone(), key: k, owner, token }).await.map(Some)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            .with_owner_checked(true)
            .with_server_time(true)
            .with_granularity(Duration::from_millis(1))
    }
}

struct Handle {
    p: Broken,
    key: String,
    owner: u64,
    token: u64,
}

#[async_trait]
impl LockHandle for Handle {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        let now = SystemTime::now();
        let mut recs = self.p.backend.recs.lock().unwrap();
        if let Some(r) = recs.get_mut(&self.key) {
            if r.owner == self.owner || self.p.bug == Bug::NoOwnerCheck {
                let at_least = r.locked_at + config.lock_at_least_for();
                r.until = if self.p.bug == Bug::AtLeastIgnored || at_least <= now {
                    now
                } else {
                    at_least
                };
            }
        }
        Ok(())
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let now = SystemTime::now();
        let mut recs = self.p.backend.recs.lock().unwrap();
        match recs.get_mut(&self.key) {
            Some(r)
                if r.owner == self.owner
                    && (r.until > now || self.p.bug == Bug::ExpiredExtendable) =>
            {
                r.until = now + config.lock_at_most_for();
                if self.p.bug != Bug::AtLeastFromAcquisition {
                    r.locked_at = now;
                }
                Ok(())
            }
            _ => Err(Error::LockLost { name: config.name().to_owned() }),
        }
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.token)
    }
}

struct Factory {
    backend: Arc<Backend>,
    bug: Bug,
}

#[async_trait]
impl ProviderFactory for Factory {
    fn name(&self) -> &str {
        "broken"
    }

    async fn create(&self, _options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        Ok(Arc::new(Broken { backend: self.backend.clone(), bug: self.bug }))
    }

    fn hooks(&self) -> Hooks {
        let hooks = BackendHooks { backend: self.backend.clone(), bug: self.bug };
        Hooks::new().with_records(hooks.clone()).with_restart(hooks)
    }
}

/// Record access and restart for the in-process backend (C14, C25).
#[derive(Clone)]
struct BackendHooks {
    backend: Arc<Backend>,
    bug: Bug,
}

#[async_trait]
impl RecordHooks for BackendHooks {
    async fn record_exists(&self, name: &str) -> Result<bool, BoxError> {
        Ok(self.backend.recs.lock().unwrap().contains_key(&key(self.bug, name)))
    }

    async fn delete_record(&self, name: &str) -> Result<(), BoxError> {
        self.backend.recs.lock().unwrap().remove(&key(self.bug, name));
        Ok(())
    }

    async fn plant_expired_record(&self, name: &str) -> Result<(), BoxError> {
        let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
        let owner = self.backend.next.fetch_add(1, Ordering::SeqCst) + 1;
        let rec = Rec { until: an_hour_ago, locked_at: an_hour_ago, owner, token: owner };
        self.backend.recs.lock().unwrap().insert(key(self.bug, name), rec);
        Ok(())
    }
}

#[async_trait]
impl RestartHook for BackendHooks {
    /// A non-durable backend: a restart forgets every record (the owner counter survives).
    async fn restart(&self) -> Result<(), BoxError> {
        self.backend.recs.lock().unwrap().clear();
        Ok(())
    }
}

async fn suite(bug: Bug) -> Suite {
    let options = Options::new().with_seed(7).with_model_cases(30);
    Suite::new(Factory { backend: Arc::default(), bug }, options).await.unwrap()
}

/// Runs `check` on the buggy provider (must fail) and on the control (must pass).
async fn rejected_by(bug: Bug, id: &str) -> Verdict {
    let check = checks::by_id(id).unwrap();
    let control = suite(Bug::None).await.run_check(check).await;
    assert_eq!(control.outcome, Outcome::Pass, "control provider failed {id}: {}", control.detail);
    let broken = suite(bug).await.run_check(check).await;
    assert_eq!(
        broken.outcome,
        Outcome::Fail,
        "{bug:?} was not rejected by {id}: {}",
        broken.detail
    );
    println!("{bug:?} rejected by {id}: {}", broken.detail);
    Verdict { outcome: broken.outcome, detail: broken.detail }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_without_owner_check_fails_c12() {
    let v = rejected_by(Bug::NoOwnerCheck, "C12").await;
    assert!(v.detail.contains("stale holder's unlock"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_then_write_race_fails_c15() {
    let v = rejected_by(Bug::ReadThenWrite, "C15").await;
    assert!(v.detail.contains("winners"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_then_write_race_fails_c08_fuzz() {
    rejected_by(Bug::ReadThenWrite, "C08").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_ignored_fails_c07_and_c11() {
    let v = rejected_by(Bug::AtLeastIgnored, "C07").await;
    assert!(v.detail.contains("must stay held"), "{}", v.detail);
    rejected_by(Bug::AtLeastIgnored, "C11").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lock_extendable_fails_c10() {
    let v = rejected_by(Bug::ExpiredExtendable, "C10").await;
    assert!(v.detail.contains("revived the lock"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_not_monotonic_fails_c20() {
    let v = rejected_by(Bug::TokenNotMonotonic, "C20").await;
    assert!(v.detail.contains("not greater"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_not_monotonic_fails_c21() {
    rejected_by(Bug::TokenNotMonotonic, "C21").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_names_fail_c27() {
    let v = rejected_by(Bug::TruncatesNames, "C27").await;
    assert!(v.detail.contains("collision") || v.detail.contains("collided"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_expiring_locks_fail_c05() {
    let v = rejected_by(Bug::NeverExpires, "C05").await;
    assert!(v.detail.contains("still held"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_ignored_fails_the_model_check_with_a_shrunk_sequence() {
    let v = rejected_by(Bug::AtLeastIgnored, "C17").await;
    assert!(v.detail.contains("minimal failing sequence"), "{}", v.detail);
    // The minimal sequence needs a try_lock with at-least, its unlock and a second try_lock.
    assert!(v.detail.contains("least="), "{}", v.detail);
    assert!(v.detail.contains("unlock("), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_owner_check_fails_the_history_check() {
    // Holders that outlive lock_at_most_for then unlock: without an owner check the unlock frees
    // the new holder's lock, and a third holder overlaps it. The random workload produces that
    // sequence in most runs, not all (C12 is the deterministic check for this bug): C16 must
    // reject the provider in at least one of five runs, and pass the control.
    let check = checks::by_id("C16").unwrap();
    let control = suite(Bug::None).await.run_check(check).await;
    assert_eq!(control.outcome, Outcome::Pass, "control provider failed C16: {}", control.detail);
    let mut details = Vec::new();
    for _ in 0..5 {
        let r = suite(Bug::NoOwnerCheck).await.run_check(check).await;
        if r.outcome == Outcome::Fail {
            assert!(r.detail.contains("two holders at once"), "{}", r.detail);
            println!("NoOwnerCheck rejected by C16: {}", r.detail);
            return;
        }
        details.push(r.detail);
    }
    panic!("C16 never rejected a provider without owner check: {details:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_kept_in_the_record_fails_c14_and_c25_though_it_passes_c20() {
    // Monotonic while the record lives: C20 cannot see it.
    let c20 = suite(Bug::TokenInRecord).await.run_check(checks::by_id("C20").unwrap()).await;
    assert_eq!(c20.outcome, Outcome::Pass, "{}", c20.detail);
    let v = rejected_by(Bug::TokenInRecord, "C14").await;
    assert!(v.detail.contains("after the held record was deleted"), "{}", v.detail);
    assert!(v.detail.contains("is not greater than token"), "{}", v.detail);
    let v = rejected_by(Bug::TokenInRecord, "C25").await;
    assert!(v.detail.contains("after the restart"), "{}", v.detail);
    assert!(v.detail.contains("is not greater than token"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_counted_from_the_acquisition_fails_c11() {
    let v = rejected_by(Bug::AtLeastFromAcquisition, "C11").await;
    assert!(v.detail.contains("counts from the extension"), "{}", v.detail);
    assert!(v.detail.contains("must stay held until +"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_counted_from_the_acquisition_fails_the_model_check() {
    // The model's extends now carry lock_at_least_for; the minimal sequence needs a late one.
    let v = rejected_by(Bug::AtLeastFromAcquisition, "C17").await;
    assert!(v.detail.contains("minimal failing sequence"), "{}", v.detail);
    assert!(v.detail.contains("extend(") && v.detail.contains("least="), "{}", v.detail);
}
