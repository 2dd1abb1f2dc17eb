//! Signals to processes: SIGSTOP and SIGCONT to one process or to its whole tree (a fault
//! scenario pauses a server that way, C29 its holder node).

/// SIGSTOP (`stop`) or SIGCONT to a process, or (`tree`) to it and every process descended
/// from it: a server's worker processes may lead process groups of their own (PostgreSQL's
/// backends call `setsid`), so pausing the group would leave them answering.
pub(crate) fn signal_pid(pid: u32, stop: bool, tree: bool) -> Result<(), String> {
    #[cfg(unix)]
    {
        use rustix::process::{Pid, Signal, kill_process};
        let sig = if stop { Signal::STOP } else { Signal::CONT };
        let pids = if tree { descendants_and_self(pid) } else { vec![pid] };
        let mut first_error = None;
        for q in pids {
            let Some(p) = i32::try_from(q).ok().and_then(Pid::from_raw) else { continue };
            if let Err(e) = kill_process(p, sig)
                && q == pid
            {
                first_error = Some(format!("signal to {pid}: {e}"));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
    #[cfg(not(unix))]
    {
        let _ = (pid, stop, tree);
        Err("signals need Unix".to_owned())
    }
}

/// `pid` and every process descended from it, from `/proc/<pid>/stat` (parents first).
pub(crate) fn descendants_and_self(pid: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(q) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{q}/stat")) else { continue };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { continue };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|v| v.parse().ok()) {
            parent_of.push((q, ppid));
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(q, _)| *q));
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use std::{process::Command, time::Duration};

    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_tree_holds_a_child_that_leads_its_own_session() {
        // `setsid sleep` leads a session (and group) of its own, as PostgreSQL's backends do.
        let mut child = Command::new("setsid").args(["sleep", "30"]).spawn().unwrap();
        let mut found = false;
        for _ in 0..100 {
            if descendants_and_self(std::process::id()).contains(&child.id()) {
                found = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(found, "the child is in this process's tree");
        assert_eq!(descendants_and_self(child.id()).first(), Some(&child.id()));
    }
}
