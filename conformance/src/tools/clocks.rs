//! Clock helpers for skew injection (built on core's [`SkewedClock`]). Real per-process skew
//! with libfaketime, as C28 runs its node processes, is
//! [`skewed_process`](crate::skewed_process).

use std::{sync::Arc, time::Duration};

use shedlock::{SharedClock, SkewedClock, system_clock};

/// A system clock `skew_ms` milliseconds ahead (positive) or behind (negative).
pub fn skewed_system_clock(skew_ms: i64) -> SharedClock {
    Arc::new(SkewedClock::by_millis(system_clock(), skew_ms))
}

/// A system clock `skew` ahead.
pub fn ahead(skew: Duration) -> SharedClock {
    Arc::new(SkewedClock::ahead(system_clock(), skew))
}

/// A system clock `skew` behind.
pub fn behind(skew: Duration) -> SharedClock {
    Arc::new(SkewedClock::behind(system_clock(), skew))
}

/// The skew ladder for granularity `g` and short lock `at_most`: zero, then values from a few
/// milliseconds up to several `at_most`, then one hour.
pub fn ladder(g: Duration, at_most: Duration) -> Vec<Duration> {
    let g = g.max(Duration::from_millis(1));
    let mut v = vec![
        Duration::ZERO,
        g * 2,
        g * 5 + Duration::from_millis(10),
        at_most / 8,
        at_most / 3,
        at_most,
        at_most * 3,
        Duration::from_secs(3600),
    ];
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    #[test]
    fn skewed_clocks_are_offset() {
        let now = SystemTime::now();
        let a = ahead(Duration::from_secs(3600)).now();
        let b = behind(Duration::from_secs(3600)).now();
        assert!(a.duration_since(now).unwrap() >= Duration::from_secs(3599));
        assert!(now.duration_since(b).unwrap() >= Duration::from_secs(3599));
        let c = skewed_system_clock(-500).now();
        assert!(now.duration_since(c).unwrap() >= Duration::from_millis(490));
    }

    #[test]
    fn ladder_is_sorted_and_starts_at_zero() {
        let l = ladder(Duration::from_millis(1), Duration::from_millis(300));
        assert_eq!(l[0], Duration::ZERO);
        assert!(l.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(*l.last().unwrap(), Duration::from_secs(3600));
    }
}
