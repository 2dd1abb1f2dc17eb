//! The table of "server not there" cases each network provider's tests run: a closed port and a
//! host name that cannot resolve. Whatever the client library, the error must be retryable and
//! its message (the error's own `Display`, which is what a log line prints) must still say what
//! happened, not only "pool timed out" or "dispatch failure".

use std::net::SocketAddr;

use shedlock::{Error, LockProvider};

use crate::cfg;

/// A host name that can never resolve (`.invalid` is reserved by RFC 2606).
pub const UNRESOLVABLE_HOST: &str = "shedlock-test.invalid";

/// What a message must contain (any one of them, case-insensitively) for each case.
pub const REFUSED: &[&str] = &["connection refused"];
/// What a message must contain when a server went away after the client connected: its
/// connection was cut (the call on it sees a broken pipe or a reset), then a new one is refused.
pub const GONE: &[&str] = &["connection refused", "broken pipe", "connection reset"];
/// The resolver's words for a name that does not resolve, as the clients pass them on.
pub const UNRESOLVED: &[&str] =
    &["failed to lookup address", "name or service not known", "no such host", "dns error"];

/// A loopback address where nothing listens: bound by the OS, then closed, so connecting is
/// refused at once.
pub fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// The two cases every network provider's tests run, as (case, host, port, what the message
/// must say): nothing listening on a loopback port, and a host name that does not resolve (on
/// `port`, the backend's usual one).
pub fn cases(port: u16) -> [(&'static str, String, u16, &'static [&'static str]); 2] {
    [
        ("a closed port", "127.0.0.1".to_owned(), closed_port().port(), REFUSED),
        ("an unresolvable host", UNRESOLVABLE_HOST.to_owned(), port, UNRESOLVED),
    ]
}

/// Asserts that `try_lock` and `check` on `p` both fail with a retryable error whose message
/// names the cause (one of `expected`). `case` names the case in failure messages.
pub async fn assert_named(p: &dyn LockProvider, case: &str, expected: &[&str]) {
    for e in both_fail(p, case).await {
        assert!(
            matches!(e, Error::Unavailable { .. } | Error::Timeout { .. }),
            "{case}: expected Unavailable or Timeout, got {e:?}"
        );
        assert_says(&e, case, expected);
    }
}

/// Asserts that `try_lock` and `check` on `p` both fail, of whatever kind (a wrong password or
/// a TLS mismatch is not retryable), with a message that contains one of `expected`.
pub async fn assert_both_say(p: &dyn LockProvider, case: &str, expected: &[&str]) {
    for e in both_fail(p, case).await {
        assert_says(&e, case, expected);
    }
}

/// The errors of `try_lock` and `check` on `p`; panics if either succeeds.
async fn both_fail(p: &dyn LockProvider, case: &str) -> [Error; 2] {
    let try_lock = p.try_lock(&cfg("unreachable-cause", 60_000, 0)).await.map(drop);
    let check = p.check().await;
    [("try_lock", try_lock), ("check", check)].map(|(call, answer)| match answer {
        Err(e) => e,
        Ok(()) => panic!("{case}: {call} succeeded"),
    })
}

/// Asserts that the message of `e` contains one of `expected`, case-insensitively.
pub fn assert_says(e: &Error, case: &str, expected: &[&str]) {
    println!("{case}: {e}");
    let message = e.to_string().to_lowercase();
    assert!(
        expected.iter().any(|w| message.contains(w)),
        "{case}: the message does not say why (expected one of {expected:?}): {e}"
    );
}
