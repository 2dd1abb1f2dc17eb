//! Backend-neutral helpers that every provider needs: owner ids, the default `locked_by`, lock
//! name checks, time limits, retries, time and duration conversions, and whose clock judges
//! expiry ([`TimeSource`]). Providers for SQL databases, key-value stores, document stores and
//! consensus systems share them, so each behaves the same way on the same input.
//!
//! None of these does backend I/O.

use std::{
    collections::hash_map::RandomState,
    future::Future,
    hash::{BuildHasher, Hasher},
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crate::{clock::SharedClock, error::Error};

/// Whose clock judges expiry. Every provider instance also has its own
/// [`Clock`](crate::Clock) (injectable, the system clock by default): with
/// [`Client`](TimeSource::Client) that clock computes `lock_until`; with
/// [`Server`](TimeSource::Server) it must never be consulted for expiry, which tests check by
/// giving server-time providers badly skewed clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// The backend's own clock (a database's `now()`, a key's relative TTL): clock skew between
    /// nodes cannot break exclusion. Providers declare
    /// [`server_time`](crate::Capabilities::server_time). The default.
    #[default]
    Server,
    /// The instance's clock: the client computes `lock_until`, as ShedLock's default JDBC
    /// provider does. Skew between nodes can then break exclusion, by up to the skew.
    Client,
}

impl TimeSource {
    /// Whether the backend's clock judges expiry.
    pub fn is_server(self) -> bool {
        self == TimeSource::Server
    }

    /// The time by `clock` in client-time mode; `None` in server-time mode, where the clock must
    /// not be consulted.
    pub fn client_now(self, clock: &SharedClock) -> Option<SystemTime> {
        match self {
            TimeSource::Server => None,
            TimeSource::Client => Some(clock.now()),
        }
    }
}

/// Durations longer than this are capped to it (a lock held for 1000 years is held forever; the
/// cap keeps every computed timestamp inside every backend's range).
pub const MAX_DURATION: Duration = Duration::from_secs(1000 * 365 * 24 * 3600);

/// The longest default `locked_by` value, in bytes.
pub const MAX_LOCKED_BY_LEN: usize = 255;

/// A fresh, unpredictable 64-bit id for one acquisition: the owner token that unlock and extend
/// compare, so a stale holder (same host, even the same process) never matches a later
/// acquisition. Drawn from the standard library's randomly keyed SipHash over a process-wide
/// counter, the time and the process id: distinct within a process, and colliding across
/// processes with probability 2^-64 per pair.
pub fn acquisition_id() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(n);
    h.write_i64(unix_micros(SystemTime::now()));
    h.write_u32(std::process::id());
    h.finish()
}

/// The default `locked_by`: `hostname/pid`, so two processes on one host differ (ShedLock
/// #317). At most [`MAX_LOCKED_BY_LEN`] bytes, no NUL. Computed once per process. Informational
/// only: ownership always rests on [`acquisition_id`].
pub fn default_locked_by() -> String {
    static LOCKED_BY: OnceLock<String> = OnceLock::new();
    LOCKED_BY
        .get_or_init(|| {
            let host = gethostname::gethostname().to_string_lossy().into_owned();
            let host = if host.is_empty() { "unknown-host".to_owned() } else { host };
            let mut s = format!("{host}/{}", std::process::id());
            s.retain(|c| c != '\0');
            truncate_at_char_boundary(&mut s, MAX_LOCKED_BY_LEN);
            s
        })
        .clone()
}

