//! The connections the provider runs on.

use redis::aio::ConnectionLike;

/// A `redis` connection this provider can use: any async connection that can be cloned cheaply
/// and shared between tasks, such as [`ConnectionManager`](redis::aio::ConnectionManager),
/// [`MultiplexedConnection`](redis::aio::MultiplexedConnection) or (feature `cluster`)
/// `redis::cluster_async::ClusterConnection`.
pub trait RedisConnection: ConnectionLike + Clone + Send + Sync + 'static {}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisConnection for C {}
