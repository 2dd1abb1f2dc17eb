//! A history recorder and an interval-overlap checker (C16).
//!
//! Every acquire, extend and release is recorded with the start and end of its call on one
//! trusted monotonic clock (the harness's [`Instant`]). From these the checker derives, for each
//! acquisition, the interval during which its holder *certainly* owns the lock under the
//! contract:
//!
//! - it starts when the acquire call returned (the backend committed somewhere inside the call);
//! - it ends at the earliest moment the lock may correctly become free: the lock lasts at least
//!   `lock_at_most_for` from the commit (so from the call's start, a lower bound), or, after a
//!   release, until the release call started, but not before `lock_at_least_for` from the
//!   commit; a successful extend moves the base to the extend call's start.
//!
//! Two acquisitions of one name whose certain intervals intersect by more than the tolerance
//! (the declared granularity plus the provider's skew bound) had two holders at once: a
//! violation. The checker only reports what no correct provider could produce.

use std::{
    collections::HashMap,
    fmt,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use shedlock::LockConfig;

/// The certain holding interval of one acquisition, relative to the history's origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// The lock name.
    pub name: String,
    /// Who held it (e.g. `"instance 2 #17"`).
    pub holder: String,
    /// When the holder certainly held it.
    pub start: Duration,
    /// Until when it certainly held it.
    pub end: Duration,
}

/// Two holders at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The earlier acquisition.
    pub first: Interval,
    /// The acquisition that overlapped it.
    pub second: Interval,
    /// By how much.
    pub by: Duration,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}: {} held it [{} ms, {} ms] while {} held it [{} ms, {} ms] (overlap {} ms)",
            self.first.name,
            self.first.holder,
            self.first.start.as_millis(),
            self.first.end.as_millis(),
            self.second.holder,
            self.second.start.as_millis(),
            self.second.end.as_millis(),
            self.by.as_millis()
        )
    }
}

/// Checks that no two intervals of one name intersect by more than `tolerance`. Returns the
/// worst overlap found, if any.
pub fn check_intervals(intervals: &[Interval], tolerance: Duration) -> Result<(), Box<Overlap>> {
    let mut by_name: HashMap<&str, Vec<&Interval>> = HashMap::new();
    for i in intervals.iter().filter(|i| i.end > i.start) {
        by_name.entry(&i.name).or_default().push(i);
    }
    let mut worst: Option<Overlap> = None;
    for list in by_name.values_mut() {
        list.sort_by_key(|i| i.start);
        // Sweep: the interval with the latest end so far.
        let mut reach: Option<&Interval> = None;
        for &cur in list.iter() {
            if let Some(prev) = reach {
                let end = prev.end.min(cur.end);
                if end > cur.start + tolerance {
                    let by = end - cur.start;
                    if worst.as_ref().is_none_or(|w| by > w.by) {
                        worst = Some(Overlap { first: prev.clone(), second: cur.clone(), by });
                    }
                }
                if cur.end > prev.end {
                    reach = Some(cur);
                }
            } else {
                reach = Some(cur);
            }
        }
    }
    match worst {
        Some(o) => Err(Box::new(o)),
        None => Ok(()),
    }
}

#[derive(Debug, Clone)]
struct Acq {
    name: String,
    holder: String,
    end_of_call: Instant,
    base: Instant,
    at_most: Duration,
    at_least: Duration,
    released_at: Option<Instant>,
}

/// Records acquisitions against one monotonic clock. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct History {
    origin: Instant,
    acqs: Mutex<Vec<Acq>>,
}

