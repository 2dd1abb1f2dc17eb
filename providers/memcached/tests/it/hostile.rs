//! A hostile server: a fake TCP server on 127.0.0.1 (a task of the test) that answers the
//! memcached client with lengths, lines and line counts no memcached sends, in plaintext or over
//! TLS (the caps hold on either stream). It stands for a
//! broken or malicious server, not for memcached (every other test of this crate runs against a
//! real one). Each case must end quickly in a typed error, never a panic, an abort or a large
//! allocation, and the connection must be closed rather than reused. The provider runs with no
//! operation timeout, so what ends each case is the client's caps, not a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::ProviderBuilder as _;
use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use shedlock::{Error, LockProvider};
use shedlock_memcached::{MAX_LINE_LEN, MAX_VALUE_LEN, MemcachedLockProvider, RawConnection};
use shedlock_test_support::cfg;
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, WriteHalf},
    net::TcpListener,
    sync::mpsc,
};
use tokio_rustls::TlsAcceptor;

use crate::pki::{self, Pki};

/// What the fake server answers.
#[derive(Clone, Copy)]
enum Answer {
    /// `stats` normally, then these bytes to every other request.
    Reply(&'static [u8]),
    /// `stats` normally, then these bytes followed by `x` forever (no newline).
    Endless(&'static [u8]),
    /// `stats` answered with `STAT` lines forever, never `END`.
    EndlessStats,
    /// `stats` answered with one line of `x` forever.
    EndlessStatsLine,
}

const STATS: &[u8] = b"STAT pid 4242\r\nSTAT uptime 10\r\nSTAT time 1700000000\r\nEND\r\n";

/// The fake server: its address, how many connections it accepted, and the index of each
/// connection the client closed.
struct Hostile {
    addr: String,
    accepted: Arc<AtomicUsize>,
    closed: mpsc::UnboundedReceiver<usize>,
}

impl Hostile {
    async fn start(answer: Answer) -> Self {
        Self::start_with(answer, None).await
    }

    /// The fake server over TLS, with `config` (see [`pki::server_config`]). A connection
    /// whose handshake fails counts as accepted and closed.
    async fn start_tls(answer: Answer, config: Arc<rustls::ServerConfig>) -> Self {
        Self::start_with(answer, Some(TlsAcceptor::from(config))).await
    }

    async fn start_with(answer: Answer, tls: Option<TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (tx, closed) = mpsc::unbounded_channel();
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let n = count.fetch_add(1, Ordering::SeqCst);
                let tx = tx.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => serve(stream, answer).await,
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                serve(stream, answer).await;
                            }
                        }
                    }
                    let _ = tx.send(n);
                });
            }
        });
        Self { addr, accepted, closed }
    }

    /// Waits (at most 5 s) until the client closed connection `n`.
    async fn closes(&mut self, n: usize) {
        let got = tokio::time::timeout(Duration::from_secs(5), self.closed.recv()).await;
        assert_eq!(got.expect("the client closes the connection").unwrap(), n);
    }
}

/// Serves one connection until the client closes it (a read of 0 bytes, or a failed write).
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(stream: S, answer: Answer) {
    let (read, mut write) = tokio::io::split(stream);
    let mut read = BufReader::new(read);
    let mut line = Vec::new();
    let endless = |mut write: WriteHalf<S>, head: &'static [u8], body: Vec<u8>| async move {
        if write.write_all(head).await.is_err() {
            return;
        }
        while write.write_all(&body).await.is_ok() && write.flush().await.is_ok() {}
    };
    loop {
        line.clear();
        match read.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.starts_with(b"ms ") {
            // The data block.
            let mut block = Vec::new();
            if read.read_until(b'\n', &mut block).await.unwrap_or(0) == 0 {
                return;
            }
        }
        let stats = line.starts_with(b"stats");
        let sent = match (answer, stats) {
            (Answer::EndlessStats, true) => {
                let stat = b"STAT evictions 0\r\n".repeat(1024);
                return endless(write, b"", stat).await;
            }
            (Answer::EndlessStatsLine, true) => {
                return endless(write, b"STAT ", vec![b'x'; 64 * 1024]).await;
            }
            (_, true) => write.write_all(STATS).await,
            (Answer::Reply(bytes), false) => write.write_all(bytes).await,
            (Answer::Endless(head), false) => {
                return endless(write, head, vec![b'x'; 64 * 1024]).await;
            }
            (Answer::EndlessStats | Answer::EndlessStatsLine, false) => Ok(()),
        };
        if sent.is_err() || write.flush().await.is_err() {
            return;
        }
    }
}

/// A provider on the fake server, without an operation timeout.
fn provider(s: &Hostile) -> MemcachedLockProvider {
    MemcachedLockProvider::builder(&s.addr).operation_timeout(None).build().unwrap()
}

/// A TLS fake server (a certificate of a throwaway CA), and a provider on it that trusts that
/// CA, without an operation timeout.
async fn tls(answer: Answer) -> (Hostile, MemcachedLockProvider) {
    let pki = Pki::new("hostile CA");
    let s = Hostile::start_tls(answer, pki::server_config(&pki.server(), None)).await;
    let p = MemcachedLockProvider::builder(&s.addr)
        .tls_ca_pem(pki.ca_pem())
        .operation_timeout(None)
        .build()
        .unwrap();
    assert!(p.uses_tls());
    (s, p)
}

