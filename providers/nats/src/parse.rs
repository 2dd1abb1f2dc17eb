//! What the server writes, read: the metadata in a delivered message's reply subject, and the
//! `Nats-TTL` header (its `Nats-Time-Stamp` is read by `shedlock::support::parse_iso8601_utc`).

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn server_times_and_reply_subjects_are_read() {
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