/// The id of one recorded acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AcqId(usize);

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl History {
    /// An empty history whose origin is now.
    pub fn new() -> Self {
        Self { origin: Instant::now(), acqs: Mutex::new(Vec::new()) }
    }

    /// The origin all intervals are relative to.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Records a successful acquire whose call ran from `call_start` to `call_end`.
    pub fn acquired(
        &self,
        holder: impl Into<String>,
        config: &LockConfig,
        call_start: Instant,
        call_end: Instant,
    ) -> AcqId {
        let mut acqs = self.acqs.lock().unwrap_or_else(PoisonError::into_inner);
        acqs.push(Acq {
            name: config.name().to_owned(),
            holder: holder.into(),
            end_of_call: call_end,
            base: call_start,
            at_most: config.lock_at_most_for(),
            at_least: config.lock_at_least_for(),
            released_at: None,
        });
        AcqId(acqs.len() - 1)
    }

    /// Records a successful extend (call started at `call_start`) to the durations of `config`.
    pub fn extended(&self, id: AcqId, config: &LockConfig, call_start: Instant) {
        let mut acqs = self.acqs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(a) = acqs.get_mut(id.0) {
            a.base = call_start;
            a.at_most = config.lock_at_most_for();
            a.at_least = config.lock_at_least_for();
        }
    }

    /// Records a release whose call started at `call_start` (whatever it returned).
    pub fn released(&self, id: AcqId, call_start: Instant) {
        let mut acqs = self.acqs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(a) = acqs.get_mut(id.0) {
            a.released_at = Some(call_start);
        }
    }

    /// The number of recorded acquisitions.
    pub fn len(&self) -> usize {
        self.acqs.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The certain holding interval of every acquisition.
    pub fn intervals(&self) -> Vec<Interval> {
        let acqs = self.acqs.lock().unwrap_or_else(PoisonError::into_inner);
        acqs.iter()
            .map(|a| {
                let expiry = a.base + a.at_most;
                let end = match a.released_at {
                    Some(r) => expiry.min(r.max(a.base + a.at_least)),
                    None => expiry,
                };
                Interval {
                    name: a.name.clone(),
                    holder: a.holder.clone(),
                    start: a.end_of_call.saturating_duration_since(self.origin),
                    end: end.saturating_duration_since(self.origin),
                }
            })
            .collect()
    }

    /// Checks the history (see [`check_intervals`]).
    pub fn check(&self, tolerance: Duration) -> Result<(), Box<Overlap>> {
        check_intervals(&self.intervals(), tolerance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(name: &str, holder: &str, start: u64, end: u64) -> Interval {
        Interval {
            name: name.into(),
            holder: holder.into(),
            start: Duration::from_millis(start),
            end: Duration::from_millis(end),
        }
    }

    const TOL: Duration = Duration::from_millis(5);

    #[test]
    fn accepts_disjoint_and_touching_intervals() {
        let h = vec![
            iv("a", "x", 0, 100),
            iv("a", "y", 100, 200),
            iv("a", "z", 203, 300),
            iv("b", "x", 50, 250),
        ];
        assert_eq!(check_intervals(&h, TOL), Ok(()));
    }

    #[test]
    fn rejects_overlap_beyond_tolerance() {
        let h = vec![iv("a", "x", 0, 100), iv("a", "y", 90, 200)];
        let o = check_intervals(&h, TOL).unwrap_err();
        assert_eq!(o.by, Duration::from_millis(10));
        assert_eq!(o.first.holder, "x");
        assert_eq!(o.second.holder, "y");
    }

    #[test]
    fn rejects_nested_interval_hidden_behind_a_short_one() {
        // x holds long; y is short and ends first; z starts inside x after y ended.
        let h = vec![iv("a", "x", 0, 1000), iv("a", "y", 10, 20), iv("a", "z", 500, 600)];
        let o = check_intervals(&h, TOL).unwrap_err();
        assert_eq!(o.first.holder, "x");
        assert!(o.by >= Duration::from_millis(10));
    }

    #[test]
    fn overlap_within_tolerance_is_accepted() {
        let h = vec![iv("a", "x", 0, 100), iv("a", "y", 97, 200)];
        assert_eq!(check_intervals(&h, TOL), Ok(()));
    }

    #[test]
    fn same_start_is_rejected() {
        let h = vec![iv("a", "x", 50, 100), iv("a", "y", 50, 100)];
        assert!(check_intervals(&h, TOL).is_err());
    }

    #[test]
    fn recorder_derives_intervals_from_calls() {
        let h = History::new();
        let o = h.origin();
        let ms = Duration::from_millis;
        let cfg = LockConfig::new("n", ms(100), ms(40)).unwrap();
        // Acquired in [10, 12]; released at 20 -> held until at-least: 10 + 40 = 50.
        let a = h.acquired("x", &cfg, o + ms(10), o + ms(12));
        h.released(a, o + ms(20));
        // Acquired in [30, 31] by another: overlaps [12, 50] by 19 ms.
        let b = h.acquired("y", &cfg, o + ms(30), o + ms(31));
        h.released(b, o + ms(35));
        let ivs = h.intervals();
        assert_eq!(ivs[0].start, ms(12));
        assert_eq!(ivs[0].end, ms(50));
        let err = h.check(TOL).unwrap_err();
        assert_eq!(err.by, ms(19));

        // Expiry without release: held until call start + at_most.
        let h = History::new();
        let o = h.origin();
        let a = h.acquired("x", &cfg, o + ms(0), o + ms(2));
        let _ = a;
        h.acquired("y", &cfg, o + ms(99), o + ms(101));
        assert_eq!(h.check(TOL), Ok(()), "taking over at expiry is fine");
        h.acquired("z", &cfg, o + ms(60), o + ms(61));
        assert!(h.check(TOL).is_err(), "taking over before expiry is a violation");

        // An extend moves the base.
        let h = History::new();
        let o = h.origin();
        let cfg0 = LockConfig::new("n", ms(100), ms(0)).unwrap();
        let a = h.acquired("x", &cfg0, o, o + ms(1));
        h.extended(a, &cfg0, o + ms(80));
        h.acquired("y", &cfg0, o + ms(120), o + ms(121));
        assert!(h.check(TOL).is_err(), "taking over before the extended expiry is a violation");
    }
}
