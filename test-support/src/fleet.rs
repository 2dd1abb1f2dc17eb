//! A mixed fleet for the ShedLock-compatible modes: our providers and Java ShedLock nodes (played
//! by a test fixture issuing ShedLock's exact statements) contend on the same names while the
//! conformance kit's history checker watches.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use shedlock::{Error, LockConfig, LockProvider};
use shedlock_conformance::tools::history::History;

use crate::cfg;

/// A Java ShedLock node as a fixture plays it: `lock` is ShedLock's `LockProvider.lock`, and
/// `unlock` its `SimpleLock.unlock` for what `lock` returned.
#[async_trait::async_trait]
pub trait JavaNode: Send + Sync + 'static {
    /// What an acquisition remembers for its unlock.
    type Held: Send + Sync;
    /// What an unlock reports: the rows it changed, whether it matched a key, or nothing.
    type Released: Send;
    /// ShedLock's acquire: `Some` iff this node took the lock.
    async fn lock(&self, c: &LockConfig) -> Option<Self::Held>;
    /// ShedLock's release of `held`.
    async fn unlock(&self, held: &Self::Held) -> Self::Released;
    /// When the lease of `held` ends, for a ShedLock provider whose unlock does not check the
    /// owner (it releases whoever holds the name then): the fleet leaves out an unlock that
    /// would come after it (a holder stalled on a loaded machine), and the lock just expires.
    /// The stale-holder tests pin that hazard; the fleet measures exclusion between holders
    /// that unlock in time. `None` (the default): the unlock checks the owner and always runs.
    fn unchecked_unlock_until(&self, _held: &Self::Held) -> Option<SystemTime> {
        None
    }
}

/// One contender of the fleet.
pub enum Node<J> {
    /// One of our providers.
    Ours(Arc<dyn LockProvider>),
    /// A Java ShedLock node.
    Java(J),
}

