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
    Acquisition, BatchOptions, BatchOutcome, BoxError, Capabilities, Error, ForceRelease, Lock,
    LockConfig, LockHandle, LockInfo, LockPage, LockProvider, Result, SharedClock, TimeSource,
};
use shedlock_conformance::{
    Hooks, InstanceOptions, Options, Outcome, ProviderFactory, RecordHooks, RestartHook, Suite,
    Verdict, checks, tools::names::Hash32,
};
use unicode_normalization::UnicodeNormalization;

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
    /// Extend rewrites the expiry of whatever live record holds the name, without checking the
    /// owner (the core refuses an expired lease's extend on the client, so only a request
    /// delayed in transit shows it).
    ExtendWithoutOwnerCheck,
    /// Fencing tokens decrease.
    TokenNotMonotonic,
    /// Names are silently truncated to 24 bytes.
    TruncatesNames,
    /// Names are keyed by their NFKC normal form (`café` spelt precomposed or decomposed, `ﬁ`
    /// and `fi`, are one lock).
    NormalisesNames,
    /// Names are keyed by a 32-bit hash, advisory-lock style: colliding names share a lock.
    HashedNames(Hash32),
    /// `max_name_len` = 64 is checked in characters while the key keeps only the first 64
    /// bytes (a `VARCHAR(64)`-by-bytes column): long multi-byte names with one prefix collide.
    CharsNotBytes,
    /// lock_at_most_for is ignored: locks never expire.
    NeverExpires,
    /// The fencing token is a counter kept in the lock's own record (previous token + 1), so it
    /// starts over when the record is deleted or the backend restarts.
    TokenInRecord,
    /// Extend moves the expiry but not `locked_at`: an unlock counts the extension's
    /// `lock_at_least_for` from the acquisition.
    AtLeastFromAcquisition,
    /// A takeover of an expired record keeps that record's `locked_at`: the new holder's
    /// at-least is counted from the previous acquisition.
    TakeoverKeepsLockedAt,
    /// Unlock counts at-least from the unlock instead of the acquisition.
    AtLeastFromUnlock,
    /// The test hooks do nothing: planting a record and restarting the backend return `Ok`
    /// without acting (a third party's broken test setup, not a provider bug).
    HooksDoNothing,
    /// The fencing token is the acquiring instance's wall-clock time in nanoseconds: it
    /// increases while every instance runs one clock, and goes backwards across skewed ones.
    TokenFromClientClock,
    /// Inspection judges a record by the inspecting instance's clock, though the provider's
    /// leases are server time: an operator whose clock runs ahead sees held locks as free.
    InspectsByClientClock,
    /// `list` matches its prefix as a SQL `LIKE` pattern (`_` any character, `%` any run).
    ListsByPattern,
    /// A forced release deletes the record whatever acquisition it now belongs to.
    ForceReleasesAnyAcquisition,
    /// `list` is not declared, yet answers an empty page (which reads as "no locks") instead of
    /// `Error::Unsupported`.
    UndeclaredListAnswersEmpty,
    /// Keys escape `/` as `%2F` but keep `%` as is: `a/b` and `a%2Fb` are one key.
    MergingEscape,
    /// Tokens count per name, and a forced release starts the count over.
    ForceReleaseResetsTokens,
    /// `inspect` refreshes the lease it reads (a "touch" on read): a monitoring loop keeps a
    /// dead holder's lock alive.
    InspectExtends,
    /// `extend` keeps the later of the old and the new expiry (`GREATEST(old, new)`): an extend
    /// to a shorter lease never shortens it.
    ExtendNeverShortens,
    /// Records end at `lock_at_most_for` floored to the millisecond, while a 0 clock step is
    /// declared (and used): a lease outlives its record by up to 1 ms.
    FlooredExpiry,
    /// [`Bug::FlooredExpiry`] behind a loopback round trip: each `try_lock` spends 200 µs on its
    /// way to the backend's clock and 200 µs back (blocking the thread, as a syscall would).
    FlooredExpiryOverNetwork,
    /// `Capabilities::clock_step` says 0, but every acquisition uses the default 1 ms step.
    StepDisagrees,
    /// `try_lock_many` writes every name's record, held or not: it grants names held elsewhere.
    BatchGrantsHeld,
    /// `try_lock_many` is all-or-nothing: one held name refuses the free ones too.
    AllOrNothingBatch,
    /// `try_lock_many` begins its leases when the answer arrives, 20 ms after the backend wrote
    /// the records: each lease outlives its record by that much.
    BatchLeaseFromAnswer,
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
    /// Restarts so far: the backend's identity for C25.
    restarts: AtomicU64,
    /// [`Bug::ForceReleaseResetsTokens`]: the token count per key.
    per_key: Mutex<HashMap<String, u64>>,
}

