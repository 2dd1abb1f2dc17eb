//! The key layout: lock `N` under prefix `P` is the key `P/` followed by `N` with `%` and `/`
//! escaped (`%25`, `%2F`).
//!
//! The prefix always ends with `/` (one is added when it does not) and an escaped name never
//! contains `/`, so the last `/` of a key separates the prefix from the name: two providers with
//! different prefixes never address the same key, whatever their names. Without this, prefix `a`
//! with name `bx` and prefix `ab` with name `x` were the same key, and so were prefix `a/` with
//! name `b/x` and prefix `a/b/` with name `x`.

use crate::BACKEND;
use shedlock::{Error, Result};

/// The longest key prefix accepted, in bytes (before the `/` that may be added).
pub const MAX_PREFIX_LEN: usize = 1024;

/// The longest lock name accepted, in bytes (names are keys; etcd allows far more, but a name
/// this long is a bug, not a job).
pub const MAX_NAME_LEN: usize = 4096;

/// The prefix as keys use it: checked, and ending with `/`.
pub(crate) fn normalize_prefix(prefix: &str) -> Result<String> {
    check_prefix(prefix)?;
    let mut p = prefix.to_owned();
    if !p.ends_with('/') {
        p.push('/');
    }
    Ok(p)
}

fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(Error::setup(
            BACKEND,
            "the key prefix is empty: locks would live among the cluster's other keys; use e.g. \
             \"shedlock/\"",
        ));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::setup(
            BACKEND,
            format!(
                "the key prefix is {} bytes long; at most {MAX_PREFIX_LEN} are allowed",
                prefix.len()
            ),
        ));
    }
    if let Some(c) = prefix.chars().find(|c| c.is_control()) {
        return Err(Error::setup(
            BACKEND,
            format!("the key prefix {prefix:?} contains the control character {c:?}"),
        ));
    }
    Ok(())
}

/// `name` as it follows the prefix in a key: `%` → `%25`, `/` → `%2F`, every other byte as is.
/// Escaping a name's prefix gives a prefix of the escaped name, so a name prefix is a key range.
pub(crate) fn escape(name: &str, out: &mut Vec<u8>) {
    for b in name.bytes() {
        match b {
            b'%' => out.extend_from_slice(b"%25"),
            b'/' => out.extend_from_slice(b"%2F"),
            _ => out.push(b),
        }
    }
}

/// The name a key's part after the prefix stands for; `None` when it is not an escaped name
/// (a `/`, a `%` not followed by `25` or `2F`, or not UTF-8).
pub(crate) fn unescape(escaped: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(escaped.len());
    let mut i = 0;
    while i < escaped.len() {
        match escaped[i] {
            b'%' => {
                match escaped.get(i + 1..i + 3)? {
                    b"25" => out.push(b'%'),
                    b"2F" => out.push(b'/'),
                    _ => return None,
                }
                i += 3;
            }
            b'/' => return None,
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The first key after every key that starts with `prefix` (etcd's prefix range end): `prefix`
/// with its last byte below 0xFF incremented and the rest cut; `[0]` (no end) when every byte is
/// 0xFF.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|b| *b < 0xFF) {
        Some(i) => {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

/// What a key found under the prefix is, for `list`.
pub(crate) enum Found {
    /// A lock's key: its name.
    Lock(String),
    /// A key of a longer prefix that starts with this one (`<prefix>sub/…`): every key before
    /// this range end belongs to it.
    Nested(Vec<u8>),
}

/// Reads `key`, found under `prefix` (which ends with `/`).
pub(crate) fn parse(prefix: &[u8], key: &[u8]) -> Result<Found> {
    let rest = key.strip_prefix(prefix).unwrap_or_default();
    if let Some(i) = rest.iter().position(|b| *b == b'/') {
        return Ok(Found::Nested(prefix_end(&key[..prefix.len() + i + 1])));
    }
    unescape(rest).map(Found::Lock).ok_or_else(|| {
        Error::backend(
            crate::BACKEND,
            format!(
                "the key {:?} under the prefix is not a lock's (not an escaped UTF-8 name)",
                String::from_utf8_lossy(key)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn key(prefix: &str, name: &str) -> Vec<u8> {
        let mut k = normalize_prefix(prefix).unwrap().into_bytes();
        escape(name, &mut k);
        k
    }

    #[test]
    fn prefixes_are_checked_and_end_with_a_slash() {
        assert_eq!(normalize_prefix("shedlock/").unwrap(), "shedlock/");
        assert_eq!(normalize_prefix("app/prod/").unwrap(), "app/prod/");
        assert_eq!(normalize_prefix("app").unwrap(), "app/");
        for bad in [String::new(), "a\nb".to_owned(), "x".repeat(MAX_PREFIX_LEN + 1)] {
            assert!(matches!(normalize_prefix(&bad), Err(Error::Setup { .. })), "{bad:?}");
        }
    }

    #[test]
    fn no_two_prefix_and_name_pairs_share_a_key() {
        assert_ne!(key("a", "bx"), key("ab", "x"));
        assert_ne!(key("app", "2x"), key("app2", "x"));
        assert_ne!(key("a/", "b/x"), key("a/b/", "x"));
        assert_ne!(key("a", "b%2Fx"), key("a", "b/x"));
        assert_eq!(key("a", "b/x"), b"a/b%2Fx");
        assert_eq!(key("a", "50%"), b"a/50%25");
        assert_eq!(key("a", "plain-name"), b"a/plain-name");
    }

    #[test]
    fn escaping_round_trips_and_keeps_name_prefixes_as_key_prefixes() {
        for name in ["", "x", "a/b/c", "%", "%2F", "/%/", "ünï/cødé", "a\0b"] {
            let mut e = Vec::new();
            escape(name, &mut e);
            assert!(!e.contains(&b'/'), "{name:?}");
            assert_eq!(unescape(&e).as_deref(), Some(name));
            let mut longer = Vec::new();
            escape(&format!("{name}/tail%"), &mut longer);
            assert!(longer.starts_with(&e));
        }
        for bad in [&b"a/b"[..], b"%", b"%2", b"%2f", b"%41", b"\xff"] {
            assert_eq!(unescape(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_key_of_a_nested_prefix_is_skipped_as_a_whole() {
        match parse(b"a/", b"a/b/x").unwrap() {
            Found::Nested(end) => assert_eq!(end, b"a/b0"),
            Found::Lock(n) => panic!("{n}"),
        }
        match parse(b"a/", b"a/b%2Fx").unwrap() {
            Found::Lock(n) => assert_eq!(n, "b/x"),
            Found::Nested(_) => panic!("nested"),
        }
        assert!(matches!(parse(b"a/", b"a/%zz"), Err(Error::Backend { .. })));
    }

    #[test]
    fn a_prefix_range_ends_after_every_key_that_starts_with_it() {
        assert_eq!(prefix_end(b"shedlock/a"), b"shedlock/b");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), [0]);
    }
}
