//! Lock names to keys: the prefix, then the name with each `:` escaped, base64-encoded on the
//! wire.

use shedlock::{Result, support::check_lock_name};

use crate::{BACKEND, ESCAPED_DELIMITER, KEY_DELIMITER, proto::base64, store::MemcachedStore};

impl MemcachedStore {
    /// The wire key of `name` (already checked): base64 of [`key_bytes`].
    pub(crate) fn encode_key(&self, name: &str) -> String {
        base64(&key_bytes(&self.prefix, name))
    }

    pub(crate) fn key(&self, name: &str) -> Result<String> {
        check_lock_name(BACKEND, name, Some(self.max_name_len), false)?;
        Ok(self.encode_key(name))
    }
}

/// The key of `name` under `prefix` (which is empty or ends with [`KEY_DELIMITER`]), before
/// base64: the prefix, then the name with each `:` as [`ESCAPED_DELIMITER`]. So the key holds no
/// `:` after its prefix, and (prefix, name) pairs map to keys one-to-one.
pub(crate) fn key_bytes(prefix: &[u8], name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + name.len());
    key.extend_from_slice(prefix);
    key.extend(name.bytes().map(|b| if b == KEY_DELIMITER { ESCAPED_DELIMITER } else { b }));
    key
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    #[test]
    fn key_bytes_escape_colons_so_different_prefixes_never_share_a_key() {
        // Names without ':' keep the keys they always had.
        assert_eq!(key_bytes(b"shedlock:", "nightly-report"), b"shedlock:nightly-report");
        assert_eq!(key_bytes(b"", "a b"), b"a b");
        // A ':' of a name is 0xFF, one byte for one byte.
        assert_eq!(key_bytes(b"app:", "a:b"), b"app:a\xffb");
        assert_eq!(key_bytes(b"app:", "ü:").len(), 4 + "ü:".len());
        // The tenants of the issue: `app` + `2x` and `app2` + `x`, and nested ones.
        let prefixes: [&[u8]; 5] = [b"", b"app:", b"app2:", b"app:2:", b"app:2x:"];
        let names = ["x", "2x", "2:x", "2x:", ":", "", "2", "app:2:x", "\u{ff}"];
        let mut seen = std::collections::HashMap::new();
        for p in prefixes {
            for n in names {
                let key = key_bytes(p, n);
                // No ':' after the prefix.
                assert!(!key[p.len()..].contains(&KEY_DELIMITER), "{p:?} {n:?}");
                if let Some(other) = seen.insert(key, (p, n)) {
                    panic!("{p:?} + {n:?} shares a key with {other:?}");
                }
            }
        }
    }
}
