//! Which nodes of a cluster lead right now ([`Service::primaries`](crate::Service::primaries)):
//! the Redis Cluster's masters (`ROLE`), the etcd leader (`/v3/maintenance/status`), the
//! ZooKeeper leader (`srvr`), each node asked over its plaintext client port with a short time
//! limit, so that a node paused or cut off is left out rather than waited for.

use std::{
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use crate::Backend;

/// The indexes of the nodes of `backend` at `addrs` that lead now; empty for a backend without
/// leaders (or one whose nodes do not answer).
pub(crate) fn primaries(backend: Backend, addrs: &[SocketAddr]) -> Vec<usize> {
    let ask: fn(SocketAddr) -> Option<bool> = match backend {
        Backend::RedisCluster => |a| {
            let r = exchange(a, b"*1\r\n$4\r\nROLE\r\n", Some(b"\r\n"))?;
            Some(r.contains("master"))
        },
        Backend::EtcdCluster => |a| {
            let req = format!(
                "POST /v3/maintenance/status HTTP/1.0\r\nHost: {a}\r\nContent-Type: \
                 application/json\r\nContent-Length: 2\r\n\r\n{{}}"
            );
            let r = exchange(a, req.as_bytes(), None)?;
            let field = |k: &str| {
                let at = r.find(&format!("\"{k}\":\""))? + k.len() + 4;
                r[at..].split('"').next().map(str::to_owned)
            };
            Some(field("member_id")? == field("leader")?)
        },
        Backend::ZooKeeperEnsemble => |a| {
            let r = exchange(a, b"srvr", None)?;
            Some(r.contains("Mode: leader"))
        },
        _ => return Vec::new(),
    };
    addrs
        .iter()
        .take(backend.node_count())
        .enumerate()
        .filter(|(_, a)| ask(**a) == Some(true))
        .map(|(i, _)| i)
        .collect()
}

/// Sends `request` to `addr` and reads the answer (until the peer closes, or until `enough`
/// has been seen after the first bytes), within 300 ms in all; `None` if it did not answer.
fn exchange(addr: SocketAddr, request: &[u8], enough: Option<&[u8]>) -> Option<String> {
    use std::io::{Read, Write};
    let limit = Duration::from_millis(300);
    let deadline = Instant::now() + limit;
    let mut s = TcpStream::connect_timeout(&addr, limit).ok()?;
    s.set_write_timeout(Some(limit)).ok()?;
    s.write_all(request).ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1)))).ok()?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
        if enough.is_some_and(|e| out.windows(e.len()).any(|w| w == e)) && out.len() > 16 {
            break;
        }
        if out.len() > 64 * 1024 {
            break;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::{io::Write, net::TcpListener};

    use super::*;

    /// A node that answers one four-letter word with `answer` and closes.
    fn node(answer: &'static str) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut buf = [0u8; 4];
                let _ = std::io::Read::read_exact(&mut s, &mut buf);
                let _ = s.write_all(answer.as_bytes());
            }
        });
        addr
    }

    #[test]
    fn the_zookeeper_leader_is_the_node_whose_srvr_says_leader_and_a_silent_node_is_left_out() {
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let addrs = [node("Mode: follower\n"), node("Mode: leader\n"), closed];
        assert_eq!(primaries(Backend::ZooKeeperEnsemble, &addrs), [1]);
        assert!(primaries(Backend::Postgres, &addrs).is_empty());
    }
}
