//! The README's "Permissions", enforced by a moto of this test's own with IAM on
//! ([`aws::MotoIam`]): every call as an IAM user holding exactly the README's policy, then as
//! users each missing one action, a prefix outside the policy, a wrong secret and an unknown
//! access key id.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use shedlock::{Error, ForceRelease, LockProvider, ProviderBuilder as _};
use shedlock_s3::S3LockProvider;
use shedlock_test_support::{aws, cfg, unique};

/// The README's policy (its first `json` block after "## Permissions"), for `bucket`.
fn readme_policy(bucket: &str) -> String {
    let readme = include_str!("../../README.md");
    let section = &readme[readme.find("## Permissions").expect("a Permissions section")..];
    let start = section.find("```json\n").expect("a json block") + "```json\n".len();
    let end = start + section[start..].find("```").unwrap();
    section[start..end].replace("my-locks-bucket", bucket)
}

/// `policy` without `action` (and without a statement left with no action).
fn without(policy: &str, action: &str) -> String {
    let mut doc: serde_json::Value = serde_json::from_str(policy).unwrap();
    let statements = doc["Statement"].as_array_mut().unwrap();
    for s in statements.iter_mut() {
        let actions = match &s["Action"] {
            serde_json::Value::String(a) => vec![a.clone()],
            serde_json::Value::Array(a) => {
                a.iter().map(|v| v.as_str().unwrap().to_owned()).collect()
            }
            other => panic!("{other}"),
        };
        s["Action"] = actions.into_iter().filter(|a| a != action).collect();
    }
    statements.retain(|s| !s["Action"].as_array().unwrap().is_empty());
    doc.to_string()
}

fn client(endpoint: &str, id: &str, secret: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::config::Builder::from(&aws::sdk_config_with(endpoint, id, secret))
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

fn provider(endpoint: &str, (id, secret): &(String, String), bucket: &str) -> S3LockProvider {
    S3LockProvider::builder(client(endpoint, id, secret), bucket)
        .operation_timeout(Some(Duration::from_secs(10)))
        .build()
        .unwrap()
}

/// The error is `Error::Setup` naming `needs` (an action: "need s3:GetObject …") and the
/// README's section, and holding no secret.
fn assert_setup_naming(e: &Error, needs: &str, secrets: &[&str], what: &str) {
    match e {
        Error::Setup { message, .. } => {
            assert!(message.contains(needs), "{what}: {needs:?} not named: {message}");
            assert!(message.contains("\"Permissions\""), "{what}: {message}");
        }
        other => panic!("{what}: expected Setup naming {needs}, got {other:?}"),
    }
    let text = shedlock_test_support::secrets::error_text(e);
    for s in secrets {
        assert!(!text.contains(s), "{what}: a secret in {text}");
    }
}

/// Every call that needs which actions, in moto (which does not enforce `s3:ListBucket` for a
/// missing object's read: see the README).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Check,
    /// `try_lock` of a fresh name, `extend`, `unlock`: `PutObject` only.
    Cycle,
    /// `try_lock` of a name held elsewhere: `PutObject`, refused, then `GetObject`.
    Contend,
    Inspect,
    List,
    ForceRelease,
}

const CALLS: [Call; 6] =
    [Call::Check, Call::Cycle, Call::Contend, Call::Inspect, Call::List, Call::ForceRelease];

fn needs(call: Call) -> &'static [&'static str] {
    match call {
        Call::Check => &["s3:ListBucket", "s3:GetObject", "s3:PutObject"],
        Call::Cycle => &["s3:PutObject"],
        Call::Contend => &["s3:PutObject", "s3:GetObject"],
        Call::Inspect => &["s3:GetObject"],
        Call::List => &["s3:ListBucket", "s3:GetObject"],
        Call::ForceRelease => &["s3:GetObject", "s3:DeleteObject"],
    }
}