/// Runs `call` (at most 5 s) and returns its error, asserting that it came within 2 s.
async fn fails_fast<T: std::fmt::Debug>(
    call: impl std::future::Future<Output = shedlock::Result<T>>,
) -> Error {
    let started = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), call).await.expect("bounded, not hung");
    let e = r.expect_err("a hostile reply is an error");
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    e
}

fn assert_backend_saying(e: &Error, words: &[&str]) {
    assert!(matches!(e, Error::Backend { backend: "memcached", .. }), "{e:?}");
    let text = e.to_string();
    for w in words {
        assert!(text.contains(w), "{text:?} should say {w:?}");
    }
}

#[tokio::test]
async fn a_value_length_of_4294967295_is_refused_before_reading_and_the_connection_is_closed() {
    let mut s = Hostile::start(Answer::Reply(b"VA 4294967295 c1\r\n")).await;
    let p = provider(&s);
    let e = fails_fast(p.try_lock(&cfg("job", 60_000, 0))).await;
    assert_backend_saying(&e, &["4294967295", &MAX_VALUE_LEN.to_string()]);
    assert!(!e.is_retryable());
    s.closes(0).await;
    // The next call does not reuse it: a new connection, refused the same way.
    let e = fails_fast(p.inspect("job")).await;
    assert_backend_saying(&e, &["4294967295"]);
    assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
    s.closes(1).await;
}

#[tokio::test]
async fn a_length_past_usize_is_a_backend_error_not_an_overflow() {
    let s = Hostile::start(Answer::Reply(b"VA 99999999999999999999999999 c1\r\n")).await;
    let e = fails_fast(provider(&s).inspect("job")).await;
    assert_backend_saying(&e, &["value of", &MAX_VALUE_LEN.to_string()]);
}

#[tokio::test]
async fn a_text_protocol_value_of_99999999999_bytes_is_a_backend_error_and_the_raw_connection_is_closed()
 {
    let mut s =
        Hostile::start(Answer::Reply(b"VA 99999999999 c1\r\nVALUE k 0 99999999999\r\n")).await;
    let mut raw = RawConnection::connect(&s.addr).await.unwrap();
    let e = fails_fast(raw.request(b"mg a2V5 b v\r\n")).await;
    assert_backend_saying(&e, &["99999999999"]);
    // Closed after that: the second line of the reply is never read as the next answer.
    s.closes(0).await;
    let e = fails_fast(raw.request(b"mg a2V5 b v\r\n")).await;
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");

    // The classic text protocol's `VALUE <key> <flags> <bytes>` is not a meta reply: refused
    // as such, its length never read.
    let s = Hostile::start(Answer::Reply(b"VALUE k 0 99999999999\r\n")).await;
    let mut raw = RawConnection::connect(&s.addr).await.unwrap();
    let e = fails_fast(raw.request(b"get k\r\n")).await;
    assert_backend_saying(&e, &["VALUE k 0 99999999999"]);
}

#[tokio::test]
async fn an_endless_reply_line_is_cut_at_the_line_cap_and_the_connection_is_closed() {
    let mut s = Hostile::start(Answer::Endless(b"HD c")).await;
    let p = provider(&s);
    let e = fails_fast(p.try_lock(&cfg("job", 60_000, 0))).await;
    assert_backend_saying(&e, &["longer than", &MAX_LINE_LEN.to_string(), "HD cxxx"]);
    s.closes(0).await;
}

#[tokio::test]
async fn an_endless_line_in_the_stats_reply_is_cut_at_the_line_cap() {
    let mut s = Hostile::start(Answer::EndlessStatsLine).await;
    let e = fails_fast(provider(&s).try_lock(&cfg("job", 60_000, 0))).await;
    assert_backend_saying(&e, &["longer than", "STAT xxx"]);
    s.closes(0).await;
}

#[tokio::test]
async fn a_stats_reply_that_never_ends_is_cut_at_the_stats_line_cap() {
    let mut s = Hostile::start(Answer::EndlessStats).await;
    let e = fails_fast(provider(&s).check()).await;
    assert_backend_saying(&e, &["stats", "without END"]);
    s.closes(0).await;
}

#[tokio::test]
async fn a_value_at_the_cap_is_still_read() {
    // The cap is a bound, not an off-by-one: MAX_VALUE_LEN bytes exactly are a value.
    let reply: &'static [u8] = {
        let mut r = format!("VA {MAX_VALUE_LEN} c7\r\n").into_bytes();
        r.extend(std::iter::repeat_n(b'v', MAX_VALUE_LEN));
        r.extend_from_slice(b"\r\n");
        Box::leak(r.into_boxed_slice())
    };
    let s = Hostile::start(Answer::Reply(reply)).await;
    let mut raw = RawConnection::connect(&s.addr).await.unwrap();
    let r = raw.request(b"mg a2V5 b v c\r\n").await.unwrap();
    assert_eq!((r.code.as_str(), r.value.map(|v| v.len())), ("VA", Some(MAX_VALUE_LEN)));
    // And the connection stays usable.
    let r = raw.request(b"mg a2V5 b v c\r\n").await.unwrap();
    assert_eq!(r.flag('c'), Some("7"));
}

