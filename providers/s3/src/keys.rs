//! Object keys: the prefix, and the one-to-one escaping of lock names into key suffixes.

use shedlock::support::HexEscape;

use shedlock::{Error, Result};

use crate::{BACKEND, store::S3Store};

/// The longest key prefix, in bytes, its final `/` included.
pub const MAX_PREFIX_LEN: usize = 255;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "shedlock/";

/// The escaping of names into keys ([`HexEscape`]).
const KEYS: HexEscape = HexEscape::new(b'=', b"-_");

/// Maps a lock name to its object key suffix, one-to-one: ASCII letters, digits, `-` and `_`
/// stay as they are; every other byte (`/`, `.`, `=`, spaces, control bytes and each byte of a
/// non-ASCII character) becomes `=` and two upper-case hex digits, so no key has path segments
/// such as `..` that an HTTP stack might rewrite.
///
/// ```
/// assert_eq!(shedlock_s3::key_for("nightly-report"), "nightly-report");
/// assert_eq!(shedlock_s3::key_for("a/../b"), "a=2F=2E=2E=2Fb");
/// ```
pub fn key_for(name: &str) -> String {
    KEYS.escape(name)
}

/// The lock name an object key suffix stands for: the inverse of [`key_for`]. `None` for a
/// suffix [`key_for`] never makes (another character, a bad or lower-case escape, or bytes that
/// are not UTF-8).
///
/// ```
/// assert_eq!(shedlock_s3::name_for("a=2F=2E=2E=2Fb").as_deref(), Some("a/../b"));
/// assert_eq!(shedlock_s3::name_for("a/b"), None);
/// ```
pub fn name_for(key: &str) -> Option<String> {
    KEYS.unescape(key)
}

/// `prefix`, ending with `/` or `.` (characters [`key_for`] never produces): as it is when it
/// does (or is empty), else with a `/` appended.
pub(crate) fn delimited(mut prefix: String) -> String {
    if !prefix.is_empty() && !prefix.ends_with(PREFIX_ENDS) {
        prefix.push('/');
    }
    prefix
}

/// The characters a non-empty prefix ends with, and that [`key_for`] never produces: a key
/// holds none of them after its prefix.
pub(crate) const PREFIX_ENDS: [char; 2] = ['/', '.'];

impl S3Store {
    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}{}", self.prefix, key_for(name))
    }

    /// The name a key of this store stands for (`<prefix><key_for(name)>`).
    pub(crate) fn name_of(&self, key: &str) -> Result<String> {
        key.strip_prefix(self.prefix.as_str()).and_then(name_for).ok_or_else(|| {
            Error::backend(
                BACKEND,
                format!(
                    "the object {key:?} in bucket {:?} is not a lock object of this provider \
                     (its key is not the prefix and an escaped lock name); delete it or use \
                     another prefix",
                    self.bucket
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    use std::collections::HashMap;

    use crate::{MAX_NAME_LEN, error::tests::inner};

    #[test]
    fn keys_are_one_to_one_and_path_safe() {
        let names = ["a", "a/b", "a=2Fb", "..", ".", "a b", "ü", "a\0", "=", "%2F", "A"];
        let keys: std::collections::HashSet<_> = names.iter().map(|n| key_for(n)).collect();
        assert_eq!(keys.len(), names.len());
        for k in &keys {
            assert!(k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=".contains(&b)), "{k}");
        }
        // The longest name, all escaped, under the longest prefix, fits S3's 1 024-byte keys.
        assert!(MAX_PREFIX_LEN + key_for(&"\u{7f}".repeat(MAX_NAME_LEN)).len() <= 1024);
    }

    #[test]
    fn keys_map_back_to_their_names_and_no_other_key_does() {
        for name in ["a", "a/b", "a=2Fb", "..", "a b", "ü", "a\0", "=", "%2F", "", "\u{1f512}"] {
            assert_eq!(name_for(&key_for(name)).as_deref(), Some(name), "{name:?}");
        }
        // Not made by key_for: other characters, lower-case or cut escapes, an escaped byte
        // that key_for keeps as it is, bytes that are not UTF-8.
        for key in ["a/b", "a.b", "a=2f", "a=2", "a=", "=41", "=2D", "=FF", "=C3"] {
            assert_eq!(name_for(key), None, "{key:?}");
        }
    }

    #[test]
    fn prefixes_are_delimited_so_tenants_never_share_a_key() {
        assert_eq!(delimited("app".into()), "app/");
        assert_eq!(delimited("app/".into()), "app/");
        assert_eq!(delimited("locks.".into()), "locks.");
        assert_eq!(delimited("a/b-".into()), "a/b-/");
        assert_eq!(delimited(String::new()), "");
        assert_eq!(delimited(DEFAULT_PREFIX.into()), DEFAULT_PREFIX);
        let store = |prefix: &str| S3Store { prefix: delimited(prefix.into()), ..inner() };
        // The tenants of the issue: `app` + `2x` was `app2` + `x`.
        assert_eq!(store("app").key("2x"), "app/2x");
        assert_eq!(store("app2").key("x"), "app2/x");
        // Every pair of prefix and name, nested prefixes included, is a key of its own, and no
        // key holds a delimiter after its prefix.
        let prefixes = ["", "app", "app2", "app/2", "app/2x", "app.", "app.2.", "app2x"];
        let names = ["x", "2x", "2/x", "2.x", "/", ".", "", "2", "app/2x", "=2F"];
        let mut seen = HashMap::new();
        for p in prefixes {
            let s = store(p);
            for n in names {
                let key = s.key(n);
                assert!(!key[s.prefix.len()..].contains(PREFIX_ENDS), "{p:?} {n:?}");
                if let Some(other) = seen.insert(key.clone(), (s.prefix.clone(), n)) {
                    panic!("{p:?} + {n:?} and {other:?} share {key:?}");
                }
            }
        }
    }
}
