//! The backends of the zoo and their names.

use std::{
    fmt,
    net::{Ipv4Addr, SocketAddr},
    str::FromStr,
};

use crate::LaunchError;

/// One backend of shedlock's test zoo.
///
/// `name()` is the stable lower-case name used on the command line (`cargo xtask services up
/// postgres`), in `SHEDLOCK_SKIP_BACKENDS` and in docker-compose profiles; `env_var()` is the
/// variable that, when set, makes every launch of that backend use the given URL instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Backend {
    /// PostgreSQL (15 on Debian 12). URL `postgres://postgres@127.0.0.1:PORT/postgres`.
    Postgres,
    /// MariaDB (10.11 on Debian 12), speaking the MySQL protocol. URL
    /// `mysql://root@127.0.0.1:PORT/shedlock`.
    MariaDb,
    /// SQLite: nothing to start; a fresh file in a temp dir. URL `sqlite://DIR/shedlock.db?mode=rwc`.
    Sqlite,
    /// Redis. URL `redis://127.0.0.1:PORT`.
    Redis,
    /// Valkey (the Redis fork). URL `redis://127.0.0.1:PORT`.
    Valkey,
    /// A Redis Cluster of 3 masters with one replica each (6 `redis-server --cluster-enabled yes`
    /// processes, joined by `redis-cli --cluster create`). URL: the six node URLs
    /// `redis://127.0.0.1:PORT` joined by commas, masters first.
    RedisCluster,
    /// memcached. URL `memcache://127.0.0.1:PORT`.
    Memcached,
    /// NATS with JetStream (server 2.11 or newer). URL `nats://127.0.0.1:PORT`.
    Nats,
    /// A MongoDB wire-protocol server. URL `mongodb://127.0.0.1:PORT/?directConnection=true`.
    MongoDb,
    /// A DynamoDB API server (dynalite natively). URL (endpoint) `http://127.0.0.1:PORT`.
    DynamoDb,
    /// An S3 API server with conditional writes (moto natively). URL (endpoint) `http://127.0.0.1:PORT`.
    S3,
    /// One etcd node. URL `http://127.0.0.1:PORT`.
    Etcd,
    /// A 3-node etcd cluster. URL: the three client endpoints joined by commas.
    EtcdCluster,
    /// One ZooKeeper server. URL: the connect string `127.0.0.1:PORT`.
    ZooKeeper,
    /// A 3-node ZooKeeper ensemble. URL: the connect string `127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    ZooKeeperEnsemble,
}

impl Backend {
    /// Every backend, in a stable order.
    pub const ALL: [Backend; 15] = [
        Backend::Postgres,
        Backend::MariaDb,
        Backend::Sqlite,
        Backend::Redis,
        Backend::Valkey,
        Backend::RedisCluster,
        Backend::Memcached,
        Backend::Nats,
        Backend::MongoDb,
        Backend::DynamoDb,
        Backend::S3,
        Backend::Etcd,
        Backend::EtcdCluster,
        Backend::ZooKeeper,
        Backend::ZooKeeperEnsemble,
    ];

