//! Tables of valid and invalid durations and lock configurations.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use shedlock::{ConfigError, DurationError, LockConfig, parse_duration};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[test]
fn valid_durations() {
    let table: &[(&str, Duration)] = &[
        ("0", ms(0)),
        ("1500", ms(1500)),
        ("500ms", ms(500)),
        ("10s", Duration::from_secs(10)),
        ("5m", Duration::from_secs(300)),
        ("1h", Duration::from_secs(3600)),
        ("1d", Duration::from_secs(86_400)),
        ("  30s ", Duration::from_secs(30)),
        ("PT15M", Duration::from_secs(900)),
        ("pt15m", Duration::from_secs(900)),
        ("P1DT2H", Duration::from_secs(86_400 + 7200)),
        ("PT0.5S", ms(500)),
        ("PT1H30M", Duration::from_secs(5400)),
        ("PT1M0.001S", ms(60_001)),
        ("P2D", Duration::from_secs(2 * 86_400)),
        ("PT0,25S", ms(250)),
        ("PT0.000000001S", Duration::from_nanos(1)),
    ];
    for (input, want) in table {
        assert_eq!(parse_duration(input).as_ref(), Ok(want), "input {input:?}");
    }
}

#[test]
fn invalid_durations() {
    type Check = fn(&DurationError) -> bool;
    let invalid: Check = |e| matches!(e, DurationError::Invalid(_));
    let table: &[(&str, Check)] = &[
        ("", |e| matches!(e, DurationError::Empty)),
        ("   ", |e| matches!(e, DurationError::Empty)),
        ("-5s", |e| matches!(e, DurationError::Negative(s) if s == "-5s")),
        ("-PT1S", |e| matches!(e, DurationError::Negative(_))),
        ("5x", invalid),
        ("s", invalid),
        ("5 s", invalid),
        ("1.5s", invalid),
        ("10sec", invalid),
        ("P", invalid),
        ("PT", invalid),
        ("P1Y", invalid),
        ("P1M", invalid),
        ("P1W", invalid),
        ("PT1.5M", invalid),
        ("PTS", invalid),
        ("PT1S2M", invalid),
        ("PT1M1M", invalid),
        ("PT0.1234567891S", invalid),
        ("PT1X", invalid),
        ("P1DT", invalid),
        ("99999999999999999999", |e| matches!(e, DurationError::Overflow(_))),
        ("18446744073709551615d", |e| matches!(e, DurationError::Overflow(_))),
        ("PT99999999999999999999H", |e| matches!(e, DurationError::Overflow(_))),
    ];
    for (input, check) in table {
        match parse_duration(input) {
            Ok(d) => panic!("{input:?} parsed as {d:?}"),
            Err(e) => assert!(check(&e), "{input:?} gave {e:?}"),
        }
    }
}

#[test]
fn invalid_duration_message_names_the_input() {
    let e = parse_duration("5x").unwrap_err();
    assert!(e.to_string().contains("\"5x\""), "{e}");
}

#[test]
fn valid_configs() {
    let c = LockConfig::new("a", Duration::from_secs(10), Duration::from_secs(10)).unwrap();
    assert_eq!(
        (c.name(), c.lock_at_most_for(), c.lock_at_least_for()),
        ("a", Duration::from_secs(10), Duration::from_secs(10))
    );
    let c = LockConfig::builder("job")
        .lock_at_most_for_str("PT10M")
        .lock_at_least_for_str("30s")
        .build()
        .unwrap();
    assert_eq!(c.lock_at_most_for(), Duration::from_secs(600));
    assert_eq!(c.lock_at_least_for(), Duration::from_secs(30));
    // Default at_least is zero.
    let c = LockConfig::builder("job").lock_at_most_for(ms(1)).build().unwrap();
    assert_eq!(c.lock_at_least_for(), Duration::ZERO);
    // Names are kept verbatim, whatever they contain.
    let c = LockConfig::new(" we'ird\n名前 ", ms(5), ms(0)).unwrap();
    assert_eq!(c.name(), " we'ird\n名前 ");
}