/// Cuts `s` to at most `max` bytes, at the last character boundary that fits (never inside a
/// character, where [`String::truncate`] would panic). For informational values such as
/// `locked_by`; lock names are never cut ([`check_lock_name`]).
pub fn truncate_at_char_boundary(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// The length of what [`acquisition_locked_by`] appends to `locked_by`: ` #` and 16 hex digits.
pub const ACQUISITION_SUFFIX_LEN: usize = 18;

/// The `locked_by` an acquisition writes in a ShedLock-compatible mode: the configured value,
/// then ` #` and the [`acquisition_id`] in 16 hex digits. ShedLock's storage formats identify
/// a holder by `lockedBy` alone, so a value unique to each acquisition is what keeps a stale
/// holder from releasing or extending anyone else's lock (and a Java node's owner-checked
/// calls, which match its own `lockedBy`, from touching ours).
pub fn acquisition_locked_by(locked_by: &str, acquisition_id: u64) -> String {
    format!("{locked_by} #{acquisition_id:016x}")
}

/// Checks a lock name before it reaches the backend: at most `max_len` bytes (when the backend
/// has a limit), and no NUL character when the backend cannot store one (`reject_nul`). Names are
/// never truncated or rewritten, since that could make two names collide: a bad name is
/// [`Error::InvalidName`] saying why.
pub fn check_lock_name(
    backend: &'static str,
    name: &str,
    max_len: Option<usize>,
    reject_nul: bool,
) -> Result<(), Error> {
    if let Some(max) = max_len.filter(|max| name.len() > *max) {
        return Err(Error::InvalidName {
            backend,
            name: name.to_owned(),
            reason: format!("{} bytes long; this backend holds at most {max} bytes", name.len()),
        });
    }
    if reject_nul && name.contains('\0') {
        return Err(Error::InvalidName {
            backend,
            name: name.to_owned(),
            reason: "contains a NUL character, which this backend cannot store".into(),
        });
    }
    Ok(())
}

/// Runs `fut` under an optional time limit, mapping expiry to [`Error::Timeout`]. The inner future
/// is dropped on expiry, so it must be cancel safe (see ARCHITECTURE.md, "Cancellation").
/// The error names the [`Operation`](crate::store::Operation): its label is the one vocabulary
/// of timeouts and spans.
pub async fn with_timeout<T>(
    operation: crate::store::Operation,
    limit: Option<Duration>,
    fut: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match limit {
        None => fut.await,
        Some(after) => match tokio::time::timeout(after, fut).await {
            Ok(r) => r,
            Err(_) => Err(operation.timed_out(after)),
        },
    }
}

/// Runs `f` up to `attempts` times (at least once) while it fails with an error that `transient`
/// accepts: one the backend guarantees had no effect (a rolled-back deadlock victim, a
/// serialization failure, a compare-and-swap conflict). Never retry an error whose effect is
/// unknown, such as a timeout: the first attempt may have taken the lock.
pub async fn retry_transient<T, E, F, Fut>(
    attempts: usize,
    transient: impl Fn(&E) -> bool,
    mut f: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut attempt = 1;
    loop {
        match f().await {
            Err(e) if attempt < attempts && transient(&e) => attempt += 1,
            other => return other,
        }
    }
}

/// Microseconds since the Unix epoch (negative before it; saturating).
pub fn unix_micros(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_micros()).map(|v| -v).unwrap_or(i64::MIN),
    }
}

/// The time `micros` microseconds after the Unix epoch (before it when negative).
pub fn from_unix_micros(micros: i64) -> SystemTime {
    if micros >= 0 {
        UNIX_EPOCH + Duration::from_micros(micros.unsigned_abs())
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_micros(micros.unsigned_abs())).unwrap_or(UNIX_EPOCH)
    }
}

