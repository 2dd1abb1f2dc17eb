//! The lock node's data (`hold_ms`, `locked_by`) and the record an operator reads from it.

use std::time::Duration;

use shedlock::{
    LockInfo, TimeSource,
    support::{duration_millis_ceil, from_unix_micros},
};
use zookeeper_client::Stat;

/// The encoded lock node data: `hold_ms` on the first line, `locked_by` on the second.
pub(crate) fn encode(hold: Duration, locked_by: &str) -> Vec<u8> {
    format!("{}\n{locked_by}", hold_ms(hold)).into_bytes()
}

/// The `hold_ms` stored for a duration: one millisecond more than asked (rounded up), since the
/// leader's mtime is a whole millisecond (truncated).
pub(crate) fn hold_ms(hold: Duration) -> i64 {
    duration_millis_ceil(hold).saturating_add(1)
}

/// `hold_ms` of a lock node; `None` for data this provider did not write (held until deleted).
pub(crate) fn decode_hold(data: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(data).ok()?;
    text.split('\n').next()?.parse::<i64>().ok().filter(|ms| *ms >= 0)
}

/// `locked_by` of a lock node: its second line (`None` for data this provider did not write).
fn decode_locked_by(data: &[u8]) -> Option<&str> {
    decode_hold(data)?;
    std::str::from_utf8(data).ok()?.split_once('\n').map(|(_, by)| by)
}

/// The record of lock `name` in its lock node (`data`, `stat`), judged by the leader's `now`
/// (ms since the epoch) as an acquire judges it: expired from `mtime + hold_ms`; a node whose
/// data this provider did not write never expires. The acquisition and fencing token are the
/// node's `czxid` (the acquiring transaction's zxid; extensions and the at-least rewrite keep it).
pub(crate) fn record(name: &str, data: &[u8], stat: &Stat, now: i64) -> LockInfo {
    let millis = |ms: i64| from_unix_micros(ms.saturating_mul(1000));
    let hold = decode_hold(data);
    let until = hold.map(|ms| stat.mtime.saturating_add(ms));
    let held = until.is_none_or(|until| until > now);
    let token = hold.and_then(|_| u64::try_from(stat.czxid).ok());
    let mut info = LockInfo::new(name, stat.czxid.to_string(), held, TimeSource::Server)
        .with_locked_at(millis(stat.mtime))
        .with_fencing_token(token);
    if let Some(until) = until {
        info = info.with_lock_until(millis(until));
    }
    if let Some(by) = decode_locked_by(data) {
        info = info.with_locked_by(by);
    }
    info
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lock_data_round_trips_and_rounds_up() {
        assert_eq!(decode_hold(&encode(Duration::from_micros(1500), "h/1")), Some(3));
        assert_eq!(
            decode_locked_by(&encode(Duration::from_micros(1500), "h/1\nx")),
            Some("h/1\nx")
        );
        assert_eq!(decode_hold(b"junk"), None);
        assert_eq!(decode_locked_by(b"junk\nx"), None);
    }

    #[test]
    fn records_are_judged_by_the_leaders_now() {
        let stat = Stat {
            czxid: 42,
            mzxid: 42,
            pzxid: 42,
            ctime: 1_000,
            mtime: 1_000,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 7,
            data_length: 0,
            num_children: 0,
        };
        let data = encode(Duration::from_millis(99), "me");
        let held = record("n", &data, &stat, 1_099);
        assert!(held.held);
        assert_eq!((held.acquisition.as_str(), held.fencing_token), ("42", Some(42)));
        assert_eq!(held.locked_by.as_deref(), Some("me"));
        assert!(!record("n", &data, &stat, 1_100).held, "expired at mtime + hold_ms");
        let foreign = record("n", b"junk", &stat, i64::MAX);
        assert!(foreign.held && foreign.lock_until.is_none() && foreign.fencing_token.is_none());
    }
}
