//! Lock names to keys of the bucket and back: an escaping that keeps every name its own key and
//! every key a valid subject token.

use shedlock::support::HexEscape;

/// The escaping of names into keys ([`HexEscape`]).
const KEYS: HexEscape = HexEscape::new(b'=', b"-_/");

/// Maps a lock name to its key in the bucket, one-to-one: ASCII letters, digits, `-`, `_` and
/// `/` stay as they are; every other byte (including `.`, which separates subject tokens, `=`
/// itself, spaces, `*`, `>` and every byte of a non-ASCII character) becomes `=` followed by
/// two upper-case hex digits. Two different names never share a key.
///
/// ```
/// assert_eq!(shedlock_nats::key_for("nightly-report"), "nightly-report");
/// assert_eq!(shedlock_nats::key_for("a.b c"), "a=2Eb=20c");
/// assert_eq!(shedlock_nats::key_for("=2E"), "=3D2E");
/// ```
pub fn key_for(name: &str) -> String {
    KEYS.escape(name)
}

/// The lock name of a key, the inverse of [`key_for`]: `None` for a key that [`key_for`] makes
/// of no name (a key written by other tools, e.g. with a `.` or a lower-case escape).
pub(crate) fn name_for(key: &str) -> Option<String> {
    KEYS.unescape(key)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::MAX_NAME_LEN;

    use super::*;

    #[test]
    fn keys_no_name_maps_to_are_not_names() {
        for key in ["a.b", "=2e", "=2D", "=", "=4", "=FF", "a b"] {
            assert_eq!(name_for(key), None, "{key:?}");
        }
        assert_eq!(name_for("c30_=25/0").as_deref(), Some("c30_%/0"));
    }

    #[test]
    fn keys_are_valid_subject_tokens_and_one_to_one() {
        let names = ["a", "a.b", "a=2Eb", "a b", "*", ">", "..", "ü", "a/b", "a\0", "=", "%2E"];
        let keys: std::collections::HashSet<_> = names.iter().map(|n| key_for(n)).collect();
        assert_eq!(keys.len(), names.len());
        for k in &keys {
            assert!(k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_/=".contains(&b)), "{k}");
        }
        assert_eq!(key_for("ü"), "=C3=BC");
        for n in names {
            assert_eq!(name_for(&key_for(n)).as_deref(), Some(n), "{n:?}");
        }
        assert_eq!(key_for(&"\u{7f}".repeat(MAX_NAME_LEN)).len(), 3 * MAX_NAME_LEN);
    }
}
