//! The first exchange of a forwarded connection, kept in order: the client's `ConnectRequest`
//! goes to the server alone, and nothing else the client sent follows it until the server's
//! `ConnectResponse` is through.
//!
//! Why: zookeeper-client sends its `addauth` packets right behind the `ConnectRequest` and takes
//! the first frame it reads as the `ConnectResponse`. ZooKeeper's Netty connection (the one that
//! serves `secureClientPort`) reads both from one TLS record and answers the `addauth` at once,
//! while the session it creates passes through the request pipeline first; when that pipeline is
//! busy, the `addauth` reply arrives first, the client fails with "unable to unmarshal
//! ConnectResponse", and the session is not opened ("no available hosts"). ZooKeeper's NIO
//! connection stops reading until the session exists, so plaintext clients do not see it. The
//! forwarder does here what NIO does: it holds the client's next bytes until the server has
//! answered the connect.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// The longest first frame either side may announce. A `ConnectRequest` is 45–46 bytes (with a
/// 16-byte password) and a `ConnectResponse` 37–38: anything past this is not ZooKeeper, and its
/// length is not trusted to size a buffer.
const MAX_FIRST_FRAME: u32 = 4096;

/// Which side of the first exchange failed.
#[derive(Debug)]
pub(super) enum Failed {
    /// The client closed or sent something that is not a ZooKeeper connect: nothing to report
    /// (it gave up, or it is not a ZooKeeper client).
    Client(io::Error),
    /// The server closed, or answered with something that is not a ZooKeeper frame.
    Server(io::Error),
}

/// Forwards the client's first frame (its `ConnectRequest`) to the server, then the server's
/// first frame (the `ConnectResponse`) to the client. What either side sent after its first frame
/// stays unread, for the pipe that follows.
pub(super) async fn relay<C, S>(client: &mut C, server: &mut S) -> Result<(), Failed>
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let request = read_frame(client).await.map_err(Failed::Client)?;
    server.write_all(&request).await.map_err(Failed::Server)?;
    server.flush().await.map_err(Failed::Server)?;
    let response = read_frame(server).await.map_err(Failed::Server)?;
    client.write_all(&response).await.map_err(Failed::Client)?;
    client.flush().await.map_err(Failed::Client)?;
    Ok(())
}

/// One length-prefixed frame (a big-endian `i32` length, then that many bytes), prefix included.
async fn read_frame<R: AsyncRead + Unpin>(from: &mut R) -> io::Result<Vec<u8>> {
    let mut prefix = [0u8; 4];
    from.read_exact(&mut prefix).await?;
    let len = u32::from_be_bytes(prefix);
    if len > MAX_FIRST_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "a first frame of {len} bytes (a ZooKeeper connect is under \
                 {MAX_FIRST_FRAME}): not ZooKeeper's protocol"
            ),
        ));
    }
    let mut frame = vec![0u8; 4 + len as usize];
    frame[..4].copy_from_slice(&prefix);
    from.read_exact(&mut frame[4..]).await?;
    Ok(frame)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use std::{
        future::Future,
        pin::pin,
        task::{Context, Poll, Waker},
    };

    use tokio::io::duplex;

    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = u32::try_from(body.len()).unwrap().to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    /// Polls once without waiting: what a pipe holds is readable at once, so `Pending` means the
    /// other side has sent nothing more.
    fn poll_once<F: Future>(f: F) -> Poll<F::Output> {
        pin!(f).as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test]
    async fn the_clients_auth_waits_until_the_connect_response_is_through() {
        let (mut client, mut client_end) = duplex(1024);
        let (mut server, mut server_end) = duplex(1024);
        let (connect, auth) = (frame(&[7; 41]), frame(&[9; 83]));
        // The client pipelines its addauth behind the connect, as zookeeper-client does.
        client.write_all(&[connect.clone(), auth.clone()].concat()).await.unwrap();

        let response = frame(&[5; 33]);
        {
            let mut relay = pin!(relay(&mut client_end, &mut server_end));
            assert!(poll_once(relay.as_mut()).is_pending(), "it waits for the server's answer");
            let mut got = vec![0u8; connect.len()];
            server.read_exact(&mut got).await.unwrap();
            assert_eq!(got, connect, "the server gets the connect");
            let mut more = [0u8; 1];
            assert!(
                poll_once(server.read(&mut more)).is_pending(),
                "and nothing behind it before the connect is answered"
            );

            // The server answers the connect.
            server.write_all(&response).await.unwrap();
            let Poll::Ready(done) = poll_once(relay.as_mut()) else { panic!("the relay finished") };
            done.unwrap();
        }
        let mut got = vec![0u8; response.len()];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, response);
        // The auth is still with the client's end, for the pipe that follows.
        let mut rest = vec![0u8; auth.len()];
        client_end.read_exact(&mut rest).await.unwrap();
        assert_eq!(rest, auth);
    }

    #[tokio::test]
    async fn a_length_past_a_connects_size_is_not_trusted() {
        let (mut client, mut client_end) = duplex(64);
        let (_server, mut server_end) = duplex(64);
        client.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        match relay(&mut client_end, &mut server_end).await {
            Err(Failed::Client(e)) => assert_eq!(e.kind(), io::ErrorKind::InvalidData),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_server_that_closes_before_answering_is_the_servers_failure() {
        let (mut client, mut client_end) = duplex(256);
        let (server, mut server_end) = duplex(256);
        client.write_all(&frame(&[1; 41])).await.unwrap();
        drop(server);
        assert!(matches!(relay(&mut client_end, &mut server_end).await, Err(Failed::Server(_))));
    }
}
