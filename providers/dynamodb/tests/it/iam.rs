//! The README's "Permissions", enforced by a moto of this test's own with IAM on
//! ([`aws::MotoIam`]; dynalite has no IAM): every call as an IAM user holding exactly the
//! README's actions, then as users each missing one action, a wrong secret and an unknown access
//! key id. moto matches every DynamoDB request against the resource `*`, so the README's table
//! ARN is widened to `*` here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use shedlock::{Error, ForceRelease, LockProvider, ProviderBuilder as _};
use shedlock_dynamodb::DynamoDbLockProvider;
use shedlock_test_support::{aws, cfg, secrets::error_text, unique};

/// The README's table ARN.
const ARN: &str = "\"arn:aws:dynamodb:us-east-1:123456789012:table/shedlock\"";

/// The README's policy (its first `json` block after "## Permissions"), every `Resource`
/// widened to `*` (moto's resource for every DynamoDB request).
fn readme_policy() -> String {
    let readme = include_str!("../../README.md");
    let section = &readme[readme.find("## Permissions").expect("a Permissions section")..];
    let start = section.find("```json\n").expect("a json block") + "```json\n".len();
    let end = start + section[start..].find("```").unwrap();
    let policy = &section[start..end];
    assert_eq!(policy.matches(ARN).count(), policy.matches("\"Resource\"").count(), "{policy}");
    policy.replace(ARN, "\"*\"")
}

/// Every action of `policy`, once each, sorted.
fn actions(policy: &str) -> Vec<String> {
    let mut all: Vec<String> = policy
        .split("\"dynamodb:")
        .skip(1)
        .map(|rest| format!("dynamodb:{}", &rest[..rest.find('"').unwrap()]))
        .collect();
    all.sort();
    all.dedup();
    all
}

/// `policy` without `action`, which must be one of several in each `Action` list that holds
/// it (the README's policy is written so; an emptied statement would be malformed).
fn without(policy: &str, action: &str) -> String {
    let quoted = format!("\"{action}\"");
    let out = policy.replace(&format!("{quoted}, "), "").replace(&format!(", {quoted}"), "");
    assert!(!out.contains(&quoted), "{action} is the only action of a statement: {policy}");
    out
}

fn provider(endpoint: &str, (id, secret): &(String, String), table: &str) -> DynamoDbLockProvider {
    DynamoDbLockProvider::builder(aws_sdk_dynamodb::Client::new(&aws::sdk_config_with(
        endpoint, id, secret,
    )))
    .table(table)
    .operation_timeout(Some(Duration::from_secs(10)))
    .build()
    .unwrap()
}

/// Every call, and the actions it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Check,
    /// `try_lock` of a fresh name, `extend`, `unlock`.
    Cycle,
    /// `try_lock` of a name held elsewhere.
    Contend,
    Inspect,
    List,
    ForceRelease,
    /// `create_table()` of the existing table.
    CreateTable,
}

const CALLS: [Call; 7] = [
    Call::Check,
    Call::Cycle,
    Call::Contend,
    Call::Inspect,
    Call::List,
    Call::ForceRelease,
    Call::CreateTable,
];

fn needs(call: Call) -> &'static [&'static str] {
    match call {
        Call::Check => &["dynamodb:DescribeTable", "dynamodb:UpdateItem"],
        Call::Cycle | Call::Contend => &["dynamodb:UpdateItem"],
        Call::Inspect => &["dynamodb:GetItem"],
        Call::List => &["dynamodb:Scan"],
        Call::ForceRelease => &["dynamodb:GetItem", "dynamodb:DeleteItem"],
        Call::CreateTable => &["dynamodb:CreateTable", "dynamodb:DescribeTable"],
    }
}

/// Runs `call` as `p`; `held` is a name `owner` holds.
async fn run(
    call: Call,
    p: &DynamoDbLockProvider,
    owner: &DynamoDbLockProvider,
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
            assert!(p.inspect(held).await?.expect("an item").held);
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
        Call::CreateTable => p.create_table().await,
    }
}

#[tokio::test]
async fn every_call_works_with_exactly_the_readme_actions_and_each_missing_action_is_named() {
    let moto = aws::MotoIam::start();
    let url = moto.url().to_owned();
    let table = unique("iam");
    // Before enforcement: any credentials may create the table.
    provider(&url, &aws::credentials(), &table).create_table().await.unwrap();
    let policy = readme_policy();
    let all = actions(&policy);
    assert_eq!(all.len(), 6, "{all:?}");
    let mut users = vec![("app".to_owned(), policy.clone())];
    for action in &all {
        users.push((format!("no-{}", &action["dynamodb:".len()..]), without(&policy, action)));
    }
    let users: Vec<(&str, String)> = users.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
    let keys = moto.enforce(&users);
    let secrets: Vec<&str> = keys.iter().map(|(_, s)| s.as_str()).collect();
    let assert_named = |e: &Error, needs: &str, what: &str| {
        match e {
            Error::Setup { message, .. } => {
                assert!(message.contains(needs), "{what}: {needs:?} not named: {message}");
                assert!(message.contains("\"Permissions\""), "{what}: {message}");
            }
            other => panic!("{what}: expected Setup naming {needs}, got {other:?}"),
        }
        let text = error_text(e);
        assert!(secrets.iter().all(|s| !text.contains(s)), "{what}: a secret in {text}");
    };

    // Exactly the README's actions: every call.
    let app = provider(&url, &keys[0], &table);
    let held = unique("held");
    let holder = app.try_lock(&cfg(&held, 600_000, 0)).await.unwrap().expect("free");
    let other = provider(&url, &keys[0], &table);
    for call in CALLS {
        run(call, &other, &app, &held).await.unwrap_or_else(|e| panic!("{call:?}: {e:?}"));
    }

    // Each action removed in turn: exactly the calls that need it fail, naming it.
    for (i, action) in all.iter().enumerate() {
        let p = provider(&url, &keys[i + 1], &table);
        for call in CALLS {
            let what = format!("{call:?} without {action}");
            match run(call, &p, &app, &held).await {
                Ok(()) => assert!(!needs(call).contains(&action.as_str()), "{what} succeeded"),
                Err(e) => {
                    assert!(needs(call).contains(&action.as_str()), "{what} failed: {e:?}");
                    assert_named(&e, &format!("need {action}"), &what);
                }
            }
        }
    }

    // Refused credentials: the secret key of another user, an access key id moto never issued.
    // moto answers them in S3's XML, which the DynamoDB client cannot read (AWS answers JSON
    // with a code, whose messages the unit tests check): an HTTP 403 without a code.
    for (id, secret) in [(&keys[0].0, &keys[1].1), (&"AKIANOSUCHKEY0000000".to_owned(), &keys[0].1)]
    {
        let says = "the credentials were refused";
        let p = provider(&url, &(id.clone(), secret.clone()), &table);
        for e in [p.check().await.unwrap_err(), p.try_lock(&cfg("x", 60_000, 0)).await.unwrap_err()]
        {
            match &e {
                Error::Setup { message, .. } => assert!(message.contains(says), "{message}"),
                other => panic!("{says}: expected Setup, got {other:?}"),
            }
            let text = error_text(&e);
            assert!(secrets.iter().all(|s| !text.contains(s)), "{says}: a secret in {text}");
        }
    }
    holder.unlock().await.unwrap();
}
