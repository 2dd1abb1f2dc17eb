//! C28 can fail, and measures what C18 measures: a lock table in files shared by processes,
//! judged by the clock of whichever process writes it.
//!
//! - Declared **server time** while it reads `SystemTime::now()` itself (the bug C18 cannot
//!   see: it ignores the skewed clock C18 injects): C18 passes, C28 fails.
//! - Declared **client time**, reading the clock it is given (`InstanceOptions::clock`, the
//!   system clock in a node process): C18 and C28 both report a bound below the first skew
//!   that breaks it; and when it documents a bound larger than what it survives
//!   (`Options::with_documented_skew_bound`), C28 fails naming both.
//! - Client time with a release that **stamps the releaser's clock** on the record instead of
//!   deleting it (SQLite's way of keeping at-least): C28 still finds it broken at ±1 s, where
//!   a workload left to chance let the node ahead keep every name and credited it with 2 s.
//!
//! And C29 (a holder frozen past its lease) can fail: the same file table passes it (no
//! fencing, so its late writes are reported unprotected), while
//! - a lease counted in the wrong unit (the lock's `valid_until` a thousand times
//!   `lock_at_most_for`, the record's end right) lets the resumed node work on after another
//!   took the name, and
//! - an unlock without owner check lets the resumed node delete the new holder's record.
//!
//! `harness = false`: this binary is also the node process C28 and C29 re-execute.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// `File::lock` (Rust 1.89) in this test only: the workspace's tests build with the toolchain
// the SQL providers need (1.94); the kit's library keeps the workspace MSRV (1.88).
#![allow(clippy::incompatible_msrv)]

use std::{
    fs::File,
    io::{Read, Write},
    path::PathBuf,
    process::ExitCode,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use shedlock::{
    Acquisition, BoxError, Capabilities, Error, Lock, LockConfig, LockHandle, LockProvider,
    SharedClock,
};
use shedlock_conformance::{
    Hooks, InstanceOptions, Options, Outcome, ProviderFactory, Suite, checks,
};

const DIR: &str = "SHEDLOCK_FILELOCKS_DIR";
const LIAR: &str = "SHEDLOCK_FILELOCKS_LIAR";
const STAMP: &str = "SHEDLOCK_FILELOCKS_STAMP_RELEASE";
const BUG: &str = "SHEDLOCK_FILELOCKS_BUG";

/// A bug for C29 to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// The lock's lease is a thousand times `lock_at_most_for` (seconds taken for
    /// milliseconds); the record ends after `lock_at_most_for` as it should.
    LeaseTooLong,
    /// Unlock deletes the record whoever holds it.
    UnlockAny,
}

impl Bug {
    fn name(self) -> &'static str {
        match self {
            Bug::LeaseTooLong => "lease-too-long",
            Bug::UnlockAny => "unlock-any",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Bug::LeaseTooLong, Bug::UnlockAny].into_iter().find(|b| b.name() == s)
    }
}

/// A lock table of one file per name, under an exclusive file lock.
struct FileLocks {
    dir: PathBuf,
    /// `Some`: judge time by this clock (honest client time); `None`: by `SystemTime::now()`
    /// while declaring server time (the liar).
    clock: Option<SharedClock>,
    /// Release by writing the releaser's clock as the record's end (as SQLite's provider
    /// does, to keep at-least) instead of deleting the record.
    stamp_release: bool,
    bug: Option<Bug>,
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl FileLocks {
    fn now(&self) -> u64 {
        match &self.clock {
            Some(c) => millis(c.now()),
            None => millis(SystemTime::now()),
        }
    }

    /// Runs `f` on the record of `name` (`(owner, locked_at, lock_until)`) under the table's
    /// exclusive lock, off the runtime (file locks block).
    async fn with_record<T: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce(Option<(u64, u64, u64)>) -> (Option<Option<(u64, u64, u64)>>, T) + Send + 'static,
    ) -> Result<T, Error> {
        let dir = self.dir.clone();
        let file = dir.join(name.bytes().map(|b| format!("{b:02x}")).collect::<String>());
        tokio::task::spawn_blocking(move || -> std::io::Result<T> {
            let mutex = File::create(dir.join(".mutex"))?;
            mutex.lock()?;
            let mut text = String::new();
            let current = match File::open(&file) {
                Ok(mut f) => {
                    f.read_to_string(&mut text)?;
                    let v: Vec<u64> =
                        text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
                    (v.len() == 3).then(|| (v[0], v[1], v[2]))
                }
                Err(_) => None,
            };
            let (write, out) = f(current);
            match write {
                Some(Some((o, at, until))) => {
                    File::create(&file)?.write_all(format!("{o} {at} {until}").as_bytes())?
                }
                Some(None) => {
                    let _ = std::fs::remove_file(&file);
                }
                None => {}
            }
            mutex.unlock()?;
            Ok(out)
        })
        .await
        .map_err(|e| Error::Backend { backend: "files", source: Box::new(e) })?
        .map_err(|e| Error::Backend { backend: "files", source: Box::new(e) })
    }
}

