//! Lock names as znode names (escaped one-to-one, and back), and the paths of a name's nodes.

use shedlock::support::HexEscape;

use crate::session::Inner;

/// The longest lock name, in bytes. An escaped name is at most three times as long (see
/// [`key_for`]).
pub const MAX_NAME_LEN: usize = 1024;

/// The child of a name node that is the lock.
const LOCK_CHILD: &str = "lock";

/// The child of the root whose `mtime` is the leader's now. Escaped names never start with `.`.
pub(crate) const CLOCK_CHILD: &str = ".clock";

/// The escaping of names into keys ([`HexEscape`]).
const KEYS: HexEscape = HexEscape::new(b'%', b"-_");

/// Maps a lock name to its znode name under the root, one-to-one: ASCII letters, digits, `-`
/// and `_` stay as they are; every other byte (`/`, `.`, `%`, spaces, control bytes and each byte
/// of a non-ASCII character) becomes `%` followed by two upper-case hex digits. So every name is
/// a valid znode name (never `.`, `..` or `zookeeper`, never containing `/`), and two names never
/// share a node.
///
/// ```
/// assert_eq!(shedlock_zookeeper::key_for("nightly-report"), "nightly-report");
/// assert_eq!(shedlock_zookeeper::key_for("a/b.c"), "a%2Fb%2Ec");
/// assert_eq!(shedlock_zookeeper::key_for("%"), "%25");
/// ```
pub fn key_for(name: &str) -> String {
    KEYS.escape(name)
}

/// The lock name of a znode name under the root, the inverse of [`key_for`]: `None` for a node
/// that [`key_for`] makes of no name (the clock node, nodes other tools created).
pub(crate) fn name_for(key: &str) -> Option<String> {
    KEYS.unescape(key)
}

/// The paths of one lock name.
#[derive(Clone)]
pub(crate) struct Paths {
    pub(crate) name: String,
    pub(crate) lock: String,
}

impl Inner {
    pub(crate) fn paths(&self, name: &str) -> Paths {
        let node = format!("{}/{}", self.root, key_for(name));
        Paths { lock: format!("{node}/{LOCK_CHILD}"), name: node }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_are_valid_znode_names_and_one_to_one() {
        let names =
            ["a", "a.b", "a%2Eb", "a b", "/", "..", ".", "ü", "a/b", "a\0", "%", "zookeeper"];
        let keys: std::collections::HashSet<_> = names.iter().map(|n| key_for(n)).collect();
        assert_eq!(keys.len(), names.len());
        for k in &keys {
            assert!(k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_%".contains(&b)), "{k}");
            assert!(!k.starts_with('.'));
        }
        assert_eq!(key_for("ü"), "%C3%BC");
        assert_eq!(key_for(&"\u{7f}".repeat(MAX_NAME_LEN)).len(), 3 * MAX_NAME_LEN);
    }

    #[test]
    fn node_names_decode_to_the_names_they_were_made_of_and_others_to_none() {
        for n in ["a", "a.b", "a%2Eb", "a b", "/", "..", "ü", "c30_%/0", "%"] {
            assert_eq!(name_for(&key_for(n)).as_deref(), Some(n), "{n:?}");
        }
        for key in [".clock", "%2e", "%2D", "%", "%4", "a.b", "%FF"] {
            assert_eq!(name_for(key), None, "{key:?}");
        }
    }
}