#[derive(Clone)]
struct Broken {
    backend: Arc<Backend>,
    bug: Bug,
    /// The instance's clock (the lease itself is the backend's, server time).
    clock: SharedClock,
}

/// The limit [`Bug::CharsNotBytes`] declares.
const CHAR_LIMIT: usize = 64;

fn key(bug: Bug, name: &str) -> String {
    match bug {
        Bug::TruncatesNames => name.chars().take(24).collect(),
        Bug::NormalisesNames => name.nfkc().collect(),
        Bug::HashedNames(hash) => format!("{:08x}", hash.of(name)),
        Bug::MergingEscape => name.replace('/', "%2F"),
        Bug::CharsNotBytes => {
            let mut cut = CHAR_LIMIT.min(name.len());
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            name[..cut].to_owned()
        }
        _ => name.to_owned(),
    }
}

#[async_trait]
impl LockProvider for Broken {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        let acquisition = match self.bug {
            Bug::StepDisagrees => Acquisition::begin(config),
            _ => Acquisition::begin_declared(config, &self.capabilities()),
        };
        if self.bug == Bug::CharsNotBytes && config.name().chars().count() > CHAR_LIMIT {
            return Err(Error::InvalidName {
                backend: "broken",
                name: config.name().to_owned(),
                reason: format!("longer than {CHAR_LIMIT} characters"),
            });
        }
        let k = key(self.bug, config.name());
        let transit = self.bug == Bug::FlooredExpiryOverNetwork;
        if transit {
            std::thread::sleep(Duration::from_micros(200));
        }
        let now = SystemTime::now();
        let until = match self.bug {
            Bug::NeverExpires => now + Duration::from_secs(86_400),
            Bug::FlooredExpiry | Bug::FlooredExpiryOverNetwork => {
                floor_ms(now + config.lock_at_most_for())
            }
            _ => now + config.lock_at_most_for(),
        };
        let owner = self.backend.next.fetch_add(1, Ordering::SeqCst) + 1;
        let free = |recs: &HashMap<String, Rec>| recs.get(&k).is_none_or(|r| r.until <= now);
        let token_after = |recs: &HashMap<String, Rec>| match self.bug {
            Bug::TokenNotMonotonic => 1_000_000 - owner,
            Bug::TokenInRecord => recs.get(&k).map_or(0, |r| r.token) + 1,
            Bug::ForceReleaseResetsTokens => {
                let mut per_key = self.backend.per_key.lock().unwrap();
                let n = per_key.entry(k.clone()).or_insert(0);
                *n += 1;
                *n
            }
            Bug::TokenFromClientClock => {
                let since = self.clock.now().duration_since(SystemTime::UNIX_EPOCH);
                since.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            }
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
            let locked_at = match recs.get(&k) {
                Some(r) if self.bug == Bug::TakeoverKeepsLockedAt => r.locked_at,
                _ => now,
            };
            recs.insert(k.clone(), Rec { until, locked_at, owner, token });
        }
        if transit {
            std::thread::sleep(Duration::from_micros(200));
        }
        acquisition.grant(Handle { p: self.clone(), key: k, owner, token }).await.map(Some)
    }

    async fn try_lock_many(
        &self,
        configs: &[LockConfig],
        options: BatchOptions,
    ) -> Result<BatchOutcome> {
        match self.bug {
            Bug::BatchGrantsHeld | Bug::AllOrNothingBatch | Bug::BatchLeaseFromAnswer => {
                self.broken_batch(configs).await
            }
            _ => shedlock::batch::try_lock_each(self, configs, options).await,
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            .with_owner_checked(true)
            .with_server_time(true)
            .with_granularity(Duration::from_millis(1))
            .with_clock_step(match self.bug {
                Bug::FlooredExpiry | Bug::FlooredExpiryOverNetwork | Bug::StepDisagrees => {
                    Duration::ZERO
                }
                _ => shedlock::DEFAULT_CLOCK_STEP,
            })
            .with_max_name_len((self.bug == Bug::CharsNotBytes).then_some(CHAR_LIMIT))
            .with_inspect(true)
            .with_list(self.bug != Bug::UndeclaredListAnswersEmpty)
            .with_force_release(true)
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        let mut recs = self.backend.recs.lock().unwrap();
        if self.bug == Bug::InspectExtends
            && let Some(r) = recs.get_mut(&key(self.bug, name))
            && r.until > SystemTime::now()
            && let Ok(lease) = r.until.duration_since(r.locked_at)
        {
            r.until = SystemTime::now() + lease;
        }
        Ok(recs.get(&key(self.bug, name)).map(|r| self.info(name, r)))
    }

    async fn list(&self, prefix: &str, cursor: Option<&str>, limit: usize) -> Result<LockPage> {
        if self.bug == Bug::UndeclaredListAnswersEmpty {
            return Ok(LockPage::default());
        }
        let recs = self.backend.recs.lock().unwrap();
        let mut names: Vec<&String> = recs
            .keys()
            .filter(|k| match self.bug {
                Bug::ListsByPattern => like(k, prefix),
                _ => k.starts_with(prefix),
            })
            .filter(|k| cursor.is_none_or(|c| k.as_str() > c))
            .collect();
        names.sort();
        let records: Vec<LockInfo> =
            names.iter().take(limit).map(|k| self.info(k, &recs[*k])).collect();
        let next = (names.len() > limit).then(|| records.last().unwrap().name.clone());
        Ok(LockPage::new(records, next))
    }

    async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let mut recs = self.backend.recs.lock().unwrap();
        let k = key(self.bug, &seen.name);
        let Some(r) = recs.get(&k) else { return Ok(ForceRelease::Changed(None)) };
        let now = self.info(&seen.name, r);
        if now.acquisition != seen.acquisition && self.bug != Bug::ForceReleasesAnyAcquisition {
            return Ok(ForceRelease::Changed(Some(now)));
        }
        recs.remove(&k);
        if self.bug == Bug::ForceReleaseResetsTokens {
            self.backend.per_key.lock().unwrap().remove(&k);
        }
        Ok(ForceRelease::Released(now))
    }
}

