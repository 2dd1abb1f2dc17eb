//! Authentication of the provider's session and the ACL of the nodes it creates, and the
//! mapping of ZooKeeper's refusals (`NoAuth`, `AuthFailed`, `InvalidAcl`) to
//! [`shedlock::Error::Setup`] messages that name what is missing.
//!
//! Credentials are kept here and nowhere else: [`Credential`]'s `Debug` and everything this
//! module prints show the scheme and, for `digest`, the user; never the password or the bytes.

use std::fmt;

use zookeeper_client::{Acl, AuthId, Permission};

/// The `digest` scheme: `user:password`, always accepted by the server (a wrong password is just
/// another identity).
const DIGEST: &str = "digest";

/// One set of credentials the session presents when it connects (and again on every
/// reconnection): ZooKeeper's `addauth <scheme> <auth>`.
#[derive(Clone)]
pub(crate) struct Credential {
    scheme: String,
    /// Never printed.
    secret: Vec<u8>,
    /// What `validate` refuses that the bytes no longer show (a digest user with a `:`).
    problem: Option<&'static str>,
}

impl Credential {
    /// `addauth digest user:password`.
    pub(crate) fn digest(user: &str, password: &str) -> Self {
        Self {
            scheme: DIGEST.to_owned(),
            secret: format!("{user}:{password}").into_bytes(),
            problem: user.contains(':').then_some(
                "the digest user must not contain ':' (the server would read the user up to it)",
            ),
        }
    }

    /// `addauth <scheme> <auth>`.
    pub(crate) fn new(scheme: String, secret: Vec<u8>) -> Self {
        Self { scheme, secret, problem: None }
    }

    pub(crate) fn scheme(&self) -> &str {
        &self.scheme
    }

    pub(crate) fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// The digest user: the part of `user:password` before the first `:` (the server reads it
    /// so). `None` for other schemes, or digest bytes without a `:` or not UTF-8.
    fn digest_user(&self) -> Option<&str> {
        if self.scheme != DIGEST {
            return None;
        }
        let at = self.secret.iter().position(|&b| b == b':')?;
        std::str::from_utf8(&self.secret[..at]).ok()
    }

    /// Checks what can be checked before connecting; the message never shows the secret.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if let Some(problem) = self.problem {
            return Err(problem.to_owned());
        }
        let scheme = &self.scheme;
        if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "authentication scheme {scheme:?} is invalid: it must be a non-empty word such \
                 as \"digest\""
            ));
        }
        if scheme == "world" || scheme == "auth" {
            return Err(format!(
                "\"{scheme}\" is an ACL scheme, not an authentication scheme: authenticate with \
                 \"digest\" (digest_auth) or a scheme the server has a provider for"
            ));
        }
        if scheme == DIGEST {
            match self.digest_user() {
                None => {
                    return Err(
                        "digest credentials must be UTF-8 `user:password` (with a ':')".to_owned()
                    );
                }
                Some("") => return Err("the digest user must not be empty".to_owned()),
                Some(_) => {}
            }
        }
        Ok(())
    }
}

impl fmt::Display for Credential {
    /// The scheme and, for `digest`, the user: what an ACL names. Never the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.digest_user() {
            Some(user) => write!(f, "digest user {user:?}"),
            None => write!(f, "{:?} credentials", self.scheme),
        }
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Credential");
        d.field("scheme", &self.scheme);
        if let Some(user) = self.digest_user() {
            d.field("user", &user);
        }
        d.finish_non_exhaustive()
    }
}

/// [`identity`] without credentials.
const UNAUTHENTICATED: &str = "unauthenticated, world:anyone";

/// Who the provider is to the server, for messages: "authenticated as digest user \"app\"" or
/// "unauthenticated, world:anyone".
pub(crate) fn identity(credentials: &[Credential]) -> String {
    if credentials.is_empty() {
        return UNAUTHENTICATED.to_owned();
    }
    let shown: Vec<String> = credentials.iter().map(ToString::to_string).collect();
    format!("authenticated as {}", shown.join(" and "))
}