/// Runs `call` as `p`; `held` is a name `owner` holds, and the lock `force_release` releases is
/// taken by `owner` first.
async fn run(
    call: Call,
    p: &S3LockProvider,
    owner: &S3LockProvider,
    held: &str,
) -> Result<(), Error> {
    match call {
        Call::Check => p.check().await,
        Call::Cycle => {
            let mut lock = p.try_lock(&cfg(&unique("cycle"), 60_000, 0)).await?.expect("free");
            lock.extend(Duration::from_secs(60), Duration::ZERO).await?;
            lock.unlock().await
        }
        Call::Contend => {
            assert!(p.try_lock(&cfg(held, 60_000, 0)).await?.is_none(), "held elsewhere");
            Ok(())
        }
        Call::Inspect => {
            assert!(p.inspect(held).await?.expect("an object").held);
            assert!(p.inspect(&unique("never")).await?.is_none());
            Ok(())
        }
        Call::List => {
            assert!(!p.list("", None, 100).await?.records.is_empty());
            Ok(())
        }
        Call::ForceRelease => {
            let name = unique("victim");
            let lock = owner.try_lock(&cfg(&name, 60_000, 0)).await?.expect("free");
            let seen = owner.inspect(&name).await?.unwrap();
            let r = p.force_release(&seen).await;
            // After a forced release the holder's unlock changes nothing.
            lock.unlock().await?;
            assert!(matches!(r?, ForceRelease::Released(_)));
            Ok(())
        }
    }
}

#[tokio::test]
async fn every_call_works_with_exactly_the_readme_policy_and_each_missing_action_is_named() {
    let moto = aws::MotoIam::start();
    let url = moto.url().to_owned();
    let bucket = unique("iam").replace('_', "-").to_ascii_lowercase();
    // Before enforcement: any credentials may create the bucket.
    let (id, secret) = aws::credentials();
    S3LockProvider::builder(client(&url, &id, &secret), &bucket)
        .build()
        .unwrap()
        .create_bucket()
        .await
        .unwrap();
    let policy = readme_policy(&bucket);
    let actions = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"];
    let mut users = vec![("app", policy.clone())];
    let names: Vec<String> = actions.iter().map(|a| format!("no-{}", &a[3..])).collect();
    for (name, action) in names.iter().zip(actions) {
        users.push((name.as_str(), without(&policy, action)));
    }
    let keys = moto.enforce(&users);
    let secrets: Vec<&str> = keys.iter().map(|(_, s)| s.as_str()).collect();

    // Exactly the README's policy: every call.
    let app = provider(&url, &keys[0], &bucket);
    let held = unique("held");
    let holder = app.try_lock(&cfg(&held, 600_000, 0)).await.unwrap().expect("free");
    let other = provider(&url, &keys[0], &bucket);
    for call in CALLS {
        run(call, &other, &app, &held).await.unwrap_or_else(|e| panic!("{call:?}: {e:?}"));
    }
    // Set-up is not in it.
    let e = app.create_bucket().await.unwrap_err();
    assert_setup_naming(&e, "need s3:CreateBucket", &secrets, "create_bucket");

    // Each action removed in turn: exactly the calls that need it fail, naming it.
    for (i, action) in actions.iter().enumerate() {
        let p = provider(&url, &keys[i + 1], &bucket);
        for call in CALLS {
            let what = format!("{call:?} without {action}");
            match run(call, &p, &app, &held).await {
                Ok(()) => assert!(!needs(call).contains(action), "{what} succeeded"),
                Err(e) => {
                    assert!(needs(call).contains(action), "{what} failed: {e:?}");
                    assert_setup_naming(&e, &format!("need {action}"), &secrets, &what);
                }
            }
        }
    }

    // A prefix outside the policy's resources: refused at the first object request.
    let outside = S3LockProvider::builder(client(&url, &keys[0].0, &keys[0].1), &bucket)
        .prefix("other/")
        .build()
        .unwrap();
    let e = outside.check().await.unwrap_err();
    assert_setup_naming(&e, "need s3:GetObject on arn:aws:s3:::", &secrets, "another prefix");
    let e = outside.try_lock(&cfg("x", 60_000, 0)).await.unwrap_err();
    assert_setup_naming(&e, "need s3:PutObject", &secrets, "another prefix");

    // Refused credentials: the secret key of another user, an access key id moto never issued.
    for ((kid, ksecret), says) in [
        ((keys[0].0.clone(), keys[1].1.clone()), "SignatureDoesNotMatch"),
        (("AKIANOSUCHKEY0000000".to_owned(), keys[0].1.clone()), "InvalidAccessKeyId"),
    ] {
        let p = S3LockProvider::builder(client(&url, &kid, &ksecret), &bucket).build().unwrap();
        for e in [p.check().await.unwrap_err(), p.try_lock(&cfg("x", 60_000, 0)).await.unwrap_err()]
        {
            match &e {
                Error::Setup { message, .. } => assert!(message.contains(says), "{message}"),
                other => panic!("{says}: expected Setup, got {other:?}"),
            }
            let text = shedlock_test_support::secrets::error_text(&e);
            for s in &secrets {
                assert!(!text.contains(s), "{says}: a secret in {text}");
            }
        }
    }
    holder.unlock().await.unwrap();
}