/// The key of a batch's name (the batch bugs key names as they are).
fn config_key(c: &LockConfig) -> &str {
    c.name()
}

impl Broken {
    /// The batch of [`Bug::BatchGrantsHeld`], [`Bug::AllOrNothingBatch`] and
    /// [`Bug::BatchLeaseFromAnswer`], in one hold of the backend.
    async fn broken_batch(&self, configs: &[LockConfig]) -> Result<BatchOutcome> {
        shedlock::batch::check_distinct(configs)?;
        let caps = self.capabilities();
        let early = self.bug != Bug::BatchLeaseFromAnswer;
        let mut acquisitions: Vec<Option<Acquisition>> =
            configs.iter().map(|c| early.then(|| Acquisition::begin_declared(c, &caps))).collect();
        let now = SystemTime::now();
        let granted: Vec<Option<(String, u64)>> = {
            let mut recs = self.backend.recs.lock().unwrap();
            let free: Vec<bool> = configs
                .iter()
                .map(|c| recs.get(config_key(c)).is_none_or(|r| r.until <= now))
                .collect();
            if self.bug == Bug::AllOrNothingBatch && free.contains(&false) {
                return Ok(configs.iter().map(|_| Ok(None)).collect());
            }
            configs
                .iter()
                .zip(free)
                .map(|(c, free)| {
                    if !free && self.bug != Bug::BatchGrantsHeld {
                        return None;
                    }
                    let owner = self.backend.next.fetch_add(1, Ordering::SeqCst) + 1;
                    let until = now + c.lock_at_most_for();
                    recs.insert(
                        c.name().to_owned(),
                        Rec { until, locked_at: now, owner, token: owner },
                    );
                    Some((c.name().to_owned(), owner))
                })
                .collect()
        };
        if !early {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut out = Vec::with_capacity(configs.len());
        for ((c, g), a) in configs.iter().zip(granted).zip(acquisitions.iter_mut()) {
            let Some((key, owner)) = g else {
                out.push(Ok(None));
                continue;
            };
            let acquisition = a.take().unwrap_or_else(|| Acquisition::begin_declared(c, &caps));
            let handle = Handle { p: self.clone(), key, owner, token: owner };
            out.push(acquisition.grant(handle).await.map(Some));
        }
        Ok(out)
    }

    /// A record as inspection shows it: held by the backend's clock (the bug: the instance's).
    fn info(&self, name: &str, r: &Rec) -> LockInfo {
        let now = match self.bug {
            Bug::InspectsByClientClock => self.clock.now(),
            _ => SystemTime::now(),
        };
        LockInfo::new(name, r.owner.to_string(), r.until > now, TimeSource::Server)
            .with_locked_at(r.locked_at)
            .with_lock_until(r.until)
            .with_fencing_token(Some(r.token))
    }
}

/// `t` floored to the millisecond since the epoch, as a `TIMESTAMP(3)` column stores it.
fn floor_ms(t: SystemTime) -> SystemTime {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(since.as_millis()).unwrap())
}

