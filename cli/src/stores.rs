//! The stores that are not SQL databases: Redis (and Valkey, Redis Cluster), memcached, NATS,
//! MongoDB, etcd, ZooKeeper, DynamoDB and S3, each opened as the application's provider would be
//! (same key prefix, bucket, collection, table or root). Credentials come from the URL or the
//! environment and are never printed.

// A build with only some of the backends leaves parts of the shared code unused.
#![allow(unused)]

use std::{path::Path, sync::Arc, time::Duration};

use shedlock::{LockProvider, ProviderBuilder};

use crate::{
    StoreArgs,
    backend::{Opened, plaintext_with_ca},
    secrets::percent_decode,
};

/// The part of a URL after `scheme://`, without its user information (which a caller reads
/// separately), and the user and password given in it.
struct Authority<'a> {
    hosts: &'a str,
    path: &'a str,
    user: Option<&'a str>,
    password: Option<&'a str>,
}

/// Splits `rest` (what follows `scheme://`) into user information, hosts and path.
fn authority(rest: &str) -> Authority<'_> {
    let (before_path, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (userinfo, hosts) = match before_path.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, before_path),
    };
    let (user, password) = match userinfo {
        Some(u) => match u.split_once(':') {
            Some((user, pass)) => (Some(user), Some(pass)),
            None => (Some(u), None),
        },
        None => (None, None),
    };
    Authority { hosts, path, user: user.filter(|u| !u.is_empty()), password }
}

/// An error that may quote a URL, said without it.
fn hidden(what: &str, e: impl std::fmt::Display, secrets: &[&str]) -> Box<dyn std::error::Error> {
    let mut text = e.to_string();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        text = text.replace(s, "***");
    }
    format!("{what}: {text}").into()
}

#[cfg(feature = "redis")]
pub(crate) async fn redis(
    url: &str,
    password: Option<String>,
    args: &StoreArgs,
    timeout: Duration,
) -> Opened {
    use redis::IntoConnectionInfo;
    use shedlock_redis::RedisLockProvider;

    let given = password.clone().unwrap_or_default();
    let secrets = [given.as_str(), authority(url_rest(url)).password.unwrap_or("")];
    // Several comma-separated node URLs: a Redis Cluster.
    let urls: Vec<&str> = url.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
    let ca = match &args.ca_file {
        Some(path) => {
            if let Some(plain) = urls.iter().find(|u| {
                let scheme = u.split_once("://").map_or("", |(s, _)| s).to_ascii_lowercase();
                !matches!(scheme.as_str(), "rediss" | "valkeys")
            }) {
                let scheme = plain.split_once("://").map_or("", |(s, _)| s);
                return Err(plaintext_with_ca(&format!("{scheme}://; use rediss://")));
            }
            Some(read_ca(path)?)
        }
        None => None,
    };
    let mut infos = Vec::new();
    for u in &urls {
        let mut info = u
            .into_connection_info()
            .map_err(|e| hidden("the URL could not be read", e, &secrets))?;
        if let Some(p) = &password {
            let settings = info.redis_settings().clone().set_password(p);
            info = info.set_redis_settings(settings);
        }
        infos.push(info);
    }
    let err = |e: redis::RedisError| hidden("cannot connect to Redis", e, &secrets);
    if infos.len() > 1 {
        let mut builder = redis::cluster::ClusterClientBuilder::new(infos)
            .connection_timeout(timeout)
            .response_timeout(timeout);
        if let Some(pem) = ca {
            builder = redis_cluster_ca(builder, pem)?;
        }
        let client = builder.build().map_err(err)?;
        let conn = client.get_async_connection().await.map_err(err)?;
        return Ok(Arc::new(redis_config(RedisLockProvider::builder(conn), args).build().await?));
    }
    let Some(info) = infos.pop() else { return Err("the URL names no Redis server".into()) };
    let client = match ca {
        Some(pem) => redis_client_with_ca(info, pem)?,
        None => redis::Client::open(info).map_err(err)?,
    };
    let manager = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1);
    let conn =
        redis::aio::ConnectionManager::new_with_config(client, manager).await.map_err(err)?;
    Ok(Arc::new(redis_config(RedisLockProvider::builder(conn), args).build().await?))
}

