//! The network the fault scenarios cut: one Linux network namespace per member (a backend
//! server or a client node), each joined by a veth pair to a bridge in this process's
//! namespace, on a private /24 of 10.0.0.0/8. A partition moves the members of each side onto
//! a bridge of their own (packets to the other side are dropped silently, as on a real cut
//! link: no reset, no error, until a timeout notices); healing moves them back.
//!
//! Everything is made with iproute2's `ip` and needs root (`CAP_NET_ADMIN`); nothing is
//! routed anywhere but between the namespaces made here. [`Net`]'s `Drop` deletes every
//! namespace, veth and bridge it made, and [`Net::create`] first removes what a run that
//! died (its pid gone) left behind.

use std::{
    net::Ipv4Addr,
    process::{Command, Stdio},
};

/// The prefix of every namespace (`shlf-<pid>-<k>`) and interface (`shf<pid>h<k>`,
/// `shf<pid>b<g>`) made here.
const NS_PREFIX: &str = "shlf-";
const IF_PREFIX: &str = "shf";

/// One member of a [`Net`]: a namespace and its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// What the member is (`server 0`, `client 2`), for reports.
    pub label: String,
    /// The namespace's name (`ip netns exec <netns> ...`).
    pub netns: String,
    /// The member's address on the bridge.
    pub ip: Ipv4Addr,
    /// The host end of its veth pair (on the bridge).
    host_if: String,
}

/// The namespaces, veths and bridges of one scenario; torn down on drop.
#[derive(Debug)]
pub struct Net {
    members: Vec<Member>,
    /// The bridges made so far (index = group); bridge 0 carries this process's address.
    bridges: Vec<String>,
    /// This process's address on bridge 0.
    host_ip: Ipv4Addr,
    /// Each member's current group.
    groups: Vec<usize>,
}