/// Whether `name` starts with `pattern` read as a `LIKE` pattern.
fn like(name: &str, pattern: &str) -> bool {
    fn go(n: &[char], p: &[char]) -> bool {
        match p.split_first() {
            None => true,
            Some(('%', rest)) => (0..=n.len()).any(|i| go(&n[i..], rest)),
            Some(('_', rest)) => !n.is_empty() && go(&n[1..], rest),
            Some((c, rest)) => n.first() == Some(c) && go(&n[1..], rest),
        }
    }
    let (n, p): (Vec<char>, Vec<char>) = (name.chars().collect(), pattern.chars().collect());
    go(&n, &p)
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
        if let Some(r) = recs.get_mut(&self.key)
            && (r.owner == self.owner || self.p.bug == Bug::NoOwnerCheck)
        {
            let from = if self.p.bug == Bug::AtLeastFromUnlock { now } else { r.locked_at };
            let at_least = from + config.lock_at_least_for();
            r.until =
                if self.p.bug == Bug::AtLeastIgnored || at_least <= now { now } else { at_least };
        }
        Ok(())
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let now = SystemTime::now();
        let mut recs = self.p.backend.recs.lock().unwrap();
        match recs.get_mut(&self.key) {
            Some(r)
                if (r.owner == self.owner || self.p.bug == Bug::ExtendWithoutOwnerCheck)
                    && (r.until > now || self.p.bug == Bug::ExpiredExtendable) =>
            {
                let until = now + config.lock_at_most_for();
                r.until =
                    if self.p.bug == Bug::ExtendNeverShortens { r.until.max(until) } else { until };
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

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let clock = options.clock_or_system();
        Ok(Arc::new(Broken { backend: self.backend.clone(), bug: self.bug, clock }))
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
        if self.bug == Bug::HooksDoNothing {
            return Ok(());
        }
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
        if self.bug != Bug::HooksDoNothing {
            self.backend.recs.lock().unwrap().clear();
            self.backend.restarts.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    async fn identity(&self) -> Result<Option<String>, BoxError> {
        Ok(Some(format!("restarted {} times", self.backend.restarts.load(Ordering::SeqCst))))
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

/// [`rejected_by`], and the failure says `says`.
async fn rejected_saying(bug: Bug, id: &str, says: &str) {
    let v = rejected_by(bug, id).await;
    assert!(
        v.detail.contains(says),
        "{bug:?} rejected by {id} without saying {says:?}: {}",
        v.detail
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_grants_a_name_held_elsewhere_fails_c32() {
    rejected_saying(Bug::BatchGrantsHeld, "C32", "granted a name held elsewhere").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_all_or_nothing_batch_fails_c32() {
    rejected_saying(Bug::AllOrNothingBatch, "C32", "never all-or-nothing").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_leases_start_at_the_answer_fails_c32() {
    rejected_saying(Bug::BatchLeaseFromAnswer, "C32", "its lease outlived its record").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escape_that_keeps_its_marker_raw_fails_c27() {
    rejected_saying(Bug::MergingEscape, "C27", "made two names one lock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_that_resets_the_token_sequence_fails_c31() {
    rejected_saying(Bug::ForceReleaseResetsTokens, "C31", "must not reset the fencing sequence")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inspect_that_refreshes_the_lease_fails_c30() {
    rejected_saying(Bug::InspectExtends, "C30", "inspect changed the record it read").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_that_never_shortens_fails_c09() {
    rejected_saying(Bug::ExtendNeverShortens, "C09", "extend to a shorter lock_at_most_for").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_floored_to_the_millisecond_with_no_clock_step_fails_c05() {
    rejected_saying(Bug::FlooredExpiry, "C05", "before the holder's Lock::valid_until").await;
}

/// Over a round trip, one lease end catches a record up to 1 ms early only when the early part
/// is longer than the round trip; C05's further lease ends, at spread offsets, catch it anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_floored_to_the_millisecond_behind_a_round_trip_fails_c05() {
    rejected_saying(Bug::FlooredExpiryOverNetwork, "C05", "before the holder's Lock::valid_until")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_step_other_than_the_declared_one_fails_the_first_check_that_locks() {
    rejected_saying(Bug::StepDisagrees, "C01", "Capabilities::clock_step").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_without_owner_check_fails_c12() {
    rejected_saying(Bug::NoOwnerCheck, "C12", "stale holder's unlock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_then_write_race_fails_c15() {
    rejected_saying(Bug::ReadThenWrite, "C15", "winners").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_then_write_race_fails_c08_fuzz() {
    rejected_by(Bug::ReadThenWrite, "C08").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_ignored_fails_c07_and_c11() {
    rejected_saying(Bug::AtLeastIgnored, "C07", "must stay held").await;
    rejected_by(Bug::AtLeastIgnored, "C11").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lock_extendable_fails_c10() {
    rejected_saying(Bug::ExpiredExtendable, "C10", "revived the lock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_not_monotonic_fails_c20() {
    rejected_saying(Bug::TokenNotMonotonic, "C20", "not greater").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_not_monotonic_fails_c21() {
    rejected_by(Bug::TokenNotMonotonic, "C21").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_names_fail_c27() {
    let v = rejected_by(Bug::TruncatesNames, "C27").await;
    let merged = ["collision", "collided", "made two names one lock"];
    assert!(merged.iter().any(|m| v.detail.contains(m)), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_keyed_by_their_unicode_normal_form_fail_c27() {
    rejected_saying(Bug::NormalisesNames, "C27", "made two names one lock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_keyed_by_a_32_bit_hash_fail_c27_under_each_hash_lock_libraries_use() {
    for hash in Hash32::ALL {
        let v = rejected_by(Bug::HashedNames(hash), "C27").await;
        assert!(v.detail.contains(&format!("equal {}", hash.label())), "{hash:?}: {}", v.detail);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_limit_counted_in_characters_but_cut_in_bytes_fails_c27() {
    rejected_saying(Bug::CharsNotBytes, "C27", "must count bytes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_keeping_the_expired_records_locked_at_fails_c07() {
    rejected_saying(Bug::TakeoverKeepsLockedAt, "C07", "counted from the takeover").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_counted_from_the_unlock_fails_c07() {
    rejected_saying(Bug::AtLeastFromUnlock, "C07", "after its lock_at_least_for had passed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_from_the_clients_clock_fail_c20_and_c21_across_skewed_instances() {
    rejected_saying(Bug::TokenFromClientClock, "C20", "skew ±3600000 ms").await;
    let v = rejected_by(Bug::TokenFromClientClock, "C21").await;
    assert!(
        v.detail.contains("skew ±3600000 ms: the new holder's write was refused"),
        "{}",
        v.detail
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_without_owner_check_delivered_after_a_takeover_fails_c13() {
    rejected_saying(Bug::ExtendWithoutOwnerCheck, "C13", "reached the backend after the takeover")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_that_do_nothing_fail_c14_and_c25_saying_what_the_hook_did_not_do() {
    rejected_saying(Bug::HooksDoNothing, "C14", "the hook planted nothing").await;
    rejected_saying(Bug::HooksDoNothing, "C25", "the hook did not restart the backend").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_expiring_locks_fail_c05() {
    rejected_saying(Bug::NeverExpires, "C05", "still held").await;
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

// ---------------------------------------------------------------------------------------------
// Broken providers that talk to a backend over TCP, so that the kit's fault proxy can hold their
// answers in flight (C12, C13) or stall them (C24).
// ---------------------------------------------------------------------------------------------

mod net {
    use std::{
        collections::HashMap,
        net::SocketAddr,
        sync::{
            Arc, Mutex,
            atomic::{AtomicU64, Ordering},
        },
        time::{Duration, Instant},
    };

    use async_trait::async_trait;
    use shedlock::{
        Acquisition, BoxError, Capabilities, Error, Lock, LockConfig, LockHandle, LockProvider,
        Result,
    };
    use shedlock_conformance::{
        Hooks, InstanceOptions, Options, Outcome, ProviderFactory, Suite, Verdict, checks,
    };
    use tokio::{
        io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
        net::{TcpListener, TcpStream},
    };

    const BACKEND: &str = "net-lock";
    const CALL_TIMEOUT: Duration = Duration::from_secs(2);

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum NetBug {
        /// No bug: the control.
        None,
        /// Unlock reads the record (`GET`), and if it is this holder's, frees it with an
        /// unconditional write (`FREE`): another holder may have taken over in between.
        UnlockReadThenWrite,
        /// Extend reads the record, and if it is this holder's and unexpired, sets the new
        /// expiry with an unconditional write (`SET`).
        ExtendReadThenWrite,
        /// No client timeout: a backend that accepts the connection and never answers hangs
        /// every call.
        NoTimeout,
        /// Declares `check` but answers `Ok` without asking the backend.
        CheckWithoutAsking,
    }

    #[derive(Debug, Clone, Copy)]
    struct Rec {
        until: Instant,
        locked_at: Instant,
        owner: u64,
    }

    /// The server, one request line per connection, expiry on the server's clock:
    ///
    /// - `LOCK <name> <at_most_ms>` → `OK <owner>` | `HELD` (the owner id is the fencing token)
    /// - `UNLOCK <name> <owner> <at_least_ms>` → `OK` (owner-checked, atomic)
    /// - `EXTEND <name> <owner> <at_most_ms>` → `OK` | `LOST` (owner-checked, atomic)
    /// - `GET <name>` → `REC <owner> <remaining_ms>` | `NONE`
    /// - `FREE <name> <at_least_ms>`, `SET <name> <at_most_ms>` → `OK` (no owner check)
    async fn serve() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let recs: Arc<Mutex<HashMap<String, Rec>>> = Arc::default();
        let next = Arc::new(AtomicU64::new(1));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (recs, next) = (recs.clone(), next.clone());
                tokio::spawn(async move {
                    let _ = stream.set_nodelay(true);
                    let (r, mut w) = stream.into_split();
                    let mut line = String::new();
                    if BufReader::new(r).read_line(&mut line).await.is_err() {
                        return;
                    }
                    let reply = answer(&recs, &next, &line);
                    let _ = w.write_all(format!("{reply}\n").as_bytes()).await;
                });
            }
        });
        addr
    }

    fn answer(recs: &Mutex<HashMap<String, Rec>>, next: &AtomicU64, line: &str) -> String {
        let ms = |s: &str| Duration::from_millis(s.parse().unwrap_or(0));
        let now = Instant::now();
        let mut map = recs.lock().unwrap();
        let release = |r: &mut Rec, at_least: Duration| {
            r.until = r.until.min(now.max(r.locked_at + at_least));
        };
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["LOCK", name, at_most] => {
                if map.get(*name).is_some_and(|r| r.until > now) {
                    return "HELD".into();
                }
                let owner = next.fetch_add(1, Ordering::SeqCst);
                map.insert((*name).into(), Rec { until: now + ms(at_most), locked_at: now, owner });
                format!("OK {owner}")
            }
            ["UNLOCK", name, owner, at_least] => {
                if let Some(r) = map.get_mut(*name).filter(|r| r.owner.to_string() == *owner) {
                    release(r, ms(at_least));
                }
                "OK".into()
            }
            ["EXTEND", name, owner, at_most] => match map.get_mut(*name) {
                Some(r) if r.owner.to_string() == *owner && r.until > now => {
                    r.until = now + ms(at_most);
                    r.locked_at = now;
                    "OK".into()
                }
                _ => "LOST".into(),
            },
            ["GET", name] => match map.get(*name) {
                Some(r) => {
                    format!(
                        "REC {} {}",
                        r.owner,
                        r.until.saturating_duration_since(now).as_millis()
                    )
                }
                None => "NONE".into(),
            },
            ["FREE", name, at_least] => {
                if let Some(r) = map.get_mut(*name) {
                    release(r, ms(at_least));
                }
                "OK".into()
            }
            ["SET", name, at_most] => {
                if let Some(r) = map.get_mut(*name) {
                    r.until = now + ms(at_most);
                    r.locked_at = now;
                }
                "OK".into()
            }
            _ => "ERR".into(),
        }
    }

    #[derive(Clone)]
    struct NetLock {
        addr: SocketAddr,
        bug: NetBug,
    }

    impl NetLock {
        async fn call(&self, request: String) -> Result<String> {
            let io = async {
                let mut s = TcpStream::connect(self.addr).await?;
                s.set_nodelay(true)?;
                s.write_all(format!("{request}\n").as_bytes()).await?;
                let mut line = String::new();
                BufReader::new(s).read_line(&mut line).await?;
                if line.is_empty() {
                    return Err(std::io::Error::other("connection closed"));
                }
                Ok(line.trim().to_owned())
            };
            let r = if self.bug == NetBug::NoTimeout {
                io.await
            } else {
                match tokio::time::timeout(CALL_TIMEOUT, io).await {
                    Ok(r) => r,
                    Err(_) => {
                        return Err(Error::Timeout { operation: "call", after: CALL_TIMEOUT });
                    }
                }
            };
            match r {
                Ok(reply) if reply == "ERR" => Err(Error::backend(BACKEND, "bad request")),
                Ok(reply) => Ok(reply),
                Err(e) => Err(Error::unavailable(BACKEND, e)),
            }
        }

        /// `GET`: the record's owner and whether it is unexpired.
        async fn owner(&self, name: &str) -> Result<Option<(u64, bool)>> {
            let reply = self.call(format!("GET {name}")).await?;
            let parts: Vec<&str> = reply.split_whitespace().collect();
            Ok(match parts.as_slice() {
                ["REC", owner, remaining] => {
                    Some((owner.parse().unwrap_or(0), remaining.parse::<u64>().unwrap_or(0) > 0))
                }
                _ => None,
            })
        }
    }

    #[async_trait]
    impl LockProvider for NetLock {
        async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
            let acquisition = Acquisition::begin(config);
            let at_most = config.lock_at_most_for().as_millis();
            let reply = self.call(format!("LOCK {} {at_most}", config.name())).await?;
            let Some(owner) = reply.strip_prefix("OK ").and_then(|o| o.parse().ok()) else {
                return Ok(None);
            };
            acquisition.grant(NetHandle { p: self.clone(), owner }).await.map(Some)
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::new()
                .with_extend(true)
                .with_fencing(true)
                .with_owner_checked(true)
                .with_server_time(true)
                .with_granularity(Duration::from_millis(1))
                .with_check(true)
        }

        async fn check(&self) -> Result<()> {
            if self.bug == NetBug::CheckWithoutAsking {
                return Ok(());
            }
            self.call("GET shedlock-check".to_owned()).await.map(drop)
        }
    }

    struct NetHandle {
        p: NetLock,
        owner: u64,
    }

    #[async_trait]
    impl LockHandle for NetHandle {
        async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
            let (name, at_least) = (config.name(), config.lock_at_least_for().as_millis());
            if self.p.bug == NetBug::UnlockReadThenWrite {
                if self.p.owner(name).await?.is_some_and(|(o, _)| o == self.owner) {
                    self.p.call(format!("FREE {name} {at_least}")).await?;
                }
                return Ok(());
            }
            self.p.call(format!("UNLOCK {name} {} {at_least}", self.owner)).await.map(|_| ())
        }

        async fn extend(&mut self, config: &LockConfig) -> Result<()> {
            let (name, at_most) = (config.name(), config.lock_at_most_for().as_millis());
            let lost = || Error::LockLost { name: name.to_owned() };
            if self.p.bug == NetBug::ExtendReadThenWrite {
                return match self.p.owner(name).await? {
                    Some((o, true)) if o == self.owner => {
                        self.p.call(format!("SET {name} {at_most}")).await.map(|_| ())
                    }
                    _ => Err(lost()),
                };
            }
            match self.p.call(format!("EXTEND {name} {} {at_most}", self.owner)).await?.as_str() {
                "OK" => Ok(()),
                _ => Err(lost()),
            }
        }

        fn fencing_token(&self) -> Option<u64> {
            Some(self.owner)
        }
    }

    struct Factory {
        addr: SocketAddr,
        bug: NetBug,
    }

    #[async_trait]
    impl ProviderFactory for Factory {
        fn name(&self) -> &str {
            "net-lock"
        }

        async fn create(
            &self,
            options: InstanceOptions,
        ) -> std::result::Result<Arc<dyn LockProvider>, BoxError> {
            let addr = options.address.unwrap_or(self.addr);
            Ok(Arc::new(NetLock { addr, bug: self.bug }))
        }

        fn hooks(&self) -> Hooks {
            Hooks::new().with_backend_address(self.addr)
        }
    }

    async fn suite(bug: NetBug) -> Suite {
        // A 5 s fault bound: the control's calls time out after 2 s.
        let options = Options::new().with_seed(7).with_fault_bound(Duration::from_secs(5));
        Suite::new(Factory { addr: serve().await, bug }, options).await.unwrap()
    }

    /// Runs `check` on the buggy provider (must fail) and on the control (must pass).
    pub(super) async fn rejected_by(bug: NetBug, id: &str) -> Verdict {
        let check = checks::by_id(id).unwrap();
        let control = suite(NetBug::None).await.run_check(check).await;
        assert_eq!(control.outcome, Outcome::Pass, "control failed {id}: {}", control.detail);
        let broken = suite(bug).await.run_check(check).await;
        assert_eq!(
            broken.outcome,
            Outcome::Fail,
            "{bug:?} not rejected by {id}: {}",
            broken.detail
        );
        println!("{bug:?} rejected by {id}: {}", broken.detail);
        Verdict { outcome: broken.outcome, detail: broken.detail }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_reading_the_owner_then_writing_unconditionally_fails_c12() {
    let v = net::rejected_by(net::NetBug::UnlockReadThenWrite, "C12").await;
    assert!(v.detail.contains("in flight during the takeover"), "{}", v.detail);
    assert!(v.detail.contains("succeeded while the lock is held"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_reading_the_owner_then_writing_unconditionally_fails_c13() {
    let v = net::rejected_by(net::NetBug::ExtendReadThenWrite, "C13").await;
    assert!(v.detail.contains("in flight during the takeover"), "{}", v.detail);
    assert!(v.detail.contains("still held at +"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_timeouts_fails_c24_on_a_stalled_backend() {
    let v = net::rejected_by(net::NetBug::NoTimeout, "C24").await;
    assert!(v.detail.contains("on a stalled backend hung"), "{}", v.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_does_not_ask_the_backend_fails_c24() {
    let v = net::rejected_by(net::NetBug::CheckWithoutAsking, "C24").await;
    assert!(
        v.detail.contains("check answered Ok while the backend was unreachable"),
        "{}",
        v.detail
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_judged_by_the_operators_clock_on_a_server_time_provider_fails_c30() {
    rejected_saying(Bug::InspectsByClientClock, "C30", "an hour ahead").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_that_reads_its_prefix_as_a_like_pattern_fails_c30() {
    rejected_saying(Bug::ListsByPattern, "C30", "expected").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_list_that_answers_an_empty_page_fails_c30() {
    rejected_saying(Bug::UndeclaredListAnswersEmpty, "C30", "instead of Unsupported").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_that_deletes_a_lock_taken_again_fails_c31() {
    rejected_saying(Bug::ForceReleasesAnyAcquisition, "C31", "while another holds the lock").await;
}
