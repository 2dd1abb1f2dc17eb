//! The secrets this run was given, so that nothing the tool prints can contain one: every error
//! (the tool's, a client library's, the argument parser's) goes through [`Secrets::redact`]
//! before it is written.
//!
//! A secret is: `SHEDLOCK_PASSWORD`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, and in every
//! URL found in the arguments or `SHEDLOCK_URL` the password of its user information (as
//! written and percent-decoded), a NATS token (`nats://TOKEN@HOST`), and the value of a query
//! parameter whose name says it is one (`password`, `token`, `secret`, …).

/// The environment variables whose values are secrets in themselves.
const SECRET_VARS: [&str; 3] = ["SHEDLOCK_PASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"];

/// What replaces a secret.
pub(crate) const MASK: &str = "***";

/// The secrets of one run (see the module's docs), longest first.
#[derive(Default)]
pub(crate) struct Secrets(Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} hidden)", self.0.len())
    }
}

impl Secrets {
    /// The secrets in this process's arguments and environment.
    pub(crate) fn of_this_process() -> Secrets {
        let var = |k: &str| std::env::var(k).ok();
        let mut texts: Vec<String> = std::env::args().collect();
        texts.extend(var("SHEDLOCK_URL"));
        let mut s = Secrets::default();
        for text in &texts {
            s.add_url_secrets(text);
        }
        for k in SECRET_VARS {
            if let Some(v) = var(k) {
                s.add(&v);
            }
        }
        s
    }

    /// Adds `secret` (nothing if it is empty or blank).
    pub(crate) fn add(&mut self, secret: &str) {
        if secret.trim().is_empty() || self.0.iter().any(|s| s == secret) {
            return;
        }
        self.0.push(secret.to_owned());
        // Longest first: a secret that contains another is masked whole.
        self.0.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// Adds the secrets of every URL in `text` (an argument, `--url=…`, or a comma-separated
    /// list of URLs).
    pub(crate) fn add_url_secrets(&mut self, text: &str) {
        for part in text.split(',') {
            let Some((scheme, rest)) = part.split_once("://") else {
                // A later host of a list (`nats://u:p@h1,h2`) has no scheme of its own.
                continue;
            };
            let scheme = scheme.rsplit('=').next().unwrap_or(scheme).to_ascii_lowercase();
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            if let Some((userinfo, _)) = rest[..end].rsplit_once('@') {
                match userinfo.split_once(':') {
                    Some((_, password)) => self.add_both(password),
                    // A NATS URL's lone user information is a token.
                    None if scheme.ends_with("nats") || scheme.ends_with("tls") => {
                        self.add_both(userinfo);
                    }
                    None => {}
                }
            }
            if let Some((_, query)) = rest.split_once('?') {
                for pair in query.split(['&', ';']) {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    let key = key.to_ascii_lowercase();
                    if ["password", "pass", "pwd", "token", "secret", "credential"]
                        .iter()
                        .any(|k| key.contains(k))
                    {
                        self.add_both(value);
                    }
                }
            }
        }
    }

    /// Adds `raw` as written and percent-decoded.
    fn add_both(&mut self, raw: &str) {
        self.add(raw);
        self.add(&percent_decode(raw));
    }

    /// `text` with every secret replaced by [`MASK`].
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.0 {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), MASK);
            }
        }
        out
    }
}

/// `%XX` sequences decoded (invalid ones and invalid UTF-8 kept as they are).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(texts: &[&str]) -> Secrets {
        let mut s = Secrets::default();
        for t in texts {
            s.add_url_secrets(t);
        }
        s
    }

    #[test]
    fn url_passwords_are_found_as_written_and_decoded() {
        let s = of(&["--url=postgres://ops:p%40ss-1@db:5432/app?sslmode=verify-full"]);
        let shown = s.redact("login p%40ss-1 / p@ss-1 failed for ops at db:5432");
        assert_eq!(shown, "login *** / *** failed for ops at db:5432");
    }

    #[test]
    fn a_nats_token_and_secret_query_parameters_are_secrets() {
        let s = of(&[
            "nats://tok-123@h1:4222,h2:4222",
            "mongodb://h/db?authSource=admin&tlsCertificateKeyFilePassword=kp-9",
        ]);
        assert_eq!(s.redact("tok-123 kp-9 admin h1"), "*** *** admin h1");
        // A user without a password is not a secret elsewhere.
        assert_eq!(of(&["postgres://ops@db/app"]).redact("user ops"), "user ops");
    }

    #[test]
    fn the_longest_secret_is_masked_first() {
        let mut s = Secrets::default();
        s.add("abc");
        s.add("abcdef");
        s.add(" ");
        assert_eq!(s.redact("x abcdef y abc"), "x *** y ***");
        assert_eq!(format!("{s:?}"), "Secrets(2 hidden)");
    }

    #[test]
    fn percent_decoding_keeps_what_it_cannot_decode() {
        assert_eq!(percent_decode("a%2Fb%zz%4"), "a/b%zz%4");
        assert_eq!(percent_decode("%ff"), "%ff");
    }
}