/// Runs `ip args...`; the error names the command and what it printed.
pub(crate) fn ip(args: &[&str]) -> Result<String, String> {
    let program = ip_program();
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{program} {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// iproute2's `ip`.
pub(crate) fn ip_program() -> &'static str {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("ip")
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid in a name made here (`shlf-<pid>-<k>`, `shf<pid>h<k>`, `shf<pid>b<g>`).
fn owner_pid(name: &str) -> Option<u32> {
    if let Some(rest) = name.strip_prefix(NS_PREFIX) {
        return rest.split('-').next()?.parse().ok();
    }
    let rest = name.strip_prefix(IF_PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Removes the namespaces and interfaces of runs whose process is gone (a run killed before
/// its `Drop`).
fn sweep_stale() {
    if let Ok(list) = ip(&["netns", "list"]) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if owner_pid(name).is_some_and(|p| !pid_alive(p)) {
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    if let Ok(list) = ip(&["-o", "link", "show"]) {
        for line in list.lines() {
            // "12: shf123b0: <...>" or "13: shf123h0@if2: <...>"
            let Some(name) = line.split(": ").nth(1) else { continue };
            let name = name.split('@').next().unwrap_or(name);
            if name.starts_with(IF_PREFIX) && owner_pid(name).is_some_and(|p| !pid_alive(p)) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
}

/// Why namespaces cannot be made here (not root, no `ip`, a kernel without them), or `None`.
pub fn unavailable() -> Option<String> {
    #[cfg(not(target_os = "linux"))]
    {
        return Some("network namespaces need Linux".to_owned());
    }
    #[cfg(target_os = "linux")]
    {
        if !rustix::process::geteuid().is_root() {
            return Some(
                "network namespaces need root (CAP_NET_ADMIN): run as root, as CI does".to_owned(),
            );
        }
        let probe = format!("{NS_PREFIX}{}-probe", std::process::id());
        match ip(&["netns", "add", &probe]) {
            Ok(_) => {
                let _ = ip(&["netns", "del", &probe]);
                None
            }
            Err(e) => Some(format!("cannot create a network namespace: {e}")),
        }
    }
}

/// A private /24 in 10.0.0.0/8 that no interface here uses yet (from this pid, so that two
/// runs at once pick different ones).
fn free_subnet() -> Result<(u8, u8), String> {
    let used = ip(&["-4", "-o", "addr", "show"])?;
    let pid = std::process::id();
    for attempt in 0..256u32 {
        let k = pid.wrapping_add(attempt.wrapping_mul(7919));
        let (a, b) = (200 + (k / 256 % 50) as u8, (k % 256) as u8);
        if !used.contains(&format!(" 10.{a}.{b}.")) {
            return Ok((a, b));
        }
    }
    Err("no free 10.x.y.0/24 subnet for the fault network".to_owned())
}

impl Net {
    /// Makes one namespace per label (addresses .1, .2, … of a free /24), all on one bridge,
    /// with this process at .254 on that bridge so that it can reach every member. Fails (and
    /// removes what it made) if any step fails; see [`unavailable`] for the usual reasons.
    pub fn create(labels: &[String]) -> Result<Net, String> {
        sweep_stale();
        let (a, b) = free_subnet()?;
        let pid = std::process::id();
        let mut net = Net {
            members: Vec::new(),
            bridges: Vec::new(),
            host_ip: Ipv4Addr::new(10, a, b, 254),
            groups: Vec::new(),
        };
        net.bridge(0)?;
        ip(&["addr", "add", &format!("{}/24", net.host_ip), "dev", &net.bridges[0]])?;
        for (k, label) in labels.iter().enumerate() {
            let netns = format!("{NS_PREFIX}{pid}-{k}");
            let host_if = format!("{IF_PREFIX}{pid}h{k}");
            let inner = format!("{IF_PREFIX}{pid}n{k}");
            let addr =
                Ipv4Addr::new(10, a, b, u8::try_from(k + 1).map_err(|_| "too many members")?);
            ip(&["netns", "add", &netns])?;
            net.members.push(Member {
                label: label.clone(),
                netns: netns.clone(),
                ip: addr,
                host_if: host_if.clone(),
            });
            net.groups.push(0);
            ip(&[
                "link", "add", &host_if, "type", "veth", "peer", "name", &inner, "netns", &netns,
            ])?;
            ip(&["link", "set", &host_if, "master", &net.bridges[0], "up"])?;
            ip(&["-n", &netns, "addr", "add", &format!("{addr}/24"), "dev", &inner])?;
            ip(&["-n", &netns, "link", "set", &inner, "up"])?;
            ip(&["-n", &netns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// Bridge `g`, made (and brought up) on first use.
    fn bridge(&mut self, g: usize) -> Result<String, String> {
        while self.bridges.len() <= g {
            let name = format!("{IF_PREFIX}{}b{}", std::process::id(), self.bridges.len());
            ip(&["link", "add", &name, "type", "bridge"])?;
            self.bridges.push(name.clone());
            ip(&["link", "set", &name, "up"])?;
        }
        Ok(self.bridges[g].clone())
    }

    /// The members, in the order of the labels given to [`create`](Self::create).
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// This process's address on the network (it shares bridge 0, the majority's side).
    pub fn host_ip(&self) -> Ipv4Addr {
        self.host_ip
    }

    /// Puts each member on the bridge of its group (`groups[k]` for member `k`): members in
    /// different groups can no longer exchange a packet; members of one group still can. Group
    /// 0 keeps this process. `heal` is `partition(&[0; n])`.
    pub fn partition(&mut self, groups: &[usize]) -> Result<(), String> {
        for (k, &g) in groups.iter().enumerate().take(self.members.len()) {
            if self.groups[k] == g {
                continue;
            }
            let bridge = self.bridge(g)?;
            ip(&["link", "set", &self.members[k].host_if, "master", &bridge])?;
            self.groups[k] = g;
        }
        Ok(())
    }

    /// Cuts member `k` off from everyone (a group of its own).
    pub fn isolate(&mut self, k: usize) -> Result<(), String> {
        let mut groups = self.groups.clone();
        let own = groups.iter().max().copied().unwrap_or(0) + 1;
        if let Some(g) = groups.get_mut(k) {
            *g = own;
        }
        self.partition(&groups)
    }

    /// Puts every member back on bridge 0.
    pub fn heal(&mut self) -> Result<(), String> {
        self.partition(&vec![0; self.members.len()])
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for m in &self.members {
            let _ = ip(&["link", "del", &m.host_if]);
            let _ = ip(&["netns", "del", &m.netns]);
        }
        for b in &self.bridges {
            let _ = ip(&["link", "del", b]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_reads_the_pid_of_every_name_made_here() {
        assert_eq!(owner_pid("shlf-4242-3"), Some(4242));
        assert_eq!(owner_pid("shf4242h12"), Some(4242));
        assert_eq!(owner_pid("shf17b0"), Some(17));
        assert_eq!(owner_pid("eth0"), None);
        assert_eq!(owner_pid("shflow"), None);
    }
}