    /// The stable lower-case name: `postgres`, `mariadb`, `sqlite`, `redis`, `valkey`,
    /// `redis-cluster`, `memcached`, `nats`, `mongodb`, `dynamodb`, `s3`, `etcd`, `etcd-cluster`, `zookeeper`,
    /// `zookeeper-ensemble`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::MariaDb => "mariadb",
            Backend::Sqlite => "sqlite",
            Backend::Redis => "redis",
            Backend::Valkey => "valkey",
            Backend::RedisCluster => "redis-cluster",
            Backend::Memcached => "memcached",
            Backend::Nats => "nats",
            Backend::MongoDb => "mongodb",
            Backend::DynamoDb => "dynamodb",
            Backend::S3 => "s3",
            Backend::Etcd => "etcd",
            Backend::EtcdCluster => "etcd-cluster",
            Backend::ZooKeeper => "zookeeper",
            Backend::ZooKeeperEnsemble => "zookeeper-ensemble",
        }
    }

    /// Parses a name as printed by [`name`](Self::name), case-insensitively, also accepting the
    /// aliases `postgresql`, `pg`, `mysql`, `mongo`, `dynamo`, `zk`, `zk-ensemble`,
    /// `etcd_cluster` and `zookeeper_ensemble`.
    pub fn from_name(name: &str) -> Option<Backend> {
        let lower = name.trim().to_ascii_lowercase().replace('_', "-");
        let backend = match lower.as_str() {
            "postgres" | "postgresql" | "pg" => Backend::Postgres,
            "mariadb" | "mysql" => Backend::MariaDb,
            "sqlite" => Backend::Sqlite,
            "redis" => Backend::Redis,
            "valkey" => Backend::Valkey,
            "redis-cluster" => Backend::RedisCluster,
            "memcached" | "memcache" => Backend::Memcached,
            "nats" => Backend::Nats,
            "mongodb" | "mongo" => Backend::MongoDb,
            "dynamodb" | "dynamo" => Backend::DynamoDb,
            "s3" => Backend::S3,
            "etcd" => Backend::Etcd,
            "etcd-cluster" => Backend::EtcdCluster,
            "zookeeper" | "zk" => Backend::ZooKeeper,
            "zookeeper-ensemble" | "zk-ensemble" => Backend::ZooKeeperEnsemble,
            _ => return None,
        };
        Some(backend)
    }

    /// The environment variable whose value, when set and non-empty, is used as this backend's
    /// URL instead of starting anything: `SHEDLOCK_POSTGRES_URL`, `SHEDLOCK_MARIADB_URL`,
    /// `SHEDLOCK_SQLITE_URL`, `SHEDLOCK_REDIS_URL`, `SHEDLOCK_VALKEY_URL`,
    /// `SHEDLOCK_REDIS_CLUSTER_URL`,
    /// `SHEDLOCK_MEMCACHED_URL`, `SHEDLOCK_NATS_URL`, `SHEDLOCK_MONGODB_URL`,
    /// `SHEDLOCK_DYNAMODB_URL`, `SHEDLOCK_S3_URL`, `SHEDLOCK_ETCD_URL`,
    /// `SHEDLOCK_ETCD_CLUSTER_URL`, `SHEDLOCK_ZOOKEEPER_URL`, `SHEDLOCK_ZOOKEEPER_ENSEMBLE_URL`.
    pub fn env_var(self) -> &'static str {
        match self {
            Backend::Postgres => "SHEDLOCK_POSTGRES_URL",
            Backend::MariaDb => "SHEDLOCK_MARIADB_URL",
            Backend::Sqlite => "SHEDLOCK_SQLITE_URL",
            Backend::Redis => "SHEDLOCK_REDIS_URL",
            Backend::Valkey => "SHEDLOCK_VALKEY_URL",
            Backend::RedisCluster => "SHEDLOCK_REDIS_CLUSTER_URL",
            Backend::Memcached => "SHEDLOCK_MEMCACHED_URL",
            Backend::Nats => "SHEDLOCK_NATS_URL",
            Backend::MongoDb => "SHEDLOCK_MONGODB_URL",
            Backend::DynamoDb => "SHEDLOCK_DYNAMODB_URL",
            Backend::S3 => "SHEDLOCK_S3_URL",
            Backend::Etcd => "SHEDLOCK_ETCD_URL",
            Backend::EtcdCluster => "SHEDLOCK_ETCD_CLUSTER_URL",
            Backend::ZooKeeper => "SHEDLOCK_ZOOKEEPER_URL",
            Backend::ZooKeeperEnsemble => "SHEDLOCK_ZOOKEEPER_ENSEMBLE_URL",
        }
    }

    /// How many server processes (nodes) this backend runs: 6 for the Redis Cluster, 3 for the
    /// other cluster variants, 0 for SQLite, 1 otherwise.
    pub fn node_count(self) -> usize {
        match self {
            Backend::Sqlite => 0,
            Backend::RedisCluster => 6,
            Backend::EtcdCluster | Backend::ZooKeeperEnsemble => 3,
            _ => 1,
        }
    }

    /// The docker-compose service names (in `docker-compose.yml` at the workspace root) that
    /// provide this backend; the profile has the backend's [`name`](Self::name).
    pub fn compose_services(self) -> &'static [&'static str] {
        match self {
            Backend::Postgres => &["postgres"],
            Backend::MariaDb => &["mariadb"],
            Backend::Sqlite => &[],
            Backend::Redis => &["redis"],
            Backend::Valkey => &["valkey"],
            Backend::RedisCluster => &[
                "redis-cluster-1",
                "redis-cluster-2",
                "redis-cluster-3",
                "redis-cluster-4",
                "redis-cluster-5",
                "redis-cluster-6",
            ],
            Backend::Memcached => &["memcached"],
            Backend::Nats => &["nats"],
            Backend::MongoDb => &["mongodb"],
            Backend::DynamoDb => &["dynamodb"],
            Backend::S3 => &["s3"],
            Backend::Etcd => &["etcd"],
            Backend::EtcdCluster => &["etcd-1", "etcd-2", "etcd-3"],
            Backend::ZooKeeper => &["zookeeper"],
            Backend::ZooKeeperEnsemble => &["zk-1", "zk-2", "zk-3"],
        }
    }

    /// The one-shot service of `docker-compose.yml` that completes this backend after its
    /// services are up (`docker compose run --rm <it>`): the Redis Cluster's `redis-cluster-init`,
    /// which joins the six nodes into a cluster.
    pub fn compose_init(self) -> Option<&'static str> {
        match self {
            Backend::RedisCluster => Some("redis-cluster-init"),
            _ => None,
        }
    }

    /// The fixed loopback ports that `docker-compose.yml` publishes for this backend (client
    /// ports, one per node). These are what docker mode connects to.
    pub fn compose_ports(self) -> &'static [u16] {
        match self {
            Backend::Postgres => &[15432],
            Backend::MariaDb => &[13307],
            Backend::Sqlite => &[],
            Backend::Redis => &[16379],
            Backend::Valkey => &[16380],
            Backend::RedisCluster => &[17001, 17002, 17003, 17004, 17005, 17006],
            Backend::Memcached => &[11311],
            Backend::Nats => &[14222],
            Backend::MongoDb => &[27117],
            Backend::DynamoDb => &[18000],
            Backend::S3 => &[19000],
            Backend::Etcd => &[12379],
            Backend::EtcdCluster => &[22379, 22479, 22579],
            Backend::ZooKeeper => &[12181],
            Backend::ZooKeeperEnsemble => &[22181, 22182, 22183],
        }
    }

    /// The URL of this backend when its client ports are `ports` on 127.0.0.1 (one per node).
    pub(crate) fn url_for_ports(self, ports: &[u16]) -> String {
        let addrs: Vec<SocketAddr> =
            ports.iter().map(|&p| SocketAddr::from((Ipv4Addr::LOCALHOST, p))).collect();
        self.url_for_addrs(&addrs)
    }

    /// The URL of this backend when its nodes' client addresses are `addrs` (one per node).
    pub(crate) fn url_for_addrs(self, addrs: &[SocketAddr]) -> String {
        let first = addrs.first().copied().unwrap_or(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
        let join = |scheme: &str| {
            addrs.iter().map(|a| format!("{scheme}{a}")).collect::<Vec<_>>().join(",")
        };
        match self {
            Backend::Postgres => format!("postgres://postgres@{first}/postgres"),
            Backend::MariaDb => format!("mysql://root@{first}/shedlock"),
            Backend::Sqlite => String::new(),
            Backend::Redis | Backend::Valkey => format!("redis://{first}"),
            Backend::RedisCluster => join("redis://"),
            Backend::Memcached => format!("memcache://{first}"),
            Backend::Nats => format!("nats://{first}"),
            Backend::MongoDb => format!("mongodb://{first}/?directConnection=true"),
            Backend::DynamoDb | Backend::S3 | Backend::Etcd => format!("http://{first}"),
            Backend::EtcdCluster => join("http://"),
            Backend::ZooKeeper | Backend::ZooKeeperEnsemble => join(""),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = LaunchError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Backend::from_name(s).ok_or_else(|| LaunchError::UnknownBackend { name: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_env_vars_are_distinct() {
        let mut vars = std::collections::HashSet::new();
        for b in Backend::ALL {
            assert_eq!(Backend::from_name(b.name()), Some(b));
            assert_eq!(b.name().parse::<Backend>().unwrap(), b);
            assert!(vars.insert(b.env_var()), "duplicate env var {}", b.env_var());
            assert!(b.env_var().starts_with("SHEDLOCK_") && b.env_var().ends_with("_URL"));
            assert_eq!(b.compose_ports().len(), b.node_count());
        }
        assert_eq!(Backend::from_name("MySQL"), Some(Backend::MariaDb));
        assert_eq!(Backend::from_name("zk_ensemble"), Some(Backend::ZooKeeperEnsemble));
        assert!(matches!(
            "oracle".parse::<Backend>(),
            Err(LaunchError::UnknownBackend { name }) if name == "oracle"
        ));
    }

    #[test]
    fn urls() {
        assert_eq!(
            Backend::Postgres.url_for_ports(&[5]),
            "postgres://postgres@127.0.0.1:5/postgres"
        );
        assert_eq!(
            Backend::ZooKeeperEnsemble.url_for_ports(&[1, 2, 3]),
            "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
        );
        assert_eq!(
            Backend::RedisCluster.url_for_ports(&[1, 2]),
            "redis://127.0.0.1:1,redis://127.0.0.1:2"
        );
        assert_eq!(
            Backend::EtcdCluster.url_for_ports(&[1, 2]),
            "http://127.0.0.1:1,http://127.0.0.1:2"
        );
    }
}
