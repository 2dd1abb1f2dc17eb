//! What a Redis error means for the caller: a connection or fail-over problem is
//! [`Error::Unavailable`] (try again later); an ACL denial, a refused login or a server without
//! Lua is [`Error::Setup`], saying what to grant or check; anything else is [`Error::Backend`].
//!
//! An ACL denial names the command or the key pattern the connection's user lacks, and points
//! to the README's "Permissions" section. Servers word denials differently, and a denial inside a
//! script may not name the command at all (Redis 7.0: "The user executing the script can't run
//! this command or subcommand script: …, on @user_script:4."): then the command is read from the
//! script's own source, at the line the server names.

use std::fmt;

use redis::{ErrorKind, RedisError, ServerErrorKind};
use shedlock::Error;

use crate::{BACKEND, keys::glob_escape};

/// Where the README says what to grant.
const SEE: &str = "see \"Permissions\" in the shedlock-redis README";

/// A reply this provider cannot have caused: [`Error::Backend`].
pub(crate) fn bad_reply(what: &str, detail: impl fmt::Debug) -> Error {
    Error::Backend {
        backend: BACKEND,
        source: format!("unexpected reply to {what}: {detail:?}").into(),
    }
}

/// What was sent, so that an error can say what it needed.
pub(crate) struct Sent<'a> {
    /// What the provider was doing, for the message: `the acquire script`, `list (CLUSTER
    /// SLOTS)`.
    pub(crate) what: &'a str,
    /// The script's source, when a script was run: a denial inside it that does not name its
    /// command is traced to the line the server names.
    pub(crate) source: Option<&'a str>,
    /// The keys the command was given (a script's `KEYS`).
    pub(crate) keys: &'a [&'a str],
    /// The provider's key prefix, for the key pattern to grant.
    pub(crate) prefix: &'a str,
}

impl<'a> Sent<'a> {
    /// A command that is not a script and names no key.
    pub(crate) fn command(what: &'a str, prefix: &'a str) -> Self {
        Self { what, source: None, keys: &[], prefix }
    }
}

/// What an ACL denied.
#[derive(Debug, PartialEq, Eq)]
enum Denied {
    /// A command, as ACL rules name it (`get`, `script|load`); `None` when neither the server
    /// nor the script's source says which.
    Command(Option<String>),
    /// A key.
    Key,
}

/// The [`Error`] for a Redis error from `sent`.
pub(crate) fn map_err(e: RedisError, sent: &Sent<'_>) -> Error {
    let text = e.to_string();
    let unavailable = e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::ReadOnly
            )
        )
        // A master that lost its replicas under `min-replicas-to-write` refuses writes.
        || text.contains("NOREPLICAS");
    if let Some(why) = login_refused(&e, &text) {
        // Checked before `unavailable`: a reconnecting client reports a refused login on the
        // call that needed the connection. The server's text is left out: it is the server's
        // fixed wording at best, and the connection's credentials must never reach a message.
        return Error::setup(
            BACKEND,
            format!(
                "the server refused the connection's login ({why}): the user does not exist, is \
             disabled, or the password is wrong; check the user and password the connection was \
             opened with ({SEE})"
            ),
        );
    }
    if unavailable {
        return Error::Unavailable { backend: BACKEND, source: Box::new(e) };
    }
    if let Some(denied) = denied(&e, &text, sent.source) {
        let what = sent.what;
        return Error::setup(
            BACKEND,
            match denied {
                Denied::Command(Some(cmd)) => format!(
                    "the connection's Redis user may not run the `{cmd}` command, which {what} \
                 needs: add `+{cmd}` to its ACL rules ({SEE}; server: {text})"
                ),
                Denied::Command(None) => format!(
                    "the connection's Redis user may not run a command {what} needs: grant the \
                 commands the README lists ({SEE}; server: {text})"
                ),
                Denied::Key => {
                    let keys = if sent.keys.is_empty() {
                        String::new()
                    } else {
                        format!(" {:?}", sent.keys)
                    };
                    format!(
                        "the connection's Redis user may not access the keys{keys} {what} uses: its \
                     ACL key patterns must cover `~{}*` ({SEE}; server: {text})",
                        glob_escape(sent.prefix)
                    )
                }
            },
        );
    }
    if text.contains("unknown command") || text.contains("scripting is disabled") {
        return Error::setup(
            BACKEND,
            format!(
                "this server does not run Lua scripts (EVALSHA), which the provider needs ({text})"
            ),
        );
    }
    Error::Backend { backend: BACKEND, source: Box::new(e) }
}

/// Why the server refused the connection's login, if it did (`WRONGPASS`, `NOAUTH`, or the
/// client's own "authentication failed" when it saw either while connecting).
fn login_refused(e: &RedisError, text: &str) -> Option<&'static str> {
    if e.code() == Some("WRONGPASS") || text.contains("WRONGPASS") {
        Some("WRONGPASS")
    } else if e.code() == Some("NOAUTH") || text.contains("NOAUTH") {
        Some("NOAUTH: the server requires a login and the connection gave none")
    } else if e.kind() == ErrorKind::AuthenticationFailed {
        Some("authentication failed")
    } else {
        None
    }
}

