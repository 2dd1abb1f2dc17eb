//! The pieces of the memcached meta protocol this provider uses, without I/O: key encoding, TTL
//! arithmetic, request building and response parsing.

use std::time::Duration;

use shedlock::support::{MAX_LOCKED_BY_LEN, duration_secs_ceil};

/// The longest key memcached accepts, in bytes of the key token on the wire (`KEY_MAX_LENGTH`).
const KEY_TOKEN_MAX: usize = 250;

/// The longest binary key (lock key prefix plus lock name), in bytes. Keys are sent base64
/// encoded with the meta `b` flag, and memcached limits the *encoded* token to 250 characters:
/// 4 × ⌈186 / 3⌉ = 248 ≤ 250, while 187 bytes would need 252.
pub const MAX_KEY_LEN: usize = KEY_TOKEN_MAX / 4 * 3;

/// The longest value this provider writes: `<acquisition id, 16 hex digits> <locked_by>`, with
/// `locked_by` at most [`MAX_LOCKED_BY_LEN`] bytes (272 bytes).
pub(crate) const RECORD_VALUE_MAX: usize = 16 + 1 + MAX_LOCKED_BY_LEN;

/// The largest value block this client reads, in bytes: four times the longest value the
/// provider writes (1 088 bytes). A server announcing a larger value (`VA <len>`) is not
/// answering about a lock record: the call fails with `Error::Backend` before anything is
/// allocated for it, and the connection is closed.
pub const MAX_VALUE_LEN: usize = 4 * RECORD_VALUE_MAX;

/// The longest response line this client reads, in bytes without its CRLF (2 048, memcached's
/// own limit on a request line). The lines it expects (`HD c<cas>`, `VA <len> t<ttl> c<cas>`,
/// `STAT <name> <value>`, an error line) are far shorter; a longer one fails the call with
/// `Error::Backend` after at most this many bytes, and the connection is closed.
pub const MAX_LINE_LEN: usize = 2048;

/// The most lines a `stats` reply may have (memcached 1.6 sends about a hundred): a server
/// that keeps sending `STAT` lines fails the connection instead of holding it forever.
pub(crate) const MAX_STATS_LINES: usize = 1024;

/// The largest TTL memcached reads as relative: a larger value is taken as an absolute Unix
/// time (`REALTIME_MAXDELTA`, 30 days).
pub(crate) const MAX_RELATIVE_TTL: u64 = 60 * 60 * 24 * 30;

/// Seconds added to `⌈lock_at_most_for⌉` in the TTL of an acquire or an extend.
///
/// memcached keeps time in whole seconds: a timer re-armed every second sets its clock to the
/// whole seconds elapsed, and an item with TTL `n` expires at the first tick at which that clock
/// reaches the item's set-time clock plus `n`. The clock may be up to one tick stale when the item
/// is stored, and because the timer is re-armed *after* each tick (libevent rounds up to a
/// millisecond), its phase drifts by about a millisecond per second: roughly every fifteen minutes
/// the clock advances by two in one tick. So an item with TTL `n` lives between `n - 2` and `n`
/// seconds (between `n - 1` and `n` between those skips). Only `⌈d⌉ + 2` guarantees that the item
/// outlives `d`; `⌈d⌉ + 1` would let it expire up to a second early whenever its life spans a
/// skip, while its holder's lease still runs.
pub(crate) const AT_MOST_MARGIN: u64 = 2;

/// Seconds added to the remaining `⌈lock_at_least_for⌉` in the TTL an unlock leaves behind. At
/// least is honoured to memcached's granularity: the record stays for at least the remaining
/// time while memcached's clock ticks regularly, and for at least the remaining time less one
/// second when its clock skips a second (see [`AT_MOST_MARGIN`]). A margin of two would keep
/// every lock up to three seconds past at least, and a scheduler whose period is at least plus
/// two seconds would miss fire times.
pub(crate) const AT_LEAST_MARGIN: u64 = 1;

/// The longest `lock_at_most_for` this provider accepts: its TTL, `⌈d⌉ + 2` seconds, must stay
/// within memcached's 30 days of relative TTL (29 days, 23 hours, 59 minutes and 58 seconds).
pub const MAX_LOCK_DURATION: Duration = Duration::from_secs(MAX_RELATIVE_TTL - AT_MOST_MARGIN);