/// The ACL of every node the provider creates: the root (and any missing ancestor of it), the
/// name nodes, the clock node and the ephemeral lock nodes.
///
/// Unset, the builder picks [`NodeAcl::CreatorAll`] when the provider authenticates
/// ([`digest_auth`](crate::ZooKeeperLockProviderBuilder::digest_auth) or
/// [`auth`](crate::ZooKeeperLockProviderBuilder::auth)) and [`NodeAcl::Open`] when it does not.
/// Nodes that already exist keep their ACL: see the README's "Permissions" section for how to
/// change an existing tree's.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeAcl {
    /// `auth::cdrwa`: every right for the identities the creating session authenticated as, and
    /// none for anyone else. Every instance of the application must then authenticate as that
    /// same identity (a digest ACL names the user and a hash of its password), so that each can
    /// take over the others' expired locks; operators need it too to inspect, list or
    /// force-release. Needs credentials ([`Error::Setup`](shedlock::Error::Setup) from `build()`
    /// without).
    CreatorAll,
    /// `world:anyone:cdrwa`, the only choice of earlier versions: any client that reaches the
    /// ensemble can read, forge or delete a lock, or change the nodes' ACL.
    Open,
    /// These entries, as given (at least one). The provider needs `cdrw` on the nodes it
    /// creates; give `a` (ADMIN) to the identity that should be able to change their ACL later.
    Custom(Vec<AclEntry>),
}

impl NodeAcl {
    /// The ACL to create nodes with, checked against whether the provider authenticates.
    pub(crate) fn resolve(&self, authenticated: bool) -> Result<Vec<Acl>, String> {
        match self {
            Self::Open => Ok(vec![Acl::new(Permission::ALL, AuthId::anyone())]),
            Self::CreatorAll if !authenticated => Err(
                "NodeAcl::CreatorAll needs credentials (digest_auth or auth): ZooKeeper refuses \
                 a creator ACL from an unauthenticated session"
                    .to_owned(),
            ),
            Self::CreatorAll => Ok(vec![Acl::new(Permission::ALL, AuthId::authed())]),
            Self::Custom(entries) if entries.is_empty() => {
                Err("NodeAcl::Custom needs at least one entry".to_owned())
            }
            Self::Custom(entries) => entries
                .iter()
                .map(|e| {
                    let acl = e.to_acl()?;
                    if acl.scheme() == "auth" && !authenticated {
                        return Err(format!(
                            "the ACL entry {e} names the creator (`auth`), which needs \
                             credentials (digest_auth or auth)"
                        ));
                    }
                    Ok(acl)
                })
                .collect(),
        }
    }
}

impl fmt::Display for NodeAcl {
    /// As `zkCli.sh` writes an ACL: `auth::cdrwa`, `world:anyone:cdrwa`, or the entries
    /// separated by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CreatorAll => f.write_str("auth::cdrwa"),
            Self::Open => f.write_str("world:anyone:cdrwa"),
            Self::Custom(entries) => {
                for (i, e) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
        }
    }
}

/// One entry of a [`NodeAcl::Custom`] list, as `zkCli.sh`'s `setAcl` takes it:
/// `scheme:id:perms`, where `perms` is a set of the letters `c` (create children), `d` (delete
/// children), `r` (read data, list children), `w` (write data) and `a` (change the ACL).
///
/// ```
/// use shedlock_zookeeper::{AclEntry, NodeAcl};
/// // Every right for the provider's own identity, read-only for a monitoring user.
/// let acl = NodeAcl::Custom(vec![
///     AclEntry::creator("cdrwa"),
///     AclEntry::new("digest", "monitor:BASE64-SHA1-OF-monitor:password=", "r"),
/// ]);
/// assert_eq!(acl.to_string(), "auth::cdrwa,digest:monitor:BASE64-SHA1-OF-monitor:password=:r");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclEntry {
    scheme: String,
    id: String,
    perms: String,
}

impl AclEntry {
    /// An entry for identity `id` of `scheme` (for `digest`, `id` is
    /// `user:base64(sha1("user:password"))`, what ZooKeeper's `DigestAuthenticationProvider`
    /// prints; for `ip`, an address or `address/bits`).
    pub fn new(scheme: impl Into<String>, id: impl Into<String>, perms: impl Into<String>) -> Self {
        Self { scheme: scheme.into(), id: id.into(), perms: perms.into() }
    }

    /// `auth::perms`: the identities of the session that creates the node (the provider's).
    pub fn creator(perms: impl Into<String>) -> Self {
        Self::new("auth", "", perms)
    }

