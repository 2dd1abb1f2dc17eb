//! Redis Cluster hash slots: which master a key lives on, and the keys that route the `list`
//! script to each master.

/// The Redis Cluster hash slot of a key's hash part (CRC16/XMODEM modulo 16 384).
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// The Redis Cluster hash slot of a key: of its hash tag (the text between the first `{` and
/// the first `}` after it, when not empty), else of the whole key.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tag = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter().position(|&b| b == b'}').filter(|&len| len > 0).map(|len| &rest[..len])
    });
    crc16(tag.unwrap_or(key)) % 16384
}

/// Whether every key that starts with `prefix` has the prefix's own hash tag (a `{…}` in the
/// prefix; only a ShedLock-compatible prefix may have braces), so lives in one slot.
fn prefix_pins_slot(prefix: &str) -> bool {
    prefix.find('{').is_some_and(|open| prefix[open + 1..].find('}').is_some_and(|len| len > 0))
}

/// A key under the provider's `prefix` whose hash slot lies in `slots` (a master's range), only
/// used to route the `LIST` script to that master, never read or written: `<prefix>scan{<n>}`
/// for the first `n` that hashes there. Under the prefix, so that the ACL key pattern that
/// covers the locks covers it too. `None` when no key under the prefix lives there (a prefix
/// that pins its keys to a slot of another master).
pub(crate) fn routing_key(prefix: &str, slots: (u16, u16)) -> Option<String> {
    let there = |key: &String| (slots.0..=slots.1).contains(&key_slot(key.as_bytes()));
    if prefix_pins_slot(prefix) {
        return Some(format!("{prefix}scan")).filter(there);
    }
    (0u32..1 << 20).map(|n| format!("{prefix}scan{{{n}}}")).find(there)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_gives_the_redis_cluster_slots() {
        // The reference value of CRC16/XMODEM, and slots from the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b"foo") % 16384, 12182);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"a{foo}b"), 12182);
        assert_eq!(key_slot(b"a{}foo"), crc16(b"a{}foo") % 16384, "an empty tag is no tag");
        assert_eq!(key_slot(b"a{foo"), crc16(b"a{foo") % 16384, "an open tag is no tag");
    }

    #[test]
    fn routing_keys_are_under_the_prefix_and_reach_their_master() {
        for prefix in ["shedlock:", "app:prod:", "job-lock:{", "job-lock:{}:"] {
            let key = routing_key(prefix, (5461, 10922)).unwrap();
            assert!(key.starts_with(prefix), "{key}");
            assert!((5461..=10922).contains(&key_slot(key.as_bytes())), "{key}");
        }
        // A prefix with its own hash tag pins every key under it to one slot: only the master
        // serving that slot has a routing key.
        let pinned = "job-lock:{foo}:";
        assert_eq!(routing_key(pinned, (12182, 12182)).as_deref(), Some("job-lock:{foo}:scan"));
        assert_eq!(routing_key(pinned, (0, 12181)), None);
    }
}
