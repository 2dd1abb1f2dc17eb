//! [`Security`]: how a suite's instances reach their backend when it runs in production posture
//! (authentication, TLS, least privilege), as its factory declares it
//! ([`ProviderFactory::security`](crate::ProviderFactory::security)) and its report states it.

/// The posture a suite ran in: the user its instances log in as, exactly the grants that user
/// holds, and the TLS they connect with. The report's header states all three; the kit also
/// fails a run whose report would contain one of the [`secret`](Self::secret)s (a password, a
/// token, a key), and writes no report then.
///
/// ```
/// use shedlock_conformance::Security;
/// let s = Security::new("shedlock_app", "TLS 1.3, server certificate verified against a private CA")
///     .grant("SELECT, INSERT, UPDATE, DELETE ON shedlock")
///     .secret("s3cret-pw");
/// assert!(!format!("{s:?}").contains("s3cret-pw"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Security {
    user: String,
    grants: Vec<String>,
    tls: String,
    secrets: Vec<String>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("user", &self.user)
            .field("grants", &self.grants)
            .field("tls", &self.tls)
            .field("secrets", &format_args!("[{} hidden]", self.secrets.len()))
            .finish()
    }
}

impl Security {
    /// Instances log in as `user` and connect with `tls` (e.g. `TLS 1.3, server certificate
    /// verified against a private CA`).
    pub fn new(user: impl Into<String>, tls: impl Into<String>) -> Self {
        Security { user: user.into(), grants: Vec::new(), tls: tls.into(), secrets: Vec::new() }
    }

    /// One grant the user holds, as the backend's own language says it (a SQL `GRANT`, an ACL
    /// rule, a role permission). List every one: the report claims these are all.
    pub fn grant(mut self, grant: impl Into<String>) -> Self {
        self.grants.push(grant.into());
        self
    }

    /// A secret the instances use, never shown: the kit fails the run if a report would
    /// contain it.
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        let s = secret.into();
        if !s.is_empty() {
            self.secrets.push(s);
        }
        self
    }

    /// The user.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The grants, in the order given.
    pub fn grants(&self) -> &[String] {
        &self.grants
    }

    /// The TLS the instances connect with.
    pub fn tls(&self) -> &str {
        &self.tls
    }

    /// The first secret that `text` contains, if any (for the report check).
    pub(crate) fn leaked_in(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_found_wherever_it_appears_and_never_shown() {
        let s = Security::new("u", "TLS 1.3").grant("g").secret("s3cret-x").secret("");
        assert!(s.leaked_in("error: password s3cret-x refused"));
        assert!(!s.leaked_in("error: password *** refused"));
        assert!(!format!("{s:?}").contains("s3cret-x"));
        assert_eq!(s.grants(), ["g"]);
    }
}
