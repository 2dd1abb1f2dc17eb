//! What the server writes, read: the metadata in a delivered message's reply subject, and the
//! `Nats-TTL` and `Nats-Time-Stamp` headers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The stream sequence, the time (the server's) and the number of messages still pending of
/// a message a consumer delivered, from its reply subject:
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>`, or
/// with `<domain>.<account hash>.` before the stream and a token after the pending count.
pub(crate) fn ack_metadata(reply: &str) -> Option<(u64, SystemTime, u64)> {
    let t: Vec<&str> = reply.split('.').collect();
    let at = match t.len() {
        9 => 5,
        n if n >= 12 => 7,
        _ => return None,
    };
    if t[0] != "$JS" || t[1] != "ACK" {
        return None;
    }
    let seq = t[at].parse().ok()?;
    let nanos: u64 = t[at + 2].parse().ok()?;
    let pending = t[at + 3].parse().ok()?;
    Some((seq, UNIX_EPOCH.checked_add(Duration::from_nanos(nanos))?, pending))
}

/// A `Nats-TTL` header as this provider writes it: whole seconds (`"30"`, or `"30s"`).
pub(crate) fn parse_ttl(ttl: &str) -> Option<Duration> {
    ttl.strip_suffix('s').unwrap_or(ttl).parse().ok().map(Duration::from_secs)
}

/// A UTC time as the server writes it (`Nats-Time-Stamp`, RFC 3339 with up to nine fractional
/// digits and `Z`: `2025-05-01T10:00:00.123456789Z`).
pub(crate) fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let d = b.get(r)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| d.iter().fold(0i64, |n, c| n * 10 + i64::from(c - b'0')))
    };
    let seps = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if seps.iter().any(|&(i, c)| b.get(i) != Some(&c)) {
        return None;
    }
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let rest = s.get(19..)?.strip_suffix('Z')?;
    let nanos = match rest.strip_prefix('.') {
        None if rest.is_empty() => 0,
        Some(f) if (1..=9).contains(&f.len()) && f.bytes().all(|c| c.is_ascii_digit()) => {
            f.parse::<u32>().ok()? * 10u32.pow(9 - u32::try_from(f.len()).ok()?)
        }
        _ => return None,
    };
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days since the epoch of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn server_times_and_reply_subjects_are_read() {
        let t = |s: &str| parse_rfc3339(s).map(|t| t.duration_since(UNIX_EPOCH).unwrap());
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(Duration::ZERO));
        assert_eq!(t("2000-03-01T00:00:01.5Z"), Some(Duration::new(951_868_801, 500_000_000)));
        assert_eq!(
            t("2025-05-01T10:00:00.123456789Z"),
            Some(Duration::new(1_746_093_600, 123_456_789))
        );
        for bad in ["2025-05-01T10:00:00", "2025-05-01 10:00:00Z", "2025-13-01T10:00:00Z", ""] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
        let (seq, time, pending) =
            ack_metadata("$JS.ACK.KV_b.c.1.42.1.1746093600000000000.7").unwrap();
        assert_eq!((seq, pending), (42, 7));
        assert_eq!(time.duration_since(UNIX_EPOCH).unwrap(), Duration::from_secs(1_746_093_600));
        let v2 = ack_metadata("$JS.ACK.hub.ACC.KV_b.c.1.43.2.1746093600000000000.0.xyz").unwrap();
        assert_eq!((v2.0, v2.2), (43, 0));
        assert_eq!(ack_metadata("_INBOX.x"), None);
        assert_eq!(parse_ttl("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_ttl("never"), None);
    }
}
