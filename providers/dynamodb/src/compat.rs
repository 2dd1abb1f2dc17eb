//! The ShedLock-compatible mode: its condition expressions, the `lockedBy` of our own
//! acquisitions, and ShedLock's ISO times.

use shedlock::support::ACQUISITION_SUFFIX_LEN;

use crate::conditions::{Expr, N_AT, N_BY, N_UNTIL};

// The ShedLock-compatible mode: ShedLock's three attributes, times as its ISO strings (compared
// as strings, which sort as the times do thanks to the fixed width), the owner in `lockedBy`
// (`:acq` is this acquisition's `lockedBy` there).
/// ShedLock's acquire (`lockUntil <= :lockedAt or attribute_not_exists(lockUntil)`), also taken
/// when the item already carries this acquisition's `lockedBy` (a retry after a lost answer).
pub(crate) const ACQUIRE_COMPAT: Expr = Expr {
    update: "SET #u = :until, #a = :now, #b = :acq",
    condition: "attribute_not_exists(#u) OR #u <= :now OR #b = :acq",
    names: &[N_UNTIL, N_AT, N_BY],
};
pub(crate) const EXTEND_COMPAT: Expr = Expr {
    update: "SET #u = :until, #a = :now",
    condition: "#b = :acq AND #u > :now",
    names: &[N_UNTIL, N_AT, N_BY],
};
pub(crate) const KEEP_COMPAT: Expr =
    Expr { update: "SET #u = :until", condition: "#b = :acq", names: &[N_UNTIL, N_BY] };
/// No `lockUntil`: free for every node whatever its clock (ShedLock's condition accepts a
/// missing `lockUntil`).
pub(crate) const RELEASE_COMPAT: Expr =
    Expr { update: "REMOVE #u", condition: "#b = :acq", names: &[N_UNTIL, N_BY] };

/// Whether `locked_by` ends with what an acquisition of ours appends to it in the
/// ShedLock-compatible mode: ` #` and 16 lower-case hex digits.
pub(crate) fn has_acquisition_suffix(locked_by: &str) -> bool {
    let b = locked_by.as_bytes();
    b.len() >= ACQUISITION_SUFFIX_LEN && {
        let tail = &b[b.len() - ACQUISITION_SUFFIX_LEN..];
        tail.starts_with(b" #") && tail[2..].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    }
}

/// Milliseconds since the epoch of a time as ShedLock writes it
/// (`2018-12-07T12:30:37.810Z`: UTC, up to nine fractional digits, truncated to milliseconds);
/// `None` for anything else ([`shedlock::support::parse_iso8601_utc`]).
pub(crate) fn parse_iso_millis(s: &str) -> Option<i64> {
    shedlock::support::parse_iso8601_utc(s).map(shedlock::support::unix_millis)
}

#[cfg(test)]
mod tests {
    use shedlock::support::{from_unix_micros, iso8601_millis};

    use super::*;

    #[test]
    fn shedlock_iso_times_read_back_as_written_truncated_to_the_millisecond() {
        for ms in [0_i64, 1_544_185_837_810, -1_000] {
            let t = from_unix_micros(ms * 1000);
            assert_eq!(parse_iso_millis(&iso8601_millis(t)), Some(ms), "{ms}");
        }
        assert_eq!(parse_iso_millis("2018-12-07T12:30:37.8109Z"), Some(1_544_185_837_810));
        assert_eq!(parse_iso_millis("2018-12-07 12:30:37Z"), None);
    }

    #[test]
    fn only_our_compatible_locked_by_identifies_an_acquisition_alone() {
        assert!(has_acquisition_suffix("host/1 #0123456789abcdef"));
        assert!(!has_acquisition_suffix("host/1 #0123456789ABCDEF"));
        assert!(!has_acquisition_suffix("java-host"));
    }
}