#[tokio::test]
async fn over_tls_a_value_length_of_4294967295_is_refused_and_the_connection_is_closed() {
    let (mut s, p) = tls(Answer::Reply(b"VA 4294967295 c1\r\n")).await;
    let e = fails_fast(p.try_lock(&cfg("job", 60_000, 0))).await;
    assert_backend_saying(&e, &["4294967295", &MAX_VALUE_LEN.to_string()]);
    s.closes(0).await;
    let e = fails_fast(p.inspect("job")).await;
    assert_backend_saying(&e, &["4294967295"]);
    assert_eq!(s.accepted.load(Ordering::SeqCst), 2, "a new TLS connection, not the old one");
    s.closes(1).await;
    // A raw connection of the provider is a TLS one, with the same caps.
    let mut raw = p.raw_connection().await.unwrap();
    let e = fails_fast(raw.request(b"mg a2V5 b v\r\n")).await;
    assert_backend_saying(&e, &["4294967295"]);
}

#[tokio::test]
async fn over_tls_an_endless_reply_line_is_cut_at_the_line_cap() {
    let (mut s, p) = tls(Answer::Endless(b"HD c")).await;
    let e = fails_fast(p.try_lock(&cfg("job", 60_000, 0))).await;
    assert_backend_saying(&e, &["longer than", &MAX_LINE_LEN.to_string(), "HD cxxx"]);
    s.closes(0).await;
}

#[tokio::test]
async fn over_tls_a_stats_reply_that_never_ends_is_cut_at_the_stats_line_cap() {
    let (mut s, p) = tls(Answer::EndlessStats).await;
    let e = fails_fast(p.check()).await;
    assert_backend_saying(&e, &["stats", "without END"]);
    s.closes(0).await;
    let (mut s, p) = tls(Answer::EndlessStatsLine).await;
    let e = fails_fast(p.try_lock(&cfg("job", 60_000, 0))).await;
    assert_backend_saying(&e, &["longer than", "STAT xxx"]);
    s.closes(0).await;
}

#[tokio::test]
async fn a_client_certificate_is_presented_when_the_server_requires_one() {
    // memcached's `ssl_verify_mode=2` with `ssl_ca_cert`, played by the fake server: a client
    // certificate signed by the clients' CA or no session.
    let (servers, clients) = (Pki::new("server CA"), Pki::new("clients CA"));
    let config = pki::server_config(&servers.server(), Some(&clients));
    let s = Hostile::start_tls(Answer::Reply(b"MN\r\n"), config).await;
    let builder = || {
        MemcachedLockProvider::builder(&s.addr)
            .tls_ca_pem(servers.ca_pem())
            .operation_timeout(Some(Duration::from_secs(3)))
    };
    let me = clients.client("shedlock-app");
    builder().tls_identity(&me.cert_pem, &me.key_pem).build().unwrap().check().await.unwrap();

    // Without one: refused, a set-up error that names the setting, quickly, no panic.
    let e = fails_fast(builder().build().unwrap().check()).await;
    assert!(matches!(e, Error::Setup { backend: "memcached", .. }), "{e:?}");
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("tls_identity"), "{e}");
    // With one another CA signed: refused the same way.
    let stranger = Pki::new("stranger CA").client("intruder");
    let p = builder().tls_identity(&stranger.cert_pem, &stranger.key_pem).build().unwrap();
    let e = fails_fast(p.check()).await;
    assert!(matches!(e, Error::Setup { .. }), "{e:?}");
}

#[test]
fn tls_identity_pem_that_does_not_parse_is_a_setup_error_that_never_shows_the_key() {
    let pki = Pki::new("CA");
    let me = pki.client("app");
    let b = || MemcachedLockProvider::builder("127.0.0.1:1").tls_ca_pem(pki.ca_pem());
    let bad_key =
        "-----BEGIN PRIVATE KEY-----\nU0VDUkVULUtFWS1CWVRFUw==\n-----END PRIVATE KEY-----\n";
    for (cert, key) in [
        ("nothing", me.key_pem.as_str()),
        (me.cert_pem.as_str(), "nothing"),
        (me.cert_pem.as_str(), bad_key),
    ] {
        let e = b().tls_identity(cert, key).build().unwrap_err();
        assert!(matches!(e, Error::Setup { .. }), "{e:?}");
        assert!(e.to_string().contains("tls_identity"), "{e}");
        assert!(!e.to_string().contains("U0VDUkVU"), "{e}");
    }
    // The other CA's key with this certificate: not a pair.
    let other = Pki::new("other").client("app");
    let e = b().tls_identity(&me.cert_pem, &other.key_pem).build().unwrap_err();
    assert!(matches!(e, Error::Setup { .. }), "{e:?}");
    assert!(b().tls_identity(&me.cert_pem, &me.key_pem).build().is_ok());
}