/// The TTL, in whole seconds, of a record that must outlive `at_most`: `⌈at_most⌉ + 2`. `None`
/// when it does not fit memcached's relative TTLs. Never 0 (which would mean "never expire").
pub(crate) fn at_most_ttl(at_most: Duration) -> Option<u64> {
    let ttl = duration_secs_ceil(at_most) + AT_MOST_MARGIN;
    (ttl <= MAX_RELATIVE_TTL).then_some(ttl)
}

/// The TTL, in whole seconds, of a released record that must stay for `remaining`:
/// `⌈remaining⌉ + 1`, capped at memcached's 30 days. Never 0.
pub(crate) fn at_least_ttl(remaining: Duration) -> u64 {
    (duration_secs_ceil(remaining) + AT_LEAST_MARGIN).min(MAX_RELATIVE_TTL)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as memcached's `b` flag expects.
pub(crate) fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(B64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The response to one meta command: its two-letter code (`HD`, `NS`, `EX`, `NF`, `EN`, `VA`),
/// its flags and, for `VA`, the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) code: [u8; 2],
    pub(crate) flags: Vec<String>,
    pub(crate) value: Option<Vec<u8>>,
}

impl Reply {
    /// The token of flag `f` (e.g. the CAS of `c123`), if returned.
    pub(crate) fn flag(&self, f: char) -> Option<&str> {
        self.flags.iter().find_map(|t| t.strip_prefix(f))
    }

    /// The CAS value returned with the `c` flag; `None` when absent, unparsable or 0.
    pub(crate) fn cas(&self) -> Option<u64> {
        self.flag('c').and_then(|c| c.parse().ok()).filter(|c| *c != 0)
    }

    pub(crate) fn is(&self, code: &str) -> bool {
        self.code == code.as_bytes()
    }

    pub(crate) fn code_str(&self) -> String {
        String::from_utf8_lossy(&self.code).into_owned()
    }
}

/// What one response line says: a meta reply (a `VA` reply still needs its value), or an error
/// from the server.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A meta reply; `Some(n)` when an `n`-byte value block follows (`VA n ...`), `n` as sent
    /// (saturated at `usize::MAX`): the caller bounds it before reading the block.
    Meta(Reply, Option<usize>),
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...` (the whole line), or anything that is
    /// not a meta reply.
    Error(String),
}

/// Parses one response line (without its CRLF).
pub(crate) fn parse_line(line: &[u8]) -> Line {
    let text = String::from_utf8_lossy(line);
    let mut tokens = text.split(' ').filter(|t| !t.is_empty());
    let Some(code) = tokens.next() else { return Line::Error(text.into_owned()) };
    let code_bytes: [u8; 2] = match code.as_bytes() {
        [a, b] if a.is_ascii_uppercase() && b.is_ascii_uppercase() => [*a, *b],
        _ => return Line::Error(text.into_owned()),
    };
    let mut len = None;
    if code == "VA" {
        match tokens.next() {
            // All digits: a length, however large (bounded by the caller, never trusted).
            Some(t) if t.bytes().all(|b| b.is_ascii_digit()) => {
                len = Some(t.parse::<usize>().unwrap_or(usize::MAX));
            }
            _ => return Line::Error(text.into_owned()),
        }
    }
    let flags = tokens.map(str::to_owned).collect();
    Line::Meta(Reply { code: code_bytes, flags, value: None }, len)
}

/// A meta set request: `ms <key> <len> b <flags>` and the value block.
pub(crate) fn meta_set(key: &str, value: &[u8], flags: &str) -> Vec<u8> {
    let mut req = format!("ms {key} {} b {flags}\r\n", value.len()).into_bytes();
    req.extend_from_slice(value);
    req.extend_from_slice(b"\r\n");
    req
}

/// A meta get request: `mg <key> b <flags>`.
pub(crate) fn meta_get(key: &str, flags: &str) -> Vec<u8> {
    format!("mg {key} b {flags}\r\n").into_bytes()
}

/// A meta delete request: `md <key> b <flags>`.
pub(crate) fn meta_delete(key: &str, flags: &str) -> Vec<u8> {
    format!("md {key} b {flags}\r\n").into_bytes()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_with_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
        assert_eq!(base64(b"a b"), "YSBi");
        assert_eq!(base64(&[0, b'\n', b' ', 0xff]), "AAog/w==");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn the_longest_key_fits_the_token_limit_and_one_more_byte_does_not() {
        assert_eq!(MAX_KEY_LEN, 186);
        assert!(base64(&[7; MAX_KEY_LEN]).len() <= KEY_TOKEN_MAX);
        assert!(base64(&[7; MAX_KEY_LEN + 1]).len() > KEY_TOKEN_MAX);
    }

    #[test]
    fn at_most_ttl_rounds_up_adds_two_and_refuses_absolute_times() {
        assert_eq!(at_most_ttl(Duration::from_millis(1)), Some(3));
        assert_eq!(at_most_ttl(Duration::from_secs(1)), Some(3));
        assert_eq!(at_most_ttl(Duration::from_millis(1001)), Some(4));
        assert_eq!(at_most_ttl(Duration::from_secs(60)), Some(62));
        assert_eq!(at_most_ttl(MAX_LOCK_DURATION), Some(MAX_RELATIVE_TTL));
        assert_eq!(at_most_ttl(MAX_LOCK_DURATION + Duration::from_nanos(1)), None);
        assert_eq!(at_most_ttl(Duration::MAX), None);
    }

    #[test]
    fn at_least_ttl_rounds_up_adds_one_and_is_never_zero() {
        assert_eq!(at_least_ttl(Duration::from_nanos(1)), 2);
        assert_eq!(at_least_ttl(Duration::from_millis(2999)), 4);
        assert_eq!(at_least_ttl(Duration::from_secs(3)), 4);
        assert_eq!(at_least_ttl(Duration::MAX), MAX_RELATIVE_TTL);
    }

    #[test]
    fn parses_replies_and_errors() {
        let Line::Meta(r, None) = parse_line(b"HD c42") else { panic!() };
        assert!(r.is("HD"));
        assert_eq!(r.cas(), Some(42));
        let Line::Meta(r, None) = parse_line(b"NS c0") else { panic!() };
        assert_eq!(r.cas(), None);
        assert_eq!(r.code_str(), "NS");
        let Line::Meta(r, Some(5)) = parse_line(b"VA 5 t10 c18") else { panic!() };
        assert_eq!(r.flag('t'), Some("10"));
        assert_eq!(parse_line(b"ERROR"), Line::Error("ERROR".into()));
        assert_eq!(
            parse_line(b"CLIENT_ERROR bad command line format"),
            Line::Error("CLIENT_ERROR bad command line format".into())
        );
        assert!(matches!(parse_line(b"VA x"), Line::Error(_)));
        assert!(matches!(parse_line(b"VA -1"), Line::Error(_)));
        assert!(matches!(parse_line(b"VA"), Line::Error(_)));
        // A length past usize is still a length (saturated), for the caller to refuse.
        let Line::Meta(_, Some(n)) = parse_line(b"VA 999999999999999999999999999") else {
            panic!()
        };
        assert_eq!(n, usize::MAX);
        assert!(matches!(parse_line(b""), Line::Error(_)));
    }

    #[test]
    fn the_value_cap_holds_the_longest_record_the_provider_writes_with_a_margin() {
        assert_eq!(RECORD_VALUE_MAX, 272);
        assert_eq!(MAX_VALUE_LEN, 1088);
        // The longest meta reply line the provider asks for is far below the line cap.
        let line = format!("VA {MAX_VALUE_LEN} t{MAX_RELATIVE_TTL} c{}", u64::MAX);
        assert!(line.len() * 10 < MAX_LINE_LEN);
    }

    #[test]
    fn requests_are_framed() {
        assert_eq!(meta_set("a2V5", b"v v", "T5 ME c"), b"ms a2V5 3 b T5 ME c\r\nv v\r\n");
        assert_eq!(meta_delete("a2V5", "C7"), b"md a2V5 b C7\r\n");
    }
}