/// A `rediss://` client that trusts the CA `pem` alone.
#[cfg(all(feature = "redis", feature = "tls-rustls"))]
fn redis_client_with_ca(
    info: redis::ConnectionInfo,
    pem: Vec<u8>,
) -> Result<redis::Client, Box<dyn std::error::Error>> {
    let certs = redis::TlsCertificates { client_tls: None, root_cert: Some(pem) };
    redis::Client::build_with_tls(info, certs)
        .map_err(|e| format!("cannot use the CA file for Redis: {e}").into())
}

/// The cluster's nodes trust the CA `pem` alone.
#[cfg(all(feature = "redis", feature = "tls-rustls"))]
fn redis_cluster_ca(
    builder: redis::cluster::ClusterClientBuilder,
    pem: Vec<u8>,
) -> Result<redis::cluster::ClusterClientBuilder, Box<dyn std::error::Error>> {
    Ok(builder.certs(redis::TlsCertificates { client_tls: None, root_cert: Some(pem) }))
}

#[cfg(all(feature = "redis", not(feature = "tls-rustls")))]
fn redis_client_with_ca(
    _: redis::ConnectionInfo,
    _: Vec<u8>,
) -> Result<redis::Client, Box<dyn std::error::Error>> {
    Err(NO_RUSTLS.into())
}

#[cfg(all(feature = "redis", not(feature = "tls-rustls")))]
fn redis_cluster_ca(
    _: redis::cluster::ClusterClientBuilder,
    _: Vec<u8>,
) -> Result<redis::cluster::ClusterClientBuilder, Box<dyn std::error::Error>> {
    Err(NO_RUSTLS.into())
}

/// The error of a TLS setting for Redis in a build without the `tls-rustls` feature.
#[cfg(not(feature = "tls-rustls"))]
const NO_RUSTLS: &str = "this binary was built without TLS for Redis (feature `tls-rustls`)";

/// The CA file's contents, checked to hold at least one PEM certificate.
fn read_ca(path: &Path) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot read the CA file {}: {e}", path.display()))?;
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(format!("the CA file {} holds no PEM certificate", path.display()).into());
    }
    Ok(pem)
}

/// The application's Redis settings: prefix, environment, mode and the call limit.
#[cfg(feature = "redis")]
fn redis_config<C: shedlock_redis::RedisConnection>(
    b: shedlock_redis::RedisLockProviderBuilder<C>,
    args: &StoreArgs,
) -> shedlock_redis::RedisLockProviderBuilder<C> {
    let mut b = b.operation_timeout(Some(args.timeout()));
    if let Some(prefix) = &args.key_prefix {
        b = b.key_prefix(prefix);
    }
    if let Some(env) = &args.environment {
        b = b.environment(env);
    }
    if args.shedlock_compatible { b.shedlock_compatible() } else { b }
}

/// What follows `scheme://` (the whole URL if it has no scheme).
fn url_rest(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, r)| r)
}

#[cfg(feature = "memcached")]
pub(crate) fn memcached(url: &str, args: &StoreArgs) -> Opened {
    let a = authority(url_rest(url));
    if a.user.is_some() {
        return Err("shedlock-memcached sends no login: give host:port only".into());
    }
    let mut b = shedlock_memcached::MemcachedLockProvider::builder(a.hosts).max_connections(1);
    if let Some(prefix) = &args.key_prefix {
        b = b.key_prefix(prefix);
    }
    // A CA means memcached's TLS listener (`-Z`), verified against it (the provider's `tls`
    // feature, on with the tool's `tls-rustls`).
    if let Some(path) = &args.ca_file {
        b = b.tls_ca_pem(String::from_utf8_lossy(&read_ca(path)?).into_owned());
    }
    Ok(Arc::new(b.operation_timeout(Some(args.timeout())).build()?))
}

