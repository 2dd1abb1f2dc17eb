//! `cargo xtask services up|down|status`: backends left running between commands, recorded in
//! `target/services/state.json`.

use std::path::PathBuf;

use serde_json::{Value, json};
use shedlock_launcher::{Backend, DetachedService, LaunchOptions, Service};

use crate::util::{root, take_flag, take_via};

fn state_file() -> PathBuf {
    root().join("target/services/state.json")
}

fn to_json(d: &DetachedService) -> Value {
    json!({
        "backend": d.backend.name(),
        "url": d.url,
        "env": d.backend.env_var(),
        "process_groups": d.process_groups.iter().map(|(g, s)| json!([g, s])).collect::<Vec<_>>(),
        "dir": d.dir.as_ref().map(|p| p.display().to_string()),
        "compose": d.compose.as_ref().map(|(f, p, s)| json!({"file": f.display().to_string(), "profile": p, "services": s})),
    })
}

fn from_json(v: &Value) -> Option<DetachedService> {
    let backend = Backend::from_name(v.get("backend")?.as_str()?)?;
    let url = v.get("url")?.as_str()?.to_owned();
    let groups = v
        .get("process_groups")?
        .as_array()?
        .iter()
        .filter_map(|g| {
            let g = g.as_array()?;
            Some((
                i32::try_from(g.first()?.as_i64()?).ok()?,
                i32::try_from(g.get(1)?.as_i64()?).ok()?,
            ))
        })
        .collect();
    let dir = v.get("dir").and_then(Value::as_str).map(PathBuf::from);
    let compose = v.get("compose").filter(|c| !c.is_null()).and_then(|c| {
        Some((
            PathBuf::from(c.get("file")?.as_str()?),
            c.get("profile")?.as_str()?.to_owned(),
            c.get("services")?
                .as_array()?
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect(),
        ))
    });
    Some(DetachedService::new(backend, url, groups, dir, compose))
}

/// The recorded services (an unreadable or missing file is an empty list).
pub fn load() -> Vec<DetachedService> {
    let Ok(text) = std::fs::read_to_string(state_file()) else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return Vec::new();
    };
    v.get("services")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(from_json).collect())
        .unwrap_or_default()
}

fn save(services: &[DetachedService]) -> Result<(), String> {
    let path = state_file();
    if services.is_empty() {
        let _ = std::fs::remove_file(&path);
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let v = json!({ "services": services.iter().map(to_json).collect::<Vec<_>>() });
    let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("writing {}: {e}", path.display()))
}

/// `services <up|down|status> ...`
pub fn run(args: &[String]) -> Result<u8, String> {
    let mut args = args.to_vec();
    if args.is_empty() {
        return Err("services needs up, down or status".to_owned());
    }
    let sub = args.remove(0);
    match sub.as_str() {
        "up" => up(args),
        "down" => down(),
        "status" => status(),
        other => Err(format!("unknown services command {other:?} (up, down, status)")),
    }
}

fn up(mut args: Vec<String>) -> Result<u8, String> {
    let via = take_via(&mut args)?;
    let all = take_flag(&mut args, "--all");
    let mut backends: Vec<Backend> = if all { Backend::ALL.to_vec() } else { Vec::new() };
    for a in &args {
        if a.starts_with('-') {
            return Err(format!("unknown option {a:?}"));
        }
        let b: Backend = a.parse().map_err(|e: shedlock_launcher::LaunchError| e.to_string())?;
        if !backends.contains(&b) {
            backends.push(b);
        }
    }
    if backends.is_empty() {
        return Err("services up needs backend names or --all".to_owned());
    }
    let mut recorded = load();
    // Already running from an earlier `up`: print it again instead of starting a second one.
    recorded.retain(DetachedService::is_running);
    let mut opts = LaunchOptions::new().watchdog(false).ignore_env(true);
    if let Some(v) = via {
        opts = opts.via(v);
    }
    let todo: Vec<Backend> =
        backends.iter().copied().filter(|b| !recorded.iter().any(|d| d.backend == *b)).collect();
    let results: Vec<(Backend, Result<Service, shedlock_launcher::LaunchError>)> =
        std::thread::scope(|s| {
            let handles: Vec<_> = todo
                .iter()
                .map(|b| {
                    let opts = opts.clone();
                    let b = *b;
                    s.spawn(move || (b, Service::start(b, &opts)))
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
    let mut failed = 0u8;
    for (b, r) in results {
        match r {
            Ok(s) => {
                eprintln!("xtask: {b} ready in {} ms", s.started_in().as_millis());
                recorded.push(s.detach());
            }
            Err(e) => {
                eprintln!("xtask: {b}: {e}");
                failed = 1;
            }
        }
    }
    save(&recorded)?;
    for b in &backends {
        if let Some(d) = recorded.iter().find(|d| d.backend == *b) {
            println!("{}={}", b.env_var(), d.url);
        }
    }
    eprintln!(
        "xtask: recorded in {} (stop with `cargo xtask services down`)",
        state_file().display()
    );
    Ok(failed)
}

fn down() -> Result<u8, String> {
    let recorded = load();
    if recorded.is_empty() {
        eprintln!("xtask: no services recorded in {}", state_file().display());
    }
    for d in &recorded {
        d.stop();
        eprintln!("xtask: stopped {} ({})", d.backend, d.url);
    }
    save(&[])?;
    Ok(0)
}

fn status() -> Result<u8, String> {
    for d in load() {
        let state = if d.compose.is_some() {
            "docker compose"
        } else if d.is_running() {
            "running"
        } else {
            "DEAD"
        };
        println!("{:<20} {:<8} {}={}", d.backend.name(), state, d.backend.env_var(), d.url);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_json() {
        let d = DetachedService::new(
            Backend::EtcdCluster,
            "http://127.0.0.1:1,http://127.0.0.1:2".to_owned(),
            vec![(100, 15), (101, 15)],
            Some(PathBuf::from("/tmp/x")),
            Some((
                PathBuf::from("/r/docker-compose.yml"),
                "etcd-cluster".to_owned(),
                vec!["etcd-1".to_owned()],
            )),
        );
        assert_eq!(from_json(&to_json(&d)), Some(d));
        let plain = DetachedService::new(
            Backend::Redis,
            "redis://127.0.0.1:3".to_owned(),
            vec![(7, 15)],
            None,
            None,
        );
        assert_eq!(from_json(&to_json(&plain)), Some(plain));
    }
}
