//! Server processes in their own process groups, stopped by group, and a watchdog that stops them
//! when the process that started them is gone.

use std::{
    ffi::OsString,
    fs::File,
    io::{Read, Seek, SeekFrom},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use nix::{sys::signal::Signal, unistd::Pid};

use crate::{LaunchError, probe::Probe};

/// How to run one server process.
#[derive(Debug, Clone)]
pub(crate) struct NodeSpec {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) log: PathBuf,
    pub(crate) probe: Probe,
    /// Sent to the process group to stop the server gracefully.
    pub(crate) stop_signal: Signal,
    /// The network namespace to run in (`ip netns exec`, which execs: the pid stays the
    /// server's).
    pub(crate) netns: Option<String>,
}

impl NodeSpec {
    pub(crate) fn new(program: &Path, log: PathBuf, probe: Probe) -> Self {
        NodeSpec {
            program: program.to_path_buf(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            log,
            probe,
            stop_signal: Signal::SIGTERM,
            netns: None,
        }
    }

    pub(crate) fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }

    pub(crate) fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub(crate) fn cwd(mut self, dir: &Path) -> Self {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    pub(crate) fn stop_with(mut self, sig: Signal) -> Self {
        self.stop_signal = sig;
        self
    }

    pub(crate) fn in_netns(mut self, netns: Option<&str>) -> Self {
        self.netns = netns.map(str::to_owned);
        self
    }

    /// The program and arguments as run: inside `ip netns exec <netns>` when placed.
    fn argv(&self) -> Vec<OsString> {
        let mut v = Vec::with_capacity(self.args.len() + 4);
        if let Some(ns) = &self.netns {
            v.push(OsString::from(ip_program()));
            v.extend(["netns", "exec", ns.as_str()].map(OsString::from));
        }
        v.push(self.program.clone().into_os_string());
        v.extend(self.args.iter().cloned());
        v
    }

    /// The command line, shell-quoted, for error messages.
    pub(crate) fn command_line(&self) -> String {
        let argv = self.argv();
        argv.iter().map(|a| shell_quote(&a.to_string_lossy())).collect::<Vec<_>>().join(" ")
    }
}

/// iproute2's `ip`: `/usr/sbin/ip` or `/sbin/ip` if present, else `ip` on the PATH.
pub(crate) fn ip_program() -> &'static str {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("ip")
}

pub(crate) fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A running server process, leader of its own process group.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) child: Child,
    pub(crate) spec: NodeSpec,
}

impl Running {
    pub(crate) fn pgid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(i32::MAX)
    }

    /// `Some(status)` if the process has exited.
    pub(crate) fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot wait for it: {e}")),
        }
    }
}

/// Starts `spec` as the leader of a new process group, its output appended to its log.
pub(crate) fn spawn(backend: &'static str, spec: &NodeSpec) -> Result<Running, LaunchError> {
    use std::os::unix::process::CommandExt;
    let log =
        std::fs::OpenOptions::new().create(true).append(true).open(&spec.log).map_err(|e| {
            LaunchError::io(backend, format!("opening log {}", spec.log.display()), e)
        })?;
    let log2 =
        log.try_clone().map_err(|e| LaunchError::io(backend, "duplicating the log file", e))?;
    let argv = spec.argv();
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0);
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    let child = cmd
        .spawn()
        .map_err(|e| LaunchError::io(backend, format!("spawning `{}`", spec.command_line()), e))?;
    Ok(Running { child, spec: spec.clone() })
}

/// Sends `sig` to process group `pgid`; false if the group is gone.
pub(crate) fn signal_group(pgid: i32, sig: Option<Signal>) -> bool {
    if pgid <= 1 {
        return false;
    }
    nix::sys::signal::killpg(Pid::from_raw(pgid), sig).is_ok()
}

/// True while any process of group `pgid` exists that is not a zombie.
pub(crate) fn group_alive(pgid: i32) -> bool {
    if !signal_group(pgid, None) {
        return false;
    }
    // killpg(0) also succeeds for zombies; look for a live member in /proc.
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            return false;
        };
        let mut fields = rest.split(' ');
        let state = fields.next().unwrap_or("Z");
        let _ppid = fields.next();
        let pg = fields.next().and_then(|s| s.parse::<i32>().ok());
        pg == Some(pgid) && state != "Z" && state != "X"
    })
}

/// Stops a process group: the graceful signal, then SIGKILL after `grace`. Reaps `child` if it is
/// ours. Returns once no live member is left (or after a further 5 s).
pub(crate) fn stop_group(pgid: i32, sig: Signal, grace: Duration, mut child: Option<&mut Child>) {
    signal_group(pgid, Some(sig));
    let start = Instant::now();
    let mut killed = false;
    loop {
        if let Some(c) = child.as_deref_mut() {
            let _ = c.try_wait();
        }
        if !group_alive(pgid) {
            break;
        }
        if !killed && start.elapsed() >= grace {
            signal_group(pgid, Some(Signal::SIGKILL));
            killed = true;
        }
        if start.elapsed() >= grace + Duration::from_secs(5) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Some(c) = child {
        if killed {
            let _ = c.kill();
        }
        let _ = c.wait();
    }
}

/// The last `lines` lines of a log file.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let tail = all[all.len().saturating_sub(lines)..].join("\n");
    if tail.trim().is_empty() { "(log is empty)".to_owned() } else { tail }
}

/// The watchdog's shell script. Arguments: owner pid, directory to remove (or ""), files to
/// remove (newline-separated), then the process groups to stop once the owner is gone. It exits
/// by itself when all groups are gone.
const WATCHDOG: &str = r#"
owner=$1; dir=$2; files=$3; shift 3
alive() { s=$(sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -c1); [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ]; }
any() { for g in "$@"; do kill -0 -$g 2>/dev/null && return 0; done; return 1; }
while alive "$owner"; do [ $# -eq 0 ] || any "$@" || exit 0; sleep 1; done
for g in "$@"; do kill -TERM -$g 2>/dev/null; done
i=0; while any "$@" && [ $i -lt 20 ]; do sleep 0.5; i=$((i+1)); done
for g in "$@"; do kill -KILL -$g 2>/dev/null; done
sleep 0.5
if [ -n "$dir" ]; then rm -rf -- "$dir"; fi
printf '%s\n' "$files" | while IFS= read -r f; do if [ -n "$f" ]; then rm -f -- "$f"; fi; done
"#;

/// A `sh` sidecar in its own process group that stops `groups` (and removes `dir`) once this
/// process is gone — even when it dies by a signal or abort, or leaves `static`s undropped.
#[derive(Debug)]
pub(crate) struct Watchdog {
    child: Child,
}

impl Watchdog {
    pub(crate) fn spawn(
        backend: &'static str,
        groups: &[i32],
        dir: Option<&Path>,
        files: &[PathBuf],
    ) -> Result<Self, LaunchError> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(WATCHDOG)
            .arg("shedlock-launcher-watchdog")
            .arg(std::process::id().to_string())
            .arg(dir.map(|d| d.as_os_str().to_owned()).unwrap_or_default())
            .arg(files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join("\n"))
            .args(groups.iter().map(ToString::to_string))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| LaunchError::io(backend, "spawning the watchdog (/bin/sh)", e))?;
        Ok(Watchdog { child })
    }

    /// Stops the watchdog without letting it act.
    pub(crate) fn disarm(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let pgid = i32::try_from(self.child.id()).unwrap_or(i32::MAX);
        signal_group(pgid, Some(Signal::SIGKILL));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}
