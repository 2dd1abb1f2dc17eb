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
/// The resolver's words for a name that does not resolve, as the clients pass them on.
pub const UNRESOLVED: &[&str] =
    &["failed to lookup address", "name or service not known", "no such host", "dns error"];

/// A loopback address where nothing listens: bound by the OS, then closed, so connecting is
/// refused at once.
pub fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Asserts that `try_lock` and `check` on `p` both fail with a retryable error whose message
/// names the cause (one of `expected`). `case` names the case in failure messages.
pub async fn assert_named(p: &dyn LockProvider, case: &str, expected: &[&str]) {
    let try_lock = p.try_lock(&cfg("unreachable-cause", 60_000, 0)).await.map(drop);
    for (call, answer) in [("try_lock", try_lock), ("check", p.check().await)] {
        let e = match answer {
            Err(e) => e,
            Ok(()) => panic!("{case}: {call} succeeded"),
        };
        assert_error_named(&e, &format!("{case}: {call}"), expected);
    }
}

/// Asserts that `e` is retryable ([`Error::Unavailable`] or [`Error::Timeout`]) and that its
/// message contains one of `expected`, case-insensitively.
pub fn assert_error_named(e: &Error, case: &str, expected: &[&str]) {
    assert!(
        matches!(e, Error::Unavailable { .. } | Error::Timeout { .. }),
        "{case}: expected Unavailable or Timeout, got {e:?}"
    );
    println!("{case}: {e}");
    let message = e.to_string().to_lowercase();
    assert!(
        expected.iter().any(|w| message.contains(w)),
        "{case}: the message does not say why (expected one of {expected:?}): {e}"
    );
}