    /// `world:anyone:perms`: any client.
    pub fn anyone(perms: impl Into<String>) -> Self {
        Self::new("world", "anyone", perms)
    }

    fn to_acl(&self) -> Result<Acl, String> {
        if self.scheme.is_empty() {
            return Err(format!("the ACL entry {self} has no scheme"));
        }
        let mut perm = Permission::NONE;
        for c in self.perms.chars() {
            perm = perm
                | match c {
                    'c' => Permission::CREATE,
                    'd' => Permission::DELETE,
                    'r' => Permission::READ,
                    'w' => Permission::WRITE,
                    'a' => Permission::ADMIN,
                    _ => {
                        return Err(format!(
                            "the ACL entry {self} has permission {c:?}: use the letters c, d, r, \
                             w and a"
                        ));
                    }
                };
        }
        if perm == Permission::NONE {
            return Err(format!("the ACL entry {self} grants nothing"));
        }
        Ok(Acl::new(perm, AuthId::new(&self.scheme, &self.id)))
    }
}

impl fmt::Display for AclEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.scheme, self.id, self.perms)
    }
}

/// A request the provider sends, for saying what a refusal means.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op<'a> {
    /// Open the session, presenting the credentials.
    Authenticate,
    /// A request the session sent, when the answer is about the session rather than a node.
    Request,
    /// `create` of this node: CREATE on its parent.
    Create(&'a str),
    /// `create` of this path and any missing ancestor (mkdir -p): CREATE on the parent of the
    /// first missing one.
    CreatePath(&'a str),
    /// `setData`: WRITE on the node.
    SetData(&'a str),
    /// `delete`: DELETE on its parent.
    Delete(&'a str),
    /// `getData`: READ on the node.
    Read(&'a str),
    /// `getChildren`: READ on the node.
    List(&'a str),
    /// A version `check` in a transaction: READ on the node.
    Check(&'a str),
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

impl Op<'_> {
    /// What was asked, the right it needs and the node that must grant it.
    fn needs(self) -> (String, &'static str, String) {
        match self {
            Op::Authenticate => ("open a session".to_owned(), "", String::new()),
            Op::Request => ("answer a request".to_owned(), "", String::new()),
            Op::Create(p) => (format!("create {p}"), "CREATE", parent(p).to_owned()),
            Op::CreatePath(p) => (
                format!("create {p}"),
                "CREATE",
                format!("{} (or on the parent of its first missing ancestor)", parent(p)),
            ),
            Op::SetData(p) => (format!("write {p}"), "WRITE", p.to_owned()),
            Op::Delete(p) => (format!("delete {p}"), "DELETE", parent(p).to_owned()),
            Op::Read(p) => (format!("read {p}"), "READ", p.to_owned()),
            Op::List(p) => (format!("list the children of {p}"), "READ", p.to_owned()),
            Op::Check(p) => (format!("check the version of {p}"), "READ", p.to_owned()),
        }
    }
}

/// The message of [`shedlock::Error::Setup`] for a refusal of `op` by the server (`None` for
/// errors that are not about permissions). `identity` is [`identity`]'s; `acl` what the
/// provider creates nodes with.
pub(crate) fn refusal(
    op: Op<'_>,
    e: &zookeeper_client::Error,
    identity: &str,
    acl: &NodeAcl,
) -> Option<String> {
    use zookeeper_client::Error as Z;
    let (what, right, on) = op.needs();
    Some(match e {
        Z::NoAuth => format!(
            "ZooKeeper refused to {what}: no permission (NoAuth): the provider ({identity}) \
             lacks {right} on {on}. Every instance must authenticate as an identity the lock \
             tree's ACL grants `cdrw` (a tree the provider created with `auth::cdrwa` grants it \
             to the identity that created it only; a digest identity is the user and its \
             password, so the same user with another password is another identity): see the \
             README's \"Permissions\" section"
        ),
        Z::AuthFailed if identity == UNAUTHENTICATED => format!(
            "ZooKeeper requires authentication: it closed the provider's unauthenticated session \
             when asked to {what} (AuthFailed: the server enforces authentication, \
             enforce.auth.enabled): authenticate with digest_auth(user, password), or \
             auth(scheme, bytes) for the scheme the server enforces (see the README's \
             \"Authentication\" section)"
        ),
        Z::AuthFailed => format!(
            "ZooKeeper refused to {what}: it rejected the session's credentials (AuthFailed); the \
             provider is {identity}: the server has no authentication provider for one of these \
             schemes, enforces authentication with another scheme (enforce.auth.schemes), or \
             rejected the credentials (digest credentials are always accepted)"
        ),
        Z::InvalidAcl => format!(
            "ZooKeeper refused the ACL {acl} (InvalidAcl) when asked to {what} (the provider is \
             {identity}): a creator (`auth`) entry needs an authenticated session, a `digest` id \
             must be `user:base64(sha1(user:password))`, an `ip` id an address"
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn credentials_show_the_scheme_and_user_and_never_the_secret() {
        let c = Credential::digest("app", "s3cret-zk-unit");
        assert_eq!(c.to_string(), "digest user \"app\"");
        assert!(!format!("{c:?}").contains("s3cret"), "{c:?}");
        assert!(format!("{c:?}").contains("app"));
        let raw = Credential::new("digest".into(), b"app:pw:with:colons".to_vec());
        assert_eq!(raw.to_string(), "digest user \"app\"");
        let other = Credential::new("x509".into(), b"s3cret-zk-unit".to_vec());
        assert_eq!(other.to_string(), "\"x509\" credentials");
        assert!(!format!("{other:?}").contains("s3cret"));
        assert_eq!(
            identity(&[c, other]),
            "authenticated as digest user \"app\" and \"x509\" credentials"
        );
        assert_eq!(identity(&[]), "unauthenticated, world:anyone");
    }

    #[test]
    fn invalid_credentials_are_refused_without_showing_them() {
        for c in [
            Credential::new(String::new(), b"a:b".to_vec()),
            Credential::new("di gest".into(), b"a:b".to_vec()),
            Credential::new("world".into(), b"anyone".to_vec()),
            Credential::new("digest".into(), b"s3cret-no-colon".to_vec()),
            Credential::digest("", "s3cret"),
            Credential::digest("a:b", "s3cret"),
        ] {
            let e = c.validate().unwrap_err();
            assert!(!e.contains("s3cret"), "{e}");
        }
        Credential::digest("app", "").validate().unwrap();
    }

    #[test]
    fn node_acls_resolve_to_the_entries_zkcli_would_write() {
        assert!(NodeAcl::CreatorAll.resolve(false).is_err());
        assert_eq!(NodeAcl::CreatorAll.resolve(true).unwrap()[0].scheme(), "auth");
        assert_eq!(NodeAcl::Open.resolve(false).unwrap()[0].id(), "anyone");
        let custom = NodeAcl::Custom(vec![AclEntry::creator("cdrwa"), AclEntry::anyone("r")]);
        assert!(custom.resolve(false).is_err(), "a creator entry needs credentials");
        let acls = custom.resolve(true).unwrap();
        assert_eq!(acls[0].permission(), Permission::ALL);
        assert_eq!(acls[1].permission(), Permission::READ);
        assert_eq!(custom.to_string(), "auth::cdrwa,world:anyone:r");
        for bad in [
            NodeAcl::Custom(vec![]),
            NodeAcl::Custom(vec![AclEntry::anyone("")]),
            NodeAcl::Custom(vec![AclEntry::anyone("rx")]),
            NodeAcl::Custom(vec![AclEntry::new("", "x", "r")]),
        ] {
            assert!(bad.resolve(true).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_refusal_names_the_request_the_right_and_the_node_that_must_grant_it() {
        let m = refusal(
            Op::Create("/root/x"),
            &zookeeper_client::Error::NoAuth,
            "authenticated as digest user \"b\"",
            &NodeAcl::CreatorAll,
        )
        .unwrap();
        assert!(
            m.starts_with("ZooKeeper refused to create /root/x: no permission (NoAuth)"),
            "{m}"
        );
        assert!(m.contains("lacks CREATE on /root."), "{m}");
        let m = refusal(
            Op::Delete("/root/x/lock"),
            &zookeeper_client::Error::NoAuth,
            "",
            &NodeAcl::Open,
        )
        .unwrap();
        assert!(m.contains("lacks DELETE on /root/x."), "{m}");
        assert!(
            refusal(Op::Read("/a"), &zookeeper_client::Error::NoNode, "", &NodeAcl::Open).is_none()
        );
    }
}