/// What an ACL denied, if the error is a denial: `NOPERM` for the command sent itself, an `ERR`
/// saying so for a command inside a script.
fn denied(e: &RedisError, text: &str, source: Option<&str>) -> Option<Denied> {
    let noperm = e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm);
    // Redis 7.2+ and Valkey: "ACL failure in script: <the NOPERM text>"; Redis 7.0: "The user
    // executing the script can't run this command or subcommand" / "can't access at least one
    // of the keys mentioned in the command arguments".
    let in_script = text.contains("ACL failure in script")
        || text.contains("The user executing the script can't");
    if !noperm && !in_script {
        return None;
    }
    // "No permissions to access a key" (Valkey, Redis 7.2+), "no permissions to access one of
    // the keys used as arguments" (Redis 7.0), "can't access at least one of the keys" (in a
    // script, Redis 7.0).
    if text.contains("access a key")
        || text.contains("access one of the keys")
        || text.contains("access at least one of the keys")
    {
        return Some(Denied::Key);
    }
    let named = between(text, "to run the '", "'").map(str::to_owned);
    let from_line = || {
        let line: usize = between(text, "@user_script:", ".")?.parse().ok()?;
        let code = source?.lines().nth(line.checked_sub(1)?)?;
        Some(between(code, "redis.call('", "'")?.to_ascii_lowercase())
    };
    Some(Denied::Command(named.or_else(|| if in_script { from_line() } else { None })))
}

/// The text between the first `start` and the next `end` after it.
fn between<'t>(text: &'t str, start: &str, end: &str) -> Option<&'t str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str, detail: &str) -> RedisError {
        let kind = match code {
            "NOPERM" => ServerErrorKind::NoPerm,
            _ => ServerErrorKind::ResponseError,
        };
        RedisError::from((ErrorKind::Server(kind), "server error", detail.to_owned()))
    }

    const SCRIPT: &str = "
local v = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
";

    #[test]
    fn denials_name_the_command_whichever_server_words_them() {
        let cases = [
            // Valkey 8 / Redis 7.2+, the command sent.
            ("NOPERM", "User u has no permissions to run the 'evalsha' command", "evalsha"),
            // Redis 7.0, the command sent.
            (
                "NOPERM",
                "this user has no permissions to run the 'script|load' command",
                "script|load",
            ),
            // Valkey 8 / Redis 7.2+, inside a script.
            (
                "ERR",
                "ACL failure in script: User u has no permissions to run the 'time' command \
                 script: 0123, on @user_script:3.",
                "time",
            ),
            // Redis 7.0, inside a script: the command is read from the line it names.
            (
                "ERR",
                "The user executing the script can't run this command or subcommand script: \
                 0123, on @user_script:3.",
                "time",
            ),
        ];
        for (code, detail, cmd) in cases {
            let e = server(code, detail);
            let text = e.to_string();
            assert_eq!(
                denied(&e, &text, Some(SCRIPT)),
                Some(Denied::Command(Some(cmd.to_owned()))),
                "{detail}"
            );
        }
    }

    #[test]
    fn key_denials_are_told_from_command_denials() {
        for (code, detail) in [
            ("NOPERM", "No permissions to access a key"),
            ("NOPERM", "this user has no permissions to access one of the keys used as arguments"),
            (
                "ERR",
                "The user executing the script can't access at least one of the keys mentioned \
                 in the command arguments script: 0123, on @user_script:2.",
            ),
            ("ERR", "ACL failure in script: No permissions to access a key script: 0123"),
        ] {
            let e = server(code, detail);
            let text = e.to_string();
            assert_eq!(denied(&e, &text, Some(SCRIPT)), Some(Denied::Key), "{detail}");
        }
        let plain = server("ERR", "wrong number of arguments");
        assert_eq!(denied(&plain, &plain.to_string(), Some(SCRIPT)), None);
    }

    #[test]
    fn a_denial_is_a_setup_error_naming_the_rule_and_the_readme() {
        let sent =
            Sent { what: "the acquire script", source: None, keys: &["p:{a}"], prefix: "p:" };
        let e = map_err(server("NOPERM", "No permissions to access a key"), &sent);
        let Error::Setup { message, .. } = &e else { panic!("{e:?}") };
        assert!(message.contains("~p:*") && message.contains("Permissions"), "{message}");
        let e =
            map_err(server("NOPERM", "User u has no permissions to run the 'del' command"), &sent);
        let Error::Setup { message, .. } = &e else { panic!("{e:?}") };
        assert!(message.contains("+del") && message.contains("the acquire script"), "{message}");
    }

    #[test]
    fn a_refused_login_is_a_setup_error() {
        let sent = Sent::command("the acquire script", "p:");
        for e in [
            redis::make_extension_error(
                "WRONGPASS".to_owned(),
                Some("invalid username-password pair or user is disabled.".to_owned()),
            ),
            RedisError::from((ErrorKind::AuthenticationFailed, "Password authentication failed")),
        ] {
            assert!(matches!(map_err(e, &sent), Error::Setup { .. }));
        }
    }
}