#[cfg(feature = "nats")]
pub(crate) async fn nats(url: &str, password: Option<String>, args: &StoreArgs) -> Opened {
    let a = authority(url_rest(url));
    let given = password.clone().unwrap_or_default();
    let secrets = [given.as_str(), a.password.unwrap_or(""), a.user.unwrap_or("")];
    let timeout = args.timeout();
    let mut options = async_nats::ConnectOptions::new()
        .connection_timeout(timeout)
        .request_timeout(Some(timeout));
    // `nats://USER:PASSWORD@…` or `nats://TOKEN@…`; `SHEDLOCK_PASSWORD` overrides the password
    // (or is the token when the URL names no user).
    let user = a.user.map(percent_decode);
    let password = password.or_else(|| a.password.map(percent_decode));
    options = match (user, password) {
        (Some(user), Some(p)) => options.user_and_password(user, p),
        (Some(token), None) | (None, Some(token)) => options.token(token),
        (None, None) => options,
    };
    // tls:// (or a CA) requires TLS, verified against the CA file if one is given (then the
    // system's roots are not trusted).
    let tls = url.get(..6).is_some_and(|s| s.eq_ignore_ascii_case("tls://"));
    if let Some(path) = &args.ca_file {
        read_ca(path)?;
        options = options.add_root_certificates(path.clone());
    }
    if tls || args.ca_file.is_some() {
        options = options.require_tls(true);
    }
    // The server addresses without the user information (given through the options).
    let scheme = if tls { "tls" } else { "nats" };
    let servers: Vec<String> =
        a.hosts.split(',').map(|h| format!("{scheme}://{}", h.trim())).collect();
    // The provider's connect types the failures (refused credentials and TLS: Setup) and
    // watches for permission violations, so that a request the user may not publish fails at
    // once, naming the permission, instead of timing out.
    let servers = servers.join(",");
    let connect = shedlock_nats::NatsLockProvider::connect(&servers, options);
    let b = tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| "cannot connect to NATS: timed out")?
        .map_err(|e| hidden("cannot connect to NATS", e, &secrets))?;
    let mut b = b.operation_timeout(Some(timeout));
    if let Some(bucket) = &args.bucket {
        b = b.bucket(bucket);
    }
    Ok(Arc::new(b.build()?))
}

#[cfg(feature = "mongodb")]
pub(crate) async fn mongodb(url: &str, password: Option<String>, args: &StoreArgs) -> Opened {
    use mongodb::options::ClientOptions;

    let a = authority(url_rest(url));
    let given = password.clone().unwrap_or_default();
    let secrets = [given.as_str(), a.password.unwrap_or("")];
    let timeout = args.timeout();
    let mut o = ClientOptions::parse(url)
        .await
        .map_err(|e| hidden("the URL could not be read", e, &secrets))?;
    if let (Some(p), Some(credential)) = (password, o.credential.as_mut()) {
        credential.password = Some(p);
    }
    if let Some(path) = &args.ca_file {
        use mongodb::options::{Tls, TlsOptions};
        read_ca(path)?;
        let mut tls = match o.tls.take() {
            Some(Tls::Disabled) => return Err(plaintext_with_ca("tls=false")),
            Some(Tls::Enabled(t)) => t,
            None => TlsOptions::default(),
        };
        tls.ca_file_path = Some(path.clone());
        o.tls = Some(Tls::Enabled(tls));
    }
    o.server_selection_timeout = Some(timeout);
    o.connect_timeout = Some(timeout);
    o.app_name = Some("shedlock-cli".to_owned());
    let Some(database) = o.default_database.clone() else {
        return Err("the URL names no database: mongodb://HOST/DATABASE".into());
    };
    let client = mongodb::Client::with_options(o)
        .map_err(|e| hidden("cannot connect to MongoDB", e, &secrets))?;
    let mut b = shedlock_mongodb::MongoLockProvider::builder(client.database(&database))
        .operation_timeout(Some(timeout));
    if let Some(collection) = &args.collection {
        b = b.collection(collection);
    }
    if args.shedlock_compatible {
        b = b.shedlock_compatible();
    }
    Ok(Arc::new(b.build()?))
}