/// One node's provider.
struct Files(Arc<FileLocks>);

#[async_trait]
impl LockProvider for Files {
    async fn try_lock(&self, config: &LockConfig) -> shedlock::Result<Option<Lock>> {
        let acquisition = if self.0.bug == Some(Bug::LeaseTooLong) {
            let at_most = config.lock_at_most_for() * 1000;
            Acquisition::begin(&LockConfig::new(config.name(), at_most, Duration::ZERO)?)
        } else {
            Acquisition::begin(config)
        };
        let owner = shedlock::support::acquisition_id();
        let now = self.0.now();
        let until = now + config.lock_at_most_for().as_millis() as u64;
        let won = self
            .0
            .with_record(config.name(), move |cur| match cur {
                Some((_, _, u)) if u > now => (None, false),
                _ => (Some(Some((owner, now, until))), true),
            })
            .await?;
        if !won {
            return Ok(None);
        }
        acquisition.grant(Handle { locks: self.0.clone(), owner }).await.map(Some)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_owner_checked(true).with_server_time(self.0.clock.is_none())
    }
}

struct Handle {
    locks: Arc<FileLocks>,
    owner: u64,
}

#[async_trait]
impl LockHandle for Handle {
    async fn unlock(&mut self, config: &LockConfig) -> shedlock::Result<()> {
        let (owner, now) = (self.owner, self.locks.now());
        let least = config.lock_at_least_for().as_millis() as u64;
        let stamp = self.locks.stamp_release;
        let any = self.locks.bug == Some(Bug::UnlockAny);
        self.locks
            .with_record(config.name(), move |cur| match cur {
                Some((o, at, u)) if o == owner || any => {
                    if stamp {
                        (Some(Some((o, at, u.min(now.max(at + least))))), ())
                    } else if at + least > now {
                        (Some(Some((o, at, u.min(at + least)))), ())
                    } else {
                        (Some(None), ())
                    }
                }
                _ => (None, ()),
            })
            .await
    }
}

struct Factory {
    dir: PathBuf,
    liar: bool,
    stamp_release: bool,
    bug: Option<Bug>,
}

impl Factory {
    fn from_env() -> Result<Self, BoxError> {
        Ok(Self {
            dir: std::env::var(DIR)?.into(),
            liar: std::env::var(LIAR).is_ok_and(|v| v == "1"),
            stamp_release: std::env::var(STAMP).is_ok_and(|v| v == "1"),
            bug: std::env::var(BUG).ok().and_then(|b| Bug::parse(&b)),
        })
    }
}

#[async_trait]
impl ProviderFactory for Factory {
    fn name(&self) -> &str {
        match (self.liar, self.stamp_release, self.bug) {
            (_, _, Some(bug)) => bug.name(),
            (true, _, _) => "files-lying-server-time",
            (false, false, _) => "files-client-time",
            (false, true, _) => "files-client-time-stamped-release",
        }
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let clock = (!self.liar).then(|| options.clock_or_system());
        let (stamp_release, bug) = (self.stamp_release, self.bug);
        let locks = FileLocks { dir: self.dir.clone(), clock, stamp_release, bug };
        Ok(Arc::new(Files(Arc::new(locks))))
    }

    fn hooks(&self) -> Hooks {
        Hooks::new().with_node_env([
            (DIR, self.dir.display().to_string()),
            (LIAR, if self.liar { "1" } else { "0" }.to_owned()),
            (STAMP, if self.stamp_release { "1" } else { "0" }.to_owned()),
            (BUG, self.bug.map_or("", Bug::name).to_owned()),
        ])
    }
}

async fn suite(liar: bool) -> Suite {
    suite_with(Factory::temp(liar, false), Options::new().with_seed(11)).await
}

impl Factory {
    fn temp(liar: bool, stamp_release: bool) -> Self {
        Self::with_bug(liar, stamp_release, None)
    }

    fn with_bug(liar: bool, stamp_release: bool, bug: Option<Bug>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "shedlock-filelocks-{}-{}-{}-{}",
            std::process::id(),
            if liar { "liar" } else { "honest" },
            if stamp_release { "stamped" } else { "deleting" },
            bug.map_or("correct", Bug::name)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir, liar, stamp_release, bug }
    }
}

async fn suite_with(factory: Factory, options: Options) -> Suite {
    Suite::new(factory, options).await.unwrap()
}

async fn a_provider_reading_the_process_clock_passes_c18_and_fails_c28() {
    let s = suite(true).await;
    let c18 = s.run_check(checks::by_id("C18").unwrap()).await;
    assert_eq!(c18.outcome, Outcome::Pass, "C18 cannot see the process clock: {}", c18.detail);
    let c28 = s.run_check(checks::by_id("C28").unwrap()).await;
    assert_eq!(c28.outcome, Outcome::Fail, "{}", c28.detail);
    assert!(
        c28.detail.contains("server time declared, but two processes held one lock at once"),
        "{}",
        c28.detail
    );
    println!("liar: C18 {}; C28 {}", c18.detail, c28.detail);
}