#[test]
fn invalid_configs() {
    assert_eq!(LockConfig::new("", ms(10), ms(0)), Err(ConfigError::EmptyName));
    assert_eq!(
        LockConfig::new("a", ms(0), ms(0)),
        Err(ConfigError::ZeroAtMost { name: "a".into() })
    );
    assert_eq!(
        LockConfig::new("a", ms(10), ms(11)),
        Err(ConfigError::AtLeastExceedsAtMost {
            name: "a".into(),
            at_most: ms(10),
            at_least: ms(11)
        })
    );
    // A missing at_most says so (it is not a zero one).
    let missing = LockConfig::builder("a").build();
    assert_eq!(missing, Err(ConfigError::AtMostNotSet { name: "a".into() }));
    let message = missing.unwrap_err().to_string();
    assert!(message.contains("has no lock_at_most_for"), "{message}");
    assert!(!message.contains("greater than zero"), "{message}");
    assert_eq!(
        LockConfig::builder("a").lock_at_most_for(ms(0)).build(),
        Err(ConfigError::ZeroAtMost { name: "a".into() })
    );
    // A bad duration string is reported with its field and input, even if set again later.
    let e = LockConfig::builder("a")
        .lock_at_most_for_str("ten")
        .lock_at_most_for(ms(5))
        .build()
        .unwrap_err();
    match &e {
        ConfigError::Duration { name, field, source } => {
            assert_eq!((name.as_str(), *field), ("a", "lock_at_most_for"));
            assert_eq!(source, &DurationError::Invalid("ten".into()));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(e.to_string().contains("ten") && e.to_string().contains("lock_at_most_for"), "{e}");
    let e = LockConfig::builder("a")
        .lock_at_most_for_str("1m")
        .lock_at_least_for_str("-1s")
        .build()
        .unwrap_err();
    assert!(matches!(e, ConfigError::Duration { field: "lock_at_least_for", .. }), "{e:?}");
    // with_durations validates too.
    let c = LockConfig::new("a", ms(10), ms(0)).unwrap();
    assert!(c.with_durations(ms(5), ms(6)).is_err());
    assert_eq!(c.with_durations(ms(20), ms(6)).unwrap().lock_at_most_for(), ms(20));
}

#[test]
fn errors_say_whether_retry_helps() {
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    assert!(shedlock::Error::unavailable("x", io).is_retryable());
    assert!(!shedlock::Error::NotLocked.is_retryable());
    assert!(!shedlock::Error::from(ConfigError::EmptyName).is_retryable());
}

#[test]
fn a_huge_name_is_quoted_shortened_with_its_length_and_a_short_one_in_full() {
    let huge = "n".repeat(10_000);
    let e = shedlock::Error::InvalidName {
        backend: "postgres",
        name: huge.clone(),
        reason: "longer than 255 bytes".into(),
    };
    let message = e.to_string();
    assert!(message.len() < 200, "{} characters: {message}", message.len());
    assert!(message.contains(&format!("\"{}\"… (10000 bytes)", "n".repeat(48))), "{message}");
    assert!(message.contains("longer than 255 bytes"), "{message}");
    // The error keeps the whole name for the program.
    assert!(matches!(&e, shedlock::Error::InvalidName { name, .. } if *name == huge));

    // Up to 64 characters (not bytes) a name is quoted in full, escapes and all.
    let short = format!("{}\n", "é".repeat(63));
    let message = shedlock::Error::LockLost { name: short.clone() }.to_string();
    assert!(message.contains(&format!("{short:?}")), "{message}");
    let config = LockConfig::builder(huge).build().unwrap_err().to_string();
    assert!(config.contains("… (10000 bytes) has no lock_at_most_for"), "{config}");
}