#[cfg(feature = "etcd")]
pub(crate) async fn etcd(url: &str, password: Option<String>, args: &StoreArgs) -> Opened {
    let a = authority(url_rest(url));
    let given = password.clone().unwrap_or_default();
    let secrets = [given.as_str(), a.password.unwrap_or("")];
    let timeout = args.timeout();
    // etcd:// is plain HTTP to the client port; http:// and https:// are passed on.
    let tls = url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    let scheme = if tls { "https" } else { "http" };
    let endpoints: Vec<String> =
        a.hosts.split(',').map(|h| format!("{scheme}://{}", h.trim())).collect();
    let mut b = shedlock_etcd::EtcdClientBuilder::new(endpoints)
        .connect_timeout(timeout)
        .request_timeout(timeout);
    // A password only over https:// (the provider refuses it over plaintext: etcd's login
    // carries it as is).
    if let Some(user) = a.user {
        let p = password.or_else(|| a.password.map(percent_decode)).unwrap_or_default();
        b = b.user(percent_decode(user), p);
    }
    // https:// trusts exactly the CA given (the provider uses no system roots).
    match &args.ca_file {
        Some(_) if !tls => {
            let scheme = url.split_once("://").map_or("", |(s, _)| s);
            return Err(plaintext_with_ca(&format!("{scheme}://; use https://")));
        }
        Some(path) => b = etcd_ca(b, path)?,
        None => {}
    }
    let client = b.connect().await.map_err(|e| hidden("cannot connect to etcd", e, &secrets))?;
    let mut b = shedlock_etcd::EtcdLockProvider::builder(client).operation_timeout(Some(timeout));
    if let Some(prefix) = &args.key_prefix {
        b = b.key_prefix(prefix);
    }
    Ok(Arc::new(b.build()?))
}

/// The client trusts the CA file alone.
#[cfg(all(feature = "etcd", feature = "tls-rustls"))]
fn etcd_ca(
    b: shedlock_etcd::EtcdClientBuilder,
    path: &Path,
) -> Result<shedlock_etcd::EtcdClientBuilder, Box<dyn std::error::Error>> {
    let pem = String::from_utf8(read_ca(path)?)
        .map_err(|_| format!("the CA file {} is not text (PEM)", path.display()))?;
    Ok(b.tls_ca_pem(pem))
}

#[cfg(all(feature = "etcd", not(feature = "tls-rustls")))]
fn etcd_ca(
    _: shedlock_etcd::EtcdClientBuilder,
    _: &Path,
) -> Result<shedlock_etcd::EtcdClientBuilder, Box<dyn std::error::Error>> {
    Err("this binary was built without TLS for etcd (feature `tls-rustls`)".into())
}

#[cfg(feature = "zookeeper")]
pub(crate) fn zookeeper(url: &str, password: Option<String>, args: &StoreArgs) -> Opened {
    let a = authority(url_rest(url));
    let timeout = args.timeout();
    let mut b = shedlock_zookeeper::ZooKeeperLockProvider::builder(a.hosts)
        .connection_timeout(timeout)
        .operation_timeout(Some(timeout));
    // `zookeeper://USER:PASSWORD@…` (or the password in SHEDLOCK_PASSWORD): the `digest` scheme.
    // The nodes this tool may create (the clock node of an empty tree) get the provider's
    // default ACL, creator-only.
    match (a.user.map(percent_decode), password.or_else(|| a.password.map(percent_decode))) {
        (Some(user), Some(p)) => b = b.digest_auth(user, p),
        (Some(_), None) => {
            return Err("ZooKeeper digest authentication needs a password: \
                        zookeeper://USER:PASSWORD@HOSTS/ROOT, or the password in \
                        SHEDLOCK_PASSWORD"
                .into());
        }
        (None, Some(_)) if a.password.is_some() => {
            return Err("ZooKeeper digest authentication needs a user: \
                        zookeeper://USER:PASSWORD@HOSTS/ROOT"
                .into());
        }
        // SHEDLOCK_PASSWORD without a user in the URL: no authentication (as for the other
        // stores, the password goes with the URL's user).
        (None, _) => {}
    }
    if !a.path.is_empty() && a.path != "/" {
        b = b.root(a.path);
    }
    // TLS to the servers' secureClientPort, trusting the CA file alone (the provider never
    // uses the system's roots); needs the `tls-rustls` feature (else build() says so).
    if let Some(path) = &args.ca_file {
        let pem = String::from_utf8(read_ca(path)?)
            .map_err(|_| format!("the CA file {} is not text (PEM)", path.display()))?;
        b = b.tls_ca_pem(pem);
    }
    Ok(Arc::new(b.build()?))
}

