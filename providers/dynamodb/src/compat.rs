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

/// Days from 1970-01-01 to the proleptic Gregorian date `y-m-d` (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Milliseconds since the epoch of a time as ShedLock writes it
/// (`2018-12-07T12:30:37.810Z`: UTC, any number of fractional digits, truncated to
/// milliseconds); `None` for anything else.
pub(crate) fn parse_iso_millis(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(r)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0_i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || b.last() != Some(&b'Z') {
        return None;
    }
    let (y, mo, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (h, mi, sec) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let fraction = &b[19..b.len() - 1];
    let millis = match fraction.split_first() {
        None => 0,
        Some((b'.', f)) if !f.is_empty() && f.iter().all(u8::is_ascii_digit) => {
            (0..3).fold(0_i64, |n, i| n * 10 + f.get(i).map_or(0, |d| i64::from(d - b'0')))
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec;
    Some(secs * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use shedlock::support::{from_unix_micros, iso8601_millis};

    use super::*;

    #[test]
    fn shedlock_iso_times_read_back_as_written() {
        for ms in [0_i64, 1, 999, 1_544_185_837_810, 951_782_400_000, 4_102_444_799_999, -1_000] {
            let t = from_unix_micros(ms * 1000);
            assert_eq!(parse_iso_millis(&iso8601_millis(t)), Some(ms), "{ms}");
        }
        assert_eq!(parse_iso_millis("2018-12-07T12:30:37Z"), Some(1_544_185_837_000));
        assert_eq!(parse_iso_millis("2018-12-07T12:30:37.8109Z"), Some(1_544_185_837_810));
        assert_eq!(parse_iso_millis("2018-12-07T12:30:37.8Z"), Some(1_544_185_837_800));
        for bad in [
            "",
            "2018-12-07T12:30:37.810",
            "2018-13-07T12:30:37.810Z",
            "2018-12-07 12:30:37Z",
            "2018-12-07T12:30:37.Z",
            "2018-12-07T12:30:37,810Z",
            "2018-12-07T12:3a:37.810Z",
            "é018-12-07T12:30:37.810Z",
        ] {
            assert_eq!(parse_iso_millis(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_our_compatible_locked_by_identifies_an_acquisition_alone() {
        assert!(has_acquisition_suffix("host/1 #0123456789abcdef"));
        assert!(!has_acquisition_suffix("host/1 #0123456789ABCDEF"));
        assert!(!has_acquisition_suffix("java-host"));
    }
}
