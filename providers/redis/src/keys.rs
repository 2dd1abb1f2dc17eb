//! Lock names to keys and back: the escaping that keeps every name its own key and the braces
//! its hash tag, and the `SCAN` patterns of `list`.

use crate::{RedisConnection, store::RedisStore};

impl<C: RedisConnection> RedisStore<C> {
    pub(crate) fn key(&self, name: &str) -> String {
        if self.compat {
            format!("{}{name}", self.prefix)
        } else {
            format!("{}{{{}}}", self.prefix, escape(name))
        }
    }

    pub(crate) fn fence_key(&self, name: &str) -> String {
        format!("{}:fence", self.key(name))
    }

    /// The lock name a key holds, if it is a lock key of this provider.
    pub(crate) fn name_of(&self, key: &str) -> Option<String> {
        let rest = key.strip_prefix(&self.prefix)?;
        if self.compat {
            return Some(rest.to_owned());
        }
        unescape(rest.strip_prefix('{')?.strip_suffix('}')?)
    }

    /// The `SCAN` pattern of the lock keys whose names start with `prefix`.
    pub(crate) fn pattern(&self, prefix: &str) -> String {
        let start = if self.compat {
            format!("{}{prefix}", self.prefix)
        } else {
            format!("{}{{{}", self.prefix, escape(prefix))
        };
        glob_escape(&start) + "*"
    }
}

/// `%`, `{` and `}` percent-encoded: injective, and leaves no brace in the name.
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    out
}
/// The inverse of [`escape`]; `None` for text [`escape`] cannot have produced.
fn unescape(escaped: &str) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let c = match rest.get(i..i + 3)? {
            "%25" => '%',
            "%7B" => '{',
            "%7D" => '}',
            _ => return None,
        };
        out.push(c);
        rest = &rest[i + 3..];
    }
    if rest.contains(['{', '}']) {
        return None;
    }
    out.push_str(rest);
    Some(out)
}

/// `*`, `?`, `[`, `]` and `\` escaped for a `SCAN … MATCH` pattern: the text matches itself.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_is_injective_and_leaves_no_braces() {
        let names = ["a", "{a}", "%7Ba%7D", "a%", "}", "{", "%", "%25", "a}b{c"];
        let escaped: Vec<String> = names.iter().map(|n| escape(n)).collect();
        for (i, e) in escaped.iter().enumerate() {
            assert!(!e.contains('{') && !e.contains('}'), "{e}");
            for (j, f) in escaped.iter().enumerate() {
                assert_eq!(i == j, e == f, "{} and {} collide", names[i], names[j]);
            }
        }
        assert_eq!(escape("{a}%"), "%7Ba%7D%25");
    }

    #[test]
    fn unescape_inverts_escape_and_refuses_what_escape_cannot_produce() {
        for name in ["a", "{a}", "%7Ba%7D", "a%", "}", "{", "%", "%25", "a}b{c", "π%_*"] {
            assert_eq!(unescape(&escape(name)).as_deref(), Some(name));
        }
        for foreign in ["%", "%2", "%41", "a{b", "}", "%7b"] {
            assert_eq!(unescape(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn a_scan_pattern_matches_its_text_literally() {
        assert_eq!(glob_escape(r"a*b?c[d]e\f%_"), r"a\*b\?c\[d\]e\\f%_");
    }
}