/// The AWS SDK configuration from the environment, as the SDK's own tools read it:
/// `AWS_ENDPOINT_URL` (optional: a local or compatible server), `AWS_REGION` (or
/// `AWS_DEFAULT_REGION`, default `us-east-1`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
/// `AWS_SESSION_TOKEN`.
#[cfg(any(feature = "dynamodb", feature = "s3"))]
fn aws_config(
    timeout: Duration,
    ca_file: Option<&Path>,
) -> Result<aws_types::SdkConfig, Box<dyn std::error::Error>> {
    use aws_credential_types::Credentials;
    use aws_smithy_runtime_api::client::behavior_version::BehaviorVersion;
    use aws_types::{
        SdkConfig,
        region::Region,
        sdk_config::{RetryConfig, SharedCredentialsProvider, TimeoutConfig},
    };

    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let region = var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION"));
    let (Some(id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) else {
        return Err("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                    AWS_SESSION_TOKEN for temporary ones)"
            .into());
    };
    let endpoint = var("AWS_ENDPOINT_URL");
    let plain = endpoint.as_deref().is_some_and(|e| e.to_ascii_lowercase().starts_with("http://"));
    let http = match ca_file {
        Some(_) if plain => return Err(plaintext_with_ca("AWS_ENDPOINT_URL=http://…")),
        None if plain => aws_smithy_http_client::Builder::new().build_http(),
        _ => {
            use aws_smithy_http_client::tls;
            let mut trust = tls::TrustStore::default();
            if let Some(path) = ca_file {
                trust = tls::TrustStore::empty().with_pem_certificate(read_ca(path)?);
            }
            let context = tls::TlsContext::builder()
                .with_trust_store(trust)
                .build()
                .map_err(|e| format!("cannot use the CA file for AWS: {e}"))?;
            aws_smithy_http_client::Builder::new()
                .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::Ring))
                .tls_context(context)
                .build_https()
        }
    };
    let mut b = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.unwrap_or_else(|| "us-east-1".to_owned())))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            id,
            secret,
            var("AWS_SESSION_TOKEN"),
            None,
            "environment",
        )))
        .http_client(http)
        .timeout_config(TimeoutConfig::builder().operation_attempt_timeout(timeout).build())
        .retry_config(RetryConfig::standard().with_max_attempts(2));
    if let Some(e) = endpoint {
        b = b.endpoint_url(e);
    }
    Ok(b.build())
}

#[cfg(feature = "dynamodb")]
pub(crate) fn dynamodb(url: &str, args: &StoreArgs) -> Opened {
    let table = url_rest(url).trim_end_matches('/');
    if table.is_empty() || table.contains('/') {
        return Err("give the table as dynamodb://TABLE".into());
    }
    let config = aws_config(args.timeout(), args.ca_file.as_deref())?;
    let mut b = shedlock_dynamodb::DynamoDbLockProvider::builder_from_config(&config)
        .table(table)
        .operation_timeout(Some(args.timeout()));
    if args.shedlock_compatible {
        b = b.shedlock_compatible();
    }
    Ok(Arc::new(b.build()?))
}

#[cfg(feature = "s3")]
pub(crate) fn s3(url: &str, args: &StoreArgs) -> Opened {
    let rest = url_rest(url);
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err("give the bucket as s3://BUCKET/PREFIX".into());
    }
    let config = aws_config(args.timeout(), args.ca_file.as_deref())?;
    let mut b = shedlock_s3::S3LockProvider::builder_from_config(&config, bucket)
        .operation_timeout(Some(args.timeout()));
    if !prefix.is_empty() {
        b = b.prefix(prefix);
    }
    Ok(Arc::new(b.build()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_split_user_password_hosts_and_path() {
        let a = authority("ops:s3cr@t@h1:1,h2:2/root/x");
        assert_eq!(
            (a.user, a.password, a.hosts, a.path),
            (Some("ops"), Some("s3cr@t"), "h1:1,h2:2", "/root/x")
        );
        let a = authority("h:1");
        assert_eq!((a.user, a.password, a.hosts, a.path), (None, None, "h:1", ""));
        let a = authority(":only-pass@h");
        assert_eq!((a.user, a.password, a.hosts), (None, Some("only-pass"), "h"));
    }

    #[test]
    fn errors_never_repeat_a_secret() {
        let e = hidden("x", "failed at redis://u:pw-123@h", &["pw-123", ""]);
        assert!(!e.to_string().contains("pw-123"), "{e}");
    }
}