/// `t` as ShedLock writes times as text (its `Utils.toIsoString`): ISO 8601 in UTC with exactly
/// three fractional digits (truncated) and `Z`, e.g. `2018-12-07T12:30:37.000Z`. For the
/// ShedLock-compatible modes; the fixed width makes such strings sort as the times do.
pub fn iso8601_millis(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// A UTC time written as ISO 8601 / RFC 3339 with `T` and `Z` and up to nine fractional digits
/// (`2018-12-07T12:30:37.810Z`): what ShedLock writes ([`iso8601_millis`]) and what a NATS
/// server stamps its messages with. `None` for anything else (an offset other than `Z`, a space
/// for the `T`, a date or time out of range), so a malformed record is never read as a time.
pub fn parse_iso8601_utc(s: &str) -> Option<SystemTime> {
    if s.as_bytes().get(10) != Some(&b'T') || !s.ends_with('Z') {
        return None;
    }
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    Some(SystemTime::from(t.with_timezone(&chrono::Utc)))
}

/// Milliseconds since the Unix epoch (negative before it; saturating).
pub fn unix_millis(t: SystemTime) -> i64 {
    unix_micros(t).div_euclid(1000)
}

/// A duration in whole microseconds, capped at [`MAX_DURATION`] and rounded up (a lock is never
/// held for less than asked).
pub fn duration_micros(d: Duration) -> i64 {
    let d = d.min(MAX_DURATION);
    let micros = d.as_micros() + u128::from(!d.subsec_nanos().is_multiple_of(1000));
    i64::try_from(micros).unwrap_or(i64::MAX)
}

/// A duration in whole milliseconds, capped at [`MAX_DURATION`] and rounded up (a lock is never
/// held for less than asked).
pub fn duration_millis_ceil(d: Duration) -> i64 {
    let d = d.min(MAX_DURATION);
    let millis = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
    i64::try_from(millis).unwrap_or(i64::MAX)
}

/// A duration in whole seconds, capped at [`MAX_DURATION`] and rounded up (for backends whose
/// expiry has whole-second granularity, such as etcd leases or memcached).
pub fn duration_secs_ceil(d: Duration) -> u64 {
    let d = d.min(MAX_DURATION);
    d.as_secs() + u64::from(d.subsec_nanos() != 0)
}

/// A one-to-one escaping of lock names into keys for backends that allow only some characters in
/// a key: ASCII letters, digits and the bytes of `keep` stay as they are; every other byte (the
/// marker itself included, and every byte of a non-ASCII character) becomes the marker and two
/// upper-case hex digits. Two names never share a key, and a name's prefix escapes to a prefix
/// of its key. NATS keys use `=` (keeping `-`, `_`, `/`), ZooKeeper node names `%` (keeping `-`,
/// `_`), S3 object keys `=` (keeping `-`, `_`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HexEscape {
    marker: u8,
    keep: &'static [u8],
}

impl HexEscape {
    /// The escaping with `marker` (never one of the bytes kept) that keeps ASCII letters, digits
    /// and `keep`.
    pub const fn new(marker: u8, keep: &'static [u8]) -> Self {
        Self { marker, keep }
    }

    fn kept(&self, b: u8) -> bool {
        b != self.marker && (b.is_ascii_alphanumeric() || self.keep.contains(&b))
    }

    /// The key of `name`.
    pub fn escape(&self, name: &str) -> String {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut key = String::with_capacity(name.len());
        for b in name.bytes() {
            if self.kept(b) {
                key.push(char::from(b));
            } else {
                key.push(char::from(self.marker));
                key.push(char::from(HEX[usize::from(b >> 4)]));
                key.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
        key
    }

    /// The name whose key is `key`, the inverse of [`escape`](Self::escape): `None` for a key
    /// that `escape` makes of no name (another character, an escape of a byte that is kept, a
    /// lower-case or cut-off escape, or bytes that are not UTF-8).
    pub fn unescape(&self, key: &str) -> Option<String> {
        let hex = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        };
        let (mut bytes, mut rest) = (Vec::with_capacity(key.len()), key.as_bytes());
        while let Some((&b, tail)) = rest.split_first() {
            if b == self.marker {
                let [hi, lo, tail @ ..] = tail else { return None };
                let byte = hex(*hi)? << 4 | hex(*lo)?;
                if self.kept(byte) {
                    return None;
                }
                bytes.push(byte);
                rest = tail;
            } else if self.kept(b) {
                bytes.push(b);
                rest = tail;
            } else {
                return None;
            }
        }
        String::from_utf8(bytes).ok()
    }
}

#[cfg(test)]
mod tests {

    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    #[test]
    fn hex_escape_is_one_to_one_and_refuses_every_key_it_would_not_make() {
        let e = HexEscape::new(b'=', b"-_/");
        let names = ["a", "a.b", "a=2Eb", "a b", "ü", "a/b", "=", "%2E", "", "x\0y"];
        let keys: std::collections::HashSet<String> = names.iter().map(|n| e.escape(n)).collect();
        assert_eq!(keys.len(), names.len());
        for n in names {
            assert_eq!(e.unescape(&e.escape(n)).as_deref(), Some(n), "{n:?}");
        }
        assert_eq!(e.escape("a.b c"), "a=2Eb=20c");
        assert_eq!(e.escape("ü"), "=C3=BC");
        // Not made by escape: a kept byte escaped, lower-case hex, a cut-off escape, another
        // character, bytes that are not UTF-8.
        for key in ["=2D", "=2e", "=", "=4", "a.b", "a b", "=FF"] {
            assert_eq!(e.unescape(key), None, "{key:?}");
        }
        let z = HexEscape::new(b'%', b"-_");
        assert_eq!(z.escape("a/b.c"), "a%2Fb%2Ec");
        assert_eq!(z.escape("%"), "%25");
        assert_eq!(z.unescape("a/b"), None);
    }

