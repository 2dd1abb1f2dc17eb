//! `shedlock-launch <backend>... [--via auto|native|docker] [--hold]`: starts backends and prints
//! `SHEDLOCK_*_URL=...` lines (plus `# pids` and `# dir` comment lines). With `--hold` it keeps
//! them running until stdin closes or the process is killed (the watchdog then stops them);
//! without it, it stops them and exits (a start/readiness check).

use std::{io::Read, process::ExitCode};

use shedlock_launcher::{Backend, LaunchOptions, Service, Via};

fn main() -> ExitCode {
    let mut backends = Vec::new();
    let mut opts = LaunchOptions::new();
    let mut hold = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--hold" => hold = true,
            "--ignore-env" => opts = opts.ignore_env(true),
            "--via" => match args.next().map(|v| v.parse::<Via>()) {
                Some(Ok(via)) => opts = opts.via(via),
                Some(Err(e)) => return fail(&e.to_string()),
                None => return fail("--via needs a value"),
            },
            name => match name.parse::<Backend>() {
                Ok(b) => backends.push(b),
                Err(e) => return fail(&e.to_string()),
            },
        }
    }
    if backends.is_empty() {
        return fail(
            "usage: shedlock-launch <backend>... [--via auto|native|docker] [--ignore-env] [--hold]",
        );
    }
    let mut services = Vec::new();
    for b in backends {
        match Service::start(b, &opts) {
            Ok(s) => {
                println!("{}={}", b.env_var(), s.url());
                let pids: Vec<String> = s.pids().iter().flatten().map(u32::to_string).collect();
                println!("# pids {}", pids.join(" "));
                if let Some(dir) = s.dir() {
                    println!("# dir {}", dir.display());
                }
                println!("# started in {} ms", s.started_in().as_millis());
                services.push(s);
            }
            Err(e) => return fail(&e.to_string()),
        }
    }
    println!("# ready");
    if hold {
        // Wait for stdin to close (or for a signal: the watchdog cleans up then).
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    }
    drop(services);
    ExitCode::SUCCESS
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("shedlock-launch: {msg}");
    ExitCode::FAILURE
}