async fn honest_client_time_gets_a_bound_from_c28_consistent_with_c18() {
    let s = suite(false).await;
    let c18 = s.run_check(checks::by_id("C18").unwrap()).await;
    assert_eq!(c18.outcome, Outcome::Pass, "{}", c18.detail);
    let c28 = s.run_check(checks::by_id("C28").unwrap()).await;
    assert_eq!(c28.outcome, Outcome::Pass, "{}", c28.detail);
    // C28's ladder is coarse (0, 2 s, 2 min, 2 h apart): safe only without offset, broken at
    // ±1 s, as C18 found it broken well below a second.
    assert!(c28.detail.starts_with("client time: no overlap up to 0 ms"), "{}", c28.detail);
    assert!(c28.detail.contains("overlap at rung ±1 s"), "{}", c28.detail);
    let bound = s.figures().skew_bound_ms.expect("C18 measured a bound");
    assert!(bound < 2000.0, "C18's bound {bound} ms is below C28's first breaking spread");
    println!("honest: C18 {}; C28 {}", c18.detail, c28.detail);
}

async fn a_client_time_provider_that_breaks_below_its_documented_bound_fails_c28() {
    // It documents a minute; C28 sees it overlap with process clocks 2 s apart.
    let options = Options::new().with_seed(11).with_documented_skew_bound(Duration::from_secs(60));
    let s = suite_with(Factory::temp(false, false), options).await;
    let c28 = s.run_check(checks::by_id("C28").unwrap()).await;
    assert_eq!(c28.outcome, Outcome::Fail, "{}", c28.detail);
    assert!(
        c28.detail
            .contains("documented skew bound 60000 ms, but processes 2000 ms apart overlapped"),
        "{}",
        c28.detail
    );
    println!("documented bound: C28 {}", c28.detail);
}

async fn a_release_stamped_with_the_releasers_clock_earns_no_bound_beyond_what_it_survives() {
    // Its release leaves the record ending at the releaser's clock: a node ahead that released
    // a name keeps it from the nodes behind for the whole offset, and, left to chance, would
    // hold every name itself, so that no node ahead ever met a lease it could steal. C28 hands
    // each name first to a node behind, and credits a rung only where a node ahead probed it.
    let s = suite_with(Factory::temp(false, true), Options::new().with_seed(11)).await;
    let c28 = s.run_check(checks::by_id("C28").unwrap()).await;
    assert_eq!(c28.outcome, Outcome::Pass, "{}", c28.detail);
    assert!(c28.detail.starts_with("client time: no overlap up to 0 ms"), "{}", c28.detail);
    assert!(c28.detail.contains("overlap at rung ±1 s"), "{}", c28.detail);
    println!("stamped release: C28 {}", c28.detail);
}

async fn c29(bug: Option<Bug>) -> shedlock_conformance::CheckResult {
    let s = suite_with(Factory::with_bug(false, false, bug), Options::new().with_seed(11)).await;
    s.run_check(checks::by_id("C29").unwrap()).await
}

async fn the_file_table_passes_c29_with_its_late_writes_reported_unprotected() {
    let r = c29(None).await;
    assert_eq!(r.outcome, Outcome::Pass, "{}", r.detail);
    assert!(r.detail.contains("extend lost, unlock ok"), "{}", r.detail);
    assert!(r.detail.contains("no fencing declared"), "{}", r.detail);
    println!("C29 control: {}", r.detail);
}

async fn a_lease_a_thousand_times_too_long_fails_c29() {
    let r = c29(Some(Bug::LeaseTooLong)).await;
    assert_eq!(r.outcome, Outcome::Fail, "{}", r.detail);
    assert!(r.detail.contains("found its lease valid"), "{}", r.detail);
    println!("C29 lease-too-long: {}", r.detail);
}

async fn an_unlock_without_owner_check_fails_c29() {
    let r = c29(Some(Bug::UnlockAny)).await;
    assert_eq!(r.outcome, Outcome::Fail, "{}", r.detail);
    assert!(r.detail.contains("after the resumed node's unlock"), "{}", r.detail);
    println!("C29 unlock-any: {}", r.detail);
}

fn main() -> ExitCode {
    if let Some(code) =
        shedlock_conformance::node_main_if_requested(|| async { Factory::from_env() })
    {
        return code;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        a_provider_reading_the_process_clock_passes_c18_and_fails_c28().await;
        honest_client_time_gets_a_bound_from_c28_consistent_with_c18().await;
        a_client_time_provider_that_breaks_below_its_documented_bound_fails_c28().await;
        a_release_stamped_with_the_releasers_clock_earns_no_bound_beyond_what_it_survives().await;
        the_file_table_passes_c29_with_its_late_writes_reported_unprotected().await;
        a_lease_a_thousand_times_too_long_fails_c29().await;
        an_unlock_without_owner_check_fails_c29().await;
    });
    println!("process_skew: 7 tests passed");
    ExitCode::SUCCESS
}