    #[test]
    fn iso8601_utc_text_reads_back_as_written_and_nothing_else_reads() {
        let since = |s: &str| {
            parse_iso8601_utc(s).map(|t| match t.duration_since(UNIX_EPOCH) {
                Ok(d) => i128::try_from(d.as_nanos()).unwrap(),
                Err(e) => -i128::try_from(e.duration().as_nanos()).unwrap(),
            })
        };
        // ShedLock's form, written by iso8601_millis, reads back to the millisecond.
        for ms in [0_i64, 1, 999, 1_544_185_837_810, 951_782_400_000, 4_102_444_799_999, -1_000] {
            let t = from_unix_micros(ms * 1000);
            assert_eq!(since(&iso8601_millis(t)), Some(i128::from(ms) * 1_000_000), "{ms}");
        }
        // Any number of fractional digits up to nine (NATS writes nanoseconds), or none.
        assert_eq!(since("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(since("2018-12-07T12:30:37Z"), Some(1_544_185_837_000_000_000));
        assert_eq!(since("2018-12-07T12:30:37.8Z"), Some(1_544_185_837_800_000_000));
        assert_eq!(since("2000-03-01T00:00:01.5Z"), Some(951_868_801_500_000_000));
        assert_eq!(since("2025-05-01T10:00:00.123456789Z"), Some(1_746_093_600_123_456_789));
        for bad in [
            "",
            "2018-12-07T12:30:37.810",
            "2018-13-07T12:30:37.810Z",
            "2018-12-07 12:30:37Z",
            "2018-12-07T12:30:37.Z",
            "2018-12-07T12:30:37,810Z",
            "2018-12-07T12:3a:37.810Z",
            "2018-12-07T12:30:37+01:00",
            "2018-12-07t12:30:37Z",
            "é018-12-07T12:30:37.810Z",
        ] {
            assert_eq!(since(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn iso8601_millis_is_shedlocks_fixed_width_utc_form() {
        assert_eq!(iso8601_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_nanos(1_544_185_837_810_999_999);
        assert_eq!(iso8601_millis(t), "2018-12-07T12:30:37.810Z", "truncated, not rounded");
        let later = t + Duration::from_millis(190);
        assert!(iso8601_millis(t) < iso8601_millis(later), "sorts as the times do");
    }

    #[test]
    fn durations_round_up_and_cap() {
        assert_eq!(duration_micros(Duration::from_nanos(1)), 1);
        assert_eq!(duration_micros(Duration::from_micros(5)), 5);
        assert_eq!(duration_millis_ceil(Duration::from_micros(1001)), 2);
        assert_eq!(duration_millis_ceil(Duration::from_millis(7)), 7);
        assert_eq!(duration_millis_ceil(Duration::MAX), duration_millis_ceil(MAX_DURATION));
        assert!(duration_micros(Duration::MAX) > 0);
        assert_eq!(duration_secs_ceil(Duration::from_millis(1001)), 2);
        assert_eq!(duration_secs_ceil(Duration::from_secs(3)), 3);
        assert_eq!(duration_secs_ceil(Duration::MAX), MAX_DURATION.as_secs());
    }

    #[test]
    fn epoch_conversions_round_trip_on_both_sides_of_the_epoch() {
        let t = UNIX_EPOCH + Duration::from_micros(1_764_000_000_123_456);
        assert_eq!(from_unix_micros(unix_micros(t)), t);
        assert_eq!(unix_millis(t), 1_764_000_000_123);
        let before = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(unix_micros(before), -5_000_000);
        assert_eq!(from_unix_micros(-5_000_000), before);
        assert_eq!(unix_millis(UNIX_EPOCH - Duration::from_micros(1)), -1);
    }

    #[test]
    fn lock_names_are_checked_not_truncated() {
        assert!(check_lock_name("x", &"a".repeat(255), Some(255), true).is_ok());
        let long = "a".repeat(256);
        match check_lock_name("x", &long, Some(255), true) {
            Err(Error::InvalidName { name, .. }) => assert_eq!(name, long),
            other => panic!("{other:?}"),
        }
        assert!(check_lock_name("x", &long, None, true).is_ok());
        // Bytes, not characters: 64 four-byte characters are 256 bytes.
        assert!(check_lock_name("x", &"😀".repeat(64), Some(255), true).is_err());
        assert!(check_lock_name("x", "a\0b", Some(255), true).is_err());
        assert!(check_lock_name("x", "a\0b", Some(255), false).is_ok());
    }

    #[test]
    fn truncation_never_splits_a_character() {
        let mut s = "ab😀".to_owned(); // 2 + 4 bytes
        truncate_at_char_boundary(&mut s, 5);
        assert_eq!(s, "ab");
        let mut s = "ab😀".to_owned();
        truncate_at_char_boundary(&mut s, 6);
        assert_eq!(s, "ab😀");
        let mut s = "é".repeat(200);
        truncate_at_char_boundary(&mut s, 255);
        assert_eq!(s.len(), 254);
    }

    #[test]
    fn acquisition_ids_differ() {
        let ids: std::collections::HashSet<u64> = (0..10_000).map(|_| acquisition_id()).collect();
        assert_eq!(ids.len(), 10_000);
    }

    #[test]
    fn default_locked_by_names_the_process() {
        let by = default_locked_by();
        assert!(by.ends_with(&format!("/{}", std::process::id())), "{by}");
        assert!(by.len() <= MAX_LOCKED_BY_LEN && !by.contains('\0'));
    }

    #[tokio::test]
    async fn retries_only_transient_errors_and_at_most_the_attempts() {
        let mut calls = 0;
        let r: Result<(), &str> = retry_transient(
            3,
            |e| *e == "deadlock",
            || {
                calls += 1;
                async { Err("deadlock") }
            },
        )
        .await;
        assert_eq!((r, calls), (Err("deadlock"), 3));
        let mut calls = 0;
        let r: Result<(), &str> = retry_transient(
            3,
            |e| *e == "deadlock",
            || {
                calls += 1;
                async { Err("timeout") }
            },
        )
        .await;
        assert_eq!((r, calls), (Err("timeout"), 1));
        let mut calls = 0;
        let r = retry_transient(
            3,
            |e: &&str| *e == "deadlock",
            || {
                calls += 1;
                let n = calls;
                async move { if n < 2 { Err("deadlock") } else { Ok(n) } }
            },
        )
        .await;
        assert_eq!(r, Ok(2));
    }

    #[tokio::test(start_paused = true)]
    async fn with_timeout_maps_expiry_to_a_typed_timeout() {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(1)
        };
        match with_timeout(crate::store::Operation::TryLock, Some(Duration::from_secs(1)), slow)
            .await
        {
            Err(Error::Timeout { operation, after }) => {
                assert_eq!((operation, after), ("try_lock", Duration::from_secs(1)));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            with_timeout(crate::store::Operation::Check, None, async { Ok(2) }).await.unwrap(),
            2
        );
    }
}
