//! The example service run as three processes on one PostgreSQL database: every fire time of
//! every job runs exactly once, SIGTERM lets the tasks in flight finish, and each process's
//! printed metrics agree with the runs it logged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::BTreeMap,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use shedlock_launcher::Backend;

const NODES: usize = 3;

fn sigterm(child: &Child) {
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success(), "kill -TERM {}", child.id());
}

/// The `start` lines of `job` in the run log: (fire second, node).
fn starts_of(log: &std::path::Path, job: &str) -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(&format!("start {job} ")))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[2].parse().unwrap(), f[3].to_owned())
        })
        .collect()
}

/// Waits (up to 6 s, longer than a digest period) for a digest that starts after this call:
/// it has its whole 1.5 s of work ahead. Returns its fire second and the node running it.
async fn fresh_digest(log: &std::path::Path) -> (u64, String) {
    let before = starts_of(log, "digest");
    let deadline = Instant::now() + Duration::from_secs(6);
    while Instant::now() < deadline {
        if let Some(run) = starts_of(log, "digest").into_iter().find(|r| !before.contains(r)) {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no digest started within 6 s: {}", std::fs::read_to_string(log).unwrap_or_default());
}

/// The fire seconds of the digests that ended.
fn starts_of_ends(log: &std::path::Path) -> Vec<u64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("end digest "))
        .map(|l| l.split(' ').nth(2).unwrap().parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_run_every_fire_time_once_and_a_drained_node_finishes_its_task_and_hands_over()
 {
    let url = shedlock_test_support::url(Backend::Postgres, "PostgreSQL").await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    let children: Vec<Child> = (0..NODES)
        .map(|n| {
            Command::new(env!("CARGO_BIN_EXE_shedlock-example-service"))
                .env("DATABASE_URL", &url)
                .env("NODE", format!("node-{n}"))
                .env("RUN_LOG", &log)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // 10 s: at least 4 report, 3 cleanup and 2 digest fire times in the common window. Then
    // SIGTERM to the one node whose digest (1.5 s of work) is in flight, found in the run log:
    // it drains (its digest finishes and releases the lock) and exits, and the other two take
    // the next fire times.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (in_flight, runner) = fresh_digest(&log).await;
    let k: usize = runner.strip_prefix("node-").unwrap().parse().unwrap();
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let stopping = children[k].take().unwrap();
    let stopped_at = Instant::now();
    let signalled_at =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    sigterm(&stopping);
    let drained =
        tokio::task::spawn_blocking(move || stopping.wait_with_output().unwrap()).await.unwrap();
    // A digest in flight takes at most 1.5 s to finish; the rest of the drain is quick.
    let stop_took = stopped_at.elapsed();
    assert!(stop_took < Duration::from_secs(10), "the drain took {stop_took:?}");
    let said = String::from_utf8_lossy(&drained.stdout);
    assert!(
        said.contains("drained example-service:digest released_after_ms=")
            && said.contains("drain complete=true"),
        "{runner} reports the digest it waited for: {said}"
    );
    assert!(
        starts_of_ends(&log).contains(&in_flight),
        "the digest in flight at SIGTERM (fire {in_flight}) finished"
    );
    // Draining, it took no new lock: no run of any job on it at a fire time a whole second
    // after the signal's second (the margin covers the signal's delivery and handling, which
    // take milliseconds, when it was sent just before a second boundary).
    for job in ["report", "cleanup", "digest"] {
        let late: Vec<u64> = starts_of(&log, job)
            .into_iter()
            .filter(|(second, node)| *node == runner && *second > signalled_at + 1)
            .map(|(second, _)| second)
            .collect();
        assert!(late.is_empty(), "{runner} ran {job} at {late:?}, after SIGTERM at {signalled_at}");
    }
    // The next digest fire time (5 s later) runs on another node.
    let next = in_flight + 5;
    let deadline = Instant::now() + Duration::from_secs(8);
    let taker = loop {
        if let Some((_, node)) = starts_of(&log, "digest").into_iter().find(|(s, _)| *s == next) {
            break node;
        }
        assert!(Instant::now() < deadline, "nobody ran digest fire {next}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(taker, runner);

    for c in children.iter().flatten() {
        sigterm(c);
    }
    let mut outputs: Vec<_> = tokio::task::spawn_blocking(move || {
        children.into_iter().map(|c| c.map(|c| c.wait_with_output().unwrap())).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    outputs[k] = Some(drained);
    let outputs: Vec<_> = outputs.into_iter().map(Option::unwrap).collect();
    for (n, o) in outputs.iter().enumerate() {
        assert!(
            o.status.success(),
            "node-{n} exited with {:?}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }

    // start/end lines by (job, fire second).
    let text = std::fs::read_to_string(&log).unwrap();
    let mut starts: BTreeMap<(String, u64), Vec<String>> = BTreeMap::new();
    let mut ends: BTreeMap<(String, u64), Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let key = (f[1].to_owned(), f[2].parse::<u64>().unwrap());
        match f[0] {
            "start" => starts.entry(key).or_default().push(f[3].to_owned()),
            "end" => ends.entry(key).or_default().push(f[3].to_owned()),
            other => panic!("unexpected line {other:?}"),
        }
    }
    for (job, period, at_least_fires) in [("report", 2, 4), ("cleanup", 3, 3), ("digest", 5, 2)] {
        let fires: Vec<u64> = starts.keys().filter(|(j, _)| j == job).map(|(_, s)| *s).collect();
        assert!(fires.len() >= at_least_fires, "{job}: fires {fires:?}");
        for (sec, nodes) in starts.iter().filter(|((j, _), _)| j == job) {
            assert_eq!(sec.1 % period, 0, "{job} ran off its schedule at {}", sec.1);
            assert_eq!(nodes.len(), 1, "{job} fire {} ran on {nodes:?}", sec.1);
        }
        assert!(
            fires.windows(2).all(|w| w[1] == w[0] + period),
            "{job}: a fire time was skipped everywhere: {fires:?}"
        );
    }
    assert_eq!(starts, ends, "every task that started finished, also across SIGTERM");

    // Each process's metrics agree with its own runs (scheduled jobs; plus warm-cache, once).
    let mut acquired_total = 0;
    for (n, o) in outputs.iter().enumerate() {
        let node = format!("node-{n}");
        let stdout = String::from_utf8_lossy(&o.stdout);
        for job in ["report", "cleanup", "digest"] {
            let ran = starts.iter().filter(|((j, _), who)| j == job && who[0] == node).count();
            let lock = format!("lock=example-service:{job}");
            let counted: u64 = stdout
                .lines()
                .filter(|l| l.starts_with("metric shedlock_acquired_total ") && l.contains(&lock))
                .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
                .sum();
            assert_eq!(counted as usize, ran, "{node} {job}: metrics {stdout}");
            acquired_total += counted;
        }
        assert!(stdout.contains("provider=postgres"), "{node}: {stdout}");
    }
    assert!(acquired_total > 0);
    let warmed: usize = outputs
        .iter()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| {
                    l.starts_with("metric shedlock_acquired_total ")
                        && l.contains("lock=example-service:warm-cache")
                })
                .count()
        })
        .sum();
    assert_eq!(warmed, 1, "the one-off ran on exactly one node");
}
