//! Item 9 of the production posture: a secret given to a provider (a password, a token, a key)
//! appears nowhere a user or an operator could see it — `Debug`, `Display`, an error's chain,
//! the logs at TRACE. [`Capture`] records every log line of the calls a test makes;
//! [`assert_absent`] looks for the secret in all of it.

use std::{
    io::Write,
    sync::{Arc, Mutex, PoisonError},
};

use tracing_subscriber::fmt::MakeWriter;

/// A secret for a test: `s3cret-<what>-<pid>-<nanos>`, recognisable and unique.
pub fn secret(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("s3cret-{what}-{}-{nanos}", std::process::id())
}

/// Every log line emitted on this thread, at every level down to TRACE, while it is alive
/// (the tracing subscriber is this thread's default). Run the test on a current-thread tokio
/// runtime (`#[tokio::test]`), so that the tasks a client spawns log through it too.
pub struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
    _second: tracing::Dispatch,
}

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = Sink;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Capture {
    /// Starts capturing on this thread.
    pub fn start() -> Capture {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(Sink(buf.clone()))
            .with_ansi(false)
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        // With one registered dispatcher, tracing computes the interest of a callsite that
        // another test thread reaches first from that thread's default (none: "never"), for
        // every thread. A second dispatcher, alive as long as the capture, makes it ask each
        // registered one, so that this thread's subscriber sees every callsite.
        let second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        tracing::callsite::rebuild_interest_cache();
        Capture { buf, _guard: guard, _second: second }
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap_or_else(PoisonError::into_inner))
            .into_owned()
    }
}

/// An error's `Display`, its `Debug` and every `source()` below it, as one text.
pub fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = format!("{e}\n{e:?}\n");
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!("{s}\n{s:?}\n"));
        source = s.source();
    }
    text
}

/// Fails the test if `secret` (or its first 12 characters, to catch a secret cut short) is in
/// any of `places` (`(what, text)` pairs: a `Debug`, an error, the captured logs).
pub fn assert_absent(secret: &str, places: &[(&str, &str)]) {
    let head: String = secret.chars().take(12).collect();
    for (what, text) in places {
        assert!(
            !text.contains(secret) && !text.contains(&head),
            "the secret appears in {what}:\n{text}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_logged_at_trace_is_captured_and_found() {
        let s = secret("unit");
        let capture = Capture::start();
        tracing::trace!(password = %s, "connecting");
        let logs = capture.text();
        assert!(logs.contains(&s), "{logs}");
        let caught = std::panic::catch_unwind(|| assert_absent(&s, &[("the logs", &logs)]));
        assert!(caught.is_err(), "a logged secret must fail the assertion");
        assert_absent(&s, &[("an unrelated text", "nothing to see")]);
    }
}
