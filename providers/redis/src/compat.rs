//! ShedLock's value format (the ShedLock-compatible mode): writing it, and reading its
//! `locked_by`.

use shedlock::support::{acquisition_id, iso8601_millis};

/// ShedLock's value (since 6.7): `ADDED:<ISO time>@<locked_by>:<UUID>`, the UUID random (v4
/// layout) and unique to the acquisition.
pub(crate) fn shedlock_value(locked_by: &str) -> String {
    let (a, b) = (acquisition_id(), acquisition_id());
    let a = (a & !0xF000) | 0x4000; // version 4
    let b = (b & !(0b11 << 62)) | (0b10 << 62); // RFC 4122 variant
    format!(
        "ADDED:{}@{locked_by}:{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        iso8601_millis(std::time::SystemTime::now()),
        a >> 32,
        (a >> 16) & 0xFFFF,
        a & 0xFFFF,
        b >> 48,
        b & 0xFFFF_FFFF_FFFF
    )
}
/// The ShedLock value's `locked_by`: `ADDED:<time>@<locked_by>[:<UUID>]` (the UUID since 6.7).
pub(crate) fn compat_locked_by(value: &str) -> Option<&str> {
    let (_, by) = value.strip_prefix("ADDED:")?.split_once('@')?;
    match by.rsplit_once(':') {
        Some((head, uuid))
            if uuid.len() == 36 && uuid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') =>
        {
            Some(head)
        }
        _ => Some(by),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shedlock_values_give_their_locked_by() {
        let v = "ADDED:2026-01-01T00:00:00.000Z@host:a:0a1b2c3d-0000-4000-8000-00000000abcd";
        assert_eq!(compat_locked_by(v), Some("host:a"));
        assert_eq!(compat_locked_by("ADDED:2026-01-01T00:00:00.000Z@host"), Some("host"));
        assert_eq!(compat_locked_by(&shedlock_value("me")), Some("me"));
        assert_eq!(compat_locked_by("something else"), None);
    }
}
