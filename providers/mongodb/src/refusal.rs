//! Refused logins and commands: which command, which privilege actions it needs, and what to
//! change.

use shedlock::Error;

use crate::BACKEND;

/// A command the provider sends: what a refusal of it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmd {
    /// The acquire: `findAndModify` with `upsert`.
    FindAndModify,
    /// `update` (extend, an unlock within `lock_at_least_for`, `check`).
    Update,
    /// `delete` (unlock, `force_release`, `check`).
    Delete,
    /// `aggregate` (inspect, list, force_release's read).
    Aggregate,
    /// `find` (`check`).
    Find,
    /// `create` (`create_collection`).
    Create,
}

impl Cmd {
    /// The command's name on the wire.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Cmd::FindAndModify => "findAndModify",
            Cmd::Update => "update",
            Cmd::Delete => "delete",
            Cmd::Aggregate => "aggregate",
            Cmd::Find => "find",
            Cmd::Create => "create",
        }
    }

    /// The privilege actions MongoDB asks for it on the collection.
    pub(crate) fn actions(self) -> &'static str {
        match self {
            Cmd::FindAndModify => "find, insert, update",
            Cmd::Update => "update",
            Cmd::Delete => "remove",
            Cmd::Aggregate | Cmd::Find => "find",
            Cmd::Create => "createCollection",
        }
    }
}

/// The action a refusal names, where the server names one (SecantusDB: `… (action: update)`;
/// MongoDB names the command instead).
pub(crate) fn named_action(message: &str) -> Option<&str> {
    let rest = &message[message.find("(action: ")? + "(action: ".len()..];
    Some(&rest[..rest.find(')')?]).filter(|a| !a.is_empty())
}

/// Whether a server selection error describes a server the driver gave up on because it
/// refused the login (`Kind: SCRAM failure: …`, `AuthenticationFailed`).
pub(crate) fn login_refused(message: &str) -> bool {
    ["AuthenticationFailed", "SCRAM failure", "Authentication failed", "authentication failed"]
        .iter()
        .any(|s| message.contains(s))
}

/// A refused login ([`ErrorKind::Authentication`], or code 18): [`Error::Setup`] saying what to
/// check. The driver's message names the mechanism, never the password.
///
/// [`ErrorKind::Authentication`]: mongodb::error::ErrorKind::Authentication
pub(crate) fn refused_login(operation: &'static str, e: &mongodb::error::Error) -> Error {
    Error::setup(
        BACKEND,
        format!(
            "MongoDB refused the client's credentials in {operation} ({e}): check the user name, \
         password, authSource and mechanism of the connection string (see \"Authentication\" in \
         the shedlock-mongodb README)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_read_from_the_servers_words() {
        assert_eq!(
            named_action("not authorized on app to execute command (action: update)"),
            Some("update")
        );
        assert_eq!(named_action("not authorized on app to execute command { find: \"x\" }"), None);
        assert!(login_refused("Error: Kind: SCRAM failure: authentication failed, labels: {}"));
        assert!(login_refused(
            "Command(CommandError { code: 18, code_name: \"AuthenticationFailed\""
        ));
        assert!(!login_refused(
            "Server selection timeout: No available servers. Connection refused"
        ));
    }
}
