//! The figures: acquire latency percentiles and round trips per operation.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use shedlock::{LockConfig, LockProvider};

use crate::{
    factory::InstanceOptions,
    outcome::Figures,
    suite::Suite,
    tools::{
        proxy::{BATCH_FIGURE_NAMES, FaultProxy, round_trips_per_batch, round_trips_per_cycle},
        stats::percentile,
    },
};

const LONG: Duration = Duration::from_secs(120);

/// Measures the figures (the skew bound comes from C18). Failures leave a figure `None`.
pub(crate) async fn measure(suite: &Suite) -> Figures {
    let mut f = Figures::default();
    match latency(suite).await {
        Ok((p50, p99)) => {
            f.acquire_p50_us = Some(p50);
            f.acquire_p99_us = Some(p99);
        }
        Err(e) => tracing::warn!(%e, "acquire latency not measured"),
    }
    if let Some(addr) = suite.hooks().backend_address() {
        match round_trips(suite, addr).await {
            Ok((a, r, b, batch)) => {
                f.round_trips_acquire = Some(a);
                f.round_trips_release = Some(r);
                f.round_trips_background = Some(b);
                match batch {
                    Ok(batch) => f.round_trips_batch = Some(batch),
                    Err(e) => tracing::warn!(%e, "round trips per batch not measured"),
                }
            }
            Err(e) => tracing::warn!(%e, "round trips not measured"),
        }
    }
    f
}

fn cfg(suite: &Suite) -> Result<LockConfig, String> {
    LockConfig::new(suite.lock_name("fig"), LONG, Duration::ZERO).map_err(|e| e.to_string())
}

/// p50 and p99 of successful `try_lock` calls on free names, in microseconds.
async fn latency(suite: &Suite) -> Result<(f64, f64), String> {
    let p = suite.instance().await.map_err(|e| e.to_string())?;
    for _ in 0..5 {
        acquire_release(&p, &cfg(suite)?).await?;
    }
    let mut samples = Vec::with_capacity(suite.options().latency_samples);
    for _ in 0..suite.options().latency_samples.max(1) {
        let c = cfg(suite)?;
        let started = Instant::now();
        let l =
            bounded(p.try_lock(&c)).await?.map_err(|e| e.to_string())?.ok_or("fresh name held")?;
        samples.push(started.elapsed().as_secs_f64() * 1e6);
        bounded(l.unlock()).await?.map_err(|e| e.to_string())?;
    }
    samples.sort_by(f64::total_cmp);
    let p50 = percentile(&samples, 50.0).ok_or("no samples")?;
    let p99 = percentile(&samples, 99.0).ok_or("no samples")?;
    Ok((p50, p99))
}

async fn bounded<T>(fut: impl std::future::Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(Duration::from_secs(10), fut).await.map_err(|_| "call hung".to_owned())
}

async fn acquire_release(p: &Arc<dyn LockProvider>, c: &LockConfig) -> Result<(), String> {
    let l = bounded(p.try_lock(c)).await?.map_err(|e| e.to_string())?.ok_or("fresh name held")?;
    bounded(l.unlock()).await?.map_err(|e| e.to_string())
}

/// Average client→server turnarounds per successful acquire, per release, after the calls
/// (background), and per batch of [`BATCH_FIGURE_NAMES`] names, through the fault proxy
/// ([`crate::tools::proxy::round_trips_per_cycle`], [`round_trips_per_batch`]).
async fn round_trips(
    suite: &Suite,
    upstream: std::net::SocketAddr,
) -> Result<(f64, f64, f64, Result<f64, String>), String> {
    let proxy = FaultProxy::start(upstream).await.map_err(|e| e.to_string())?;
    let p = suite
        .instance_with(InstanceOptions::new(0).with_address(proxy.addr()))
        .await
        .map_err(|e| e.to_string())?;
    let n = suite.options().round_trip_samples.max(1);
    let r = round_trips_per_cycle(&proxy, p.as_ref(), n, || {
        LockConfig::new(suite.lock_name("fig"), LONG, Duration::ZERO)
            .map_err(|_| "an invalid lock name")
    })
    .await?;
    let batches = n.div_ceil(4).max(1);
    let batch = round_trips_per_batch(&proxy, p.as_ref(), batches, BATCH_FIGURE_NAMES, || {
        LockConfig::new(suite.lock_name("fig"), LONG, Duration::ZERO)
            .map_err(|_| "an invalid lock name")
    })
    .await;
    Ok((r.acquire, r.release, r.background, batch))
}