/// What the contenders share: the names, the history and who won how often.
pub struct Fleet {
    /// The contended names.
    pub names: [&'static str; 2],
    /// Every acquisition and release, on this process's monotonic clock.
    pub history: History,
    /// Acquisitions by our nodes (`[0]`) and by Java nodes (`[1]`).
    pub wins: [AtomicUsize; 2],
}

impl Fleet {
    /// An empty fleet on the names `fleet-a` and `fleet-b`.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            names: ["fleet-a", "fleet-b"],
            history: History::new(),
            wins: [AtomicUsize::new(0), AtomicUsize::new(0)],
        })
    }

    /// Runs `node` (number `i`, holders named `"{kind} node {i}"`; our nodes' kind must start
    /// with `rust`) until `until`: it locks the names in turn, holds 0–40 ms, uses
    /// `lock_at_least_for` 60 ms one time in three and "crashes" (leaves the lock to expire
    /// after its 300 ms `lock_at_most_for`) one time in eight.
    pub async fn contend<J: JavaNode>(
        self: Arc<Self>,
        kind: &'static str,
        i: usize,
        node: Node<J>,
        until: Instant,
    ) {
        // A small LCG per node.
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64 ^ (i as u64 + 1);
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        let mut k = i;
        while Instant::now() < until {
            k += 1;
            let at_least = if next(3) == 0 { 60 } else { 0 };
            let c = cfg(self.names[k % self.names.len()], 300, at_least);
            let hold = Duration::from_millis(next(40));
            let abandon = next(8) == 0;
            let holder = format!("{kind} node {i}");
            let start = Instant::now();
            match &node {
                Node::Ours(p) => {
                    let got = match p.try_lock(&c).await {
                        Ok(got) => got,
                        // The answer came after the lease had ended (a stalled machine): not a
                        // lock, by the kit's rule, and not what the fleet is about.
                        Err(Error::LeaseExpiredInFlight { .. }) => None,
                        Err(e) => panic!("try_lock: {e}"),
                    };
                    if let Some(lock) = got {
                        let id = self.history.acquired(holder, &c, start, Instant::now());
                        self.wins[0].fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(hold).await;
                        if abandon {
                            drop(lock); // a dropped lock stays held until lock_at_most_for
                        } else {
                            self.history.released(id, Instant::now());
                            lock.unlock().await.unwrap();
                        }
                    }
                }
                Node::Java(j) => {
                    if let Some(lock) = j.lock(&c).await {
                        let id = self.history.acquired(holder, &c, start, Instant::now());
                        self.wins[1].fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(hold).await;
                        if !abandon {
                            self.history.released(id, Instant::now());
                            let late = j
                                .unchecked_unlock_until(&lock)
                                .is_some_and(|end| SystemTime::now() >= end);
                            if !late {
                                j.unlock(&lock).await;
                            }
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }

    /// Runs `nodes` for `run`, each on its own task, then [`verify`](Self::verify)s.
    pub async fn run<J: JavaNode>(
        self: Arc<Self>,
        nodes: Vec<(&'static str, Node<J>)>,
        run: Duration,
        min_java: usize,
    ) {
        let until = Instant::now() + run;
        let tasks: Vec<_> = nodes
            .into_iter()
            .enumerate()
            .map(|(i, (kind, node))| tokio::spawn(self.clone().contend(kind, i, node, until)))
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        self.verify(min_java);
    }

    /// Both kinds won often and the names passed between them, then no two holders at once.
    pub fn verify(&self, min_java: usize) {
        let rust = self.wins[0].load(Ordering::Relaxed);
        let java = self.wins[1].load(Ordering::Relaxed);
        eprintln!(
            "{} acquisitions: {rust} by Rust nodes, {java} by Java nodes",
            self.history.len()
        );
        // Both kinds must really have contended for the names, or this proves nothing.
        assert!(rust >= 10 && java >= min_java, "too few acquisitions: {rust} Rust, {java} Java");
        let intervals = self.history.intervals();
        let mut handovers = 0;
        for name in self.names {
            let mut on: Vec<_> = intervals.iter().filter(|iv| iv.name == name).collect();
            on.sort_by_key(|iv| iv.start);
            handovers += on
                .windows(2)
                .filter(|w| w[0].holder.starts_with("rust") != w[1].holder.starts_with("rust"))
                .count();
        }
        eprintln!("{handovers} hand-overs between a Rust and a Java holder");
        assert!(handovers >= 5, "the names rarely passed between the two kinds: {handovers}");
        // C16's tolerance for a 1 ms provider: the granularity plus 10 ms.
        if let Err(overlap) = self.history.check(Duration::from_millis(11)) {
            panic!("two holders at once: {overlap}");
        }
    }
}

/// Asserts that `locked_by` is what our compatible mode writes: the default `locked_by`, then
/// ` #` and the acquisition's 16 hex digits, so that every acquisition has its own.
pub fn assert_acquisition_locked_by(locked_by: &str) {
    let (base, suffix) = locked_by.rsplit_once(" #").expect("the acquisition's suffix");
    assert_eq!(base, shedlock::support::default_locked_by());
    assert!(suffix.len() == 16 && u64::from_str_radix(suffix, 16).is_ok(), "{locked_by}");
}

/// `lock_at_least_for` binds both kinds: our lock on `least-ours` and Java's on `least-java`,
/// each released at once with 400 ms at least, cannot be taken by the other kind before then,
/// and can after. `released` judges what Java's unlock of its own lock reported.
pub async fn lock_at_least_for_binds_both_kinds<J: JavaNode>(
    ours: &dyn LockProvider,
    java: &J,
    released: impl Fn(&J::Released) -> bool,
) {
    // Ours, released early with 400 ms at least: Java cannot take it before then.
    let mine = ours.try_lock(&cfg("least-ours", 10_000, 400)).await.unwrap().expect("free");
    mine.unlock().await.unwrap();
    assert!(java.lock(&cfg("least-ours", 10_000, 0)).await.is_none(), "inside at-least");
    // Java's, released early with 400 ms at least: neither can we.
    let theirs = java.lock(&cfg("least-java", 10_000, 400)).await.expect("free");
    assert!(released(&java.unlock(&theirs).await), "Java's unlock found its lock");
    assert!(ours.try_lock(&cfg("least-java", 10_000, 0)).await.unwrap().is_none());
    // Both remainders end 400 ms after their acquisitions (plus the stored times' rounding to
    // milliseconds).
    tokio::time::sleep(Duration::from_millis(450)).await;
    let j = java.lock(&cfg("least-ours", 10_000, 0)).await.expect("at-least over");
    assert!(released(&java.unlock(&j).await), "Java's unlock found its lock");
    let l = ours.try_lock(&cfg("least-java", 10_000, 0)).await.unwrap().expect("at-least over");
    l.unlock().await.unwrap();
}

/// Our lock on `name` expires (100 ms) and Java takes it over: our stale extend fails with
/// `LockLost` and our stale unlock changes nothing (`stored` reads what the backend holds for a
/// name: a row, an item, a document); then Java releases it (`released` judges its report).
pub async fn our_stale_holder_changes_nothing<J: JavaNode, T: PartialEq + std::fmt::Debug>(
    ours: &dyn LockProvider,
    java: &J,
    name: &str,
    stored: impl AsyncFn(&str) -> T,
    released: impl Fn(&J::Released) -> bool,
) {
    let mut mine = ours.try_lock(&cfg(name, 100, 0)).await.unwrap().expect("free");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let theirs = java.lock(&cfg(name, 10_000, 0)).await.expect("our lock expired");
    let before = stored(name).await;
    assert!(matches!(
        mine.extend(Duration::from_secs(10), Duration::ZERO).await,
        Err(Error::LockLost { .. })
    ));
    mine.unlock().await.unwrap();
    assert_eq!(stored(name).await, before, "the stale holder changed what Java stored");
    assert!(released(&java.unlock(&theirs).await), "Java's unlock found its lock");
}

/// For a ShedLock provider whose unlock does not check the owner: a Java lock on `name`
/// expires (100 ms), we take over, and the stale Java unlock releases our lock (Java can take
/// it at once): the hazard the README states, pinned here. `released` judges the stale
/// unlock's report.
pub async fn a_stale_java_unlock_releases_any_holder<J: JavaNode>(
    ours: &dyn LockProvider,
    java: &J,
    name: &str,
    released: impl Fn(&J::Released) -> bool,
) {
    let stale = java.lock(&cfg(name, 100, 0)).await.expect("free");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mine = ours.try_lock(&cfg(name, 10_000, 0)).await.unwrap().expect("Java's lock expired");
    assert!(released(&java.unlock(&stale).await), "the stale unlock matched by name");
    let taken = java.lock(&cfg(name, 10_000, 0)).await;
    assert!(taken.is_some(), "a stale Java unlock released our lock, as ShedLock's does");
    mine.unlock().await.unwrap();
}

/// `t` as a SQL datetime literal in UTC, `YYYY-MM-DD HH:MM:SS` and `digits` fractional digits
/// (truncated): what a JDBC driver sends for a `Timestamp` bound with a UTC calendar.
pub fn utc_text(t: SystemTime, digits: u32) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut s = format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    );
    if digits > 0 {
        let frac = d.subsec_nanos() / 10u32.pow(9 - digits.min(9));
        s.push_str(&format!(".{frac:0w$}", w = digits.min(9) as usize));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_text_formats_like_jdbc() {
        assert_eq!(utc_text(UNIX_EPOCH, 6), "1970-01-01 00:00:00.000000");
        let t = UNIX_EPOCH + Duration::from_micros(1_764_622_800_123_456);
        assert_eq!(utc_text(t, 6), "2025-12-01 21:00:00.123456");
        assert_eq!(utc_text(t, 3), "2025-12-01 21:00:00.123");
        assert_eq!(utc_text(t, 0), "2025-12-01 21:00:00");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(utc_text(leap, 3), "2000-02-29 00:00:00.000");
    }
}
