//! The streaming path's socket: a non-blocking TCP connection registered with tokio whose
//! reads also say when the kernel received the bytes. On Linux the socket asks for receive
//! timestamps (`SO_TIMESTAMPNS`) and reads with `recvmsg`, so a chunk's time is when it
//! reached this host, not when a busy event loop got around to reading it; elsewhere, and
//! when the kernel gives no timestamp, the time is taken as the read returns.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use tokio::io::unix::AsyncFd;

/// One connected socket.
pub(crate) struct Socket {
    io: AsyncFd<TcpStream>,
    /// The kernel stamps what it receives on this socket.
    stamped: bool,
}

/// What one read returned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    /// Bytes read; 0 is the end of the stream.
    pub len: usize,
    /// When the kernel received the last of them (or when the read returned).
    pub at: Instant,
    /// `at` is the kernel's receive time.
    pub kernel: bool,
}

impl Socket {
    pub(crate) async fn connect(addr: SocketAddr) -> io::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let stream = stream.into_std()?;
        let stamped = rx::enable(&stream);
        // SAFETY: the std stream owns its descriptor, open until the AsyncFd drops it.
        let io = unsafe { AsyncFd::register(stream) }.map_err(io::Error::from)?;
        Ok(Socket { io, stamped })
    }

    /// One read of what is there (waiting until something is). A read that leaves the
    /// buffer partly empty drained the socket, so readiness is cleared without a second,
    /// empty `recv` (edge-triggered epoll will say when more comes).
    pub(crate) async fn read(&self, buf: &mut [u8]) -> io::Result<Received> {
        loop {
            let mut guard = self.io.readable().await?;
            let got = guard.try_io(|inner| {
                if self.stamped {
                    rx::recv(inner.get_ref(), buf)
                } else {
                    let len = (&mut inner.get_ref()).read(buf)?;
                    Ok(Received {
                        len,
                        at: Instant::now(),
                        kernel: false,
                    })
                }
            });
            match got {
                Ok(Ok(received)) => {
                    if received.len > 0 && received.len < buf.len() {
                        guard.clear_ready();
                    }
                    return Ok(received);
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Write everything. The first write is tried at once: a freshly registered socket has
    /// no readiness yet, and waiting for the reactor to report it would delay the request
    /// behind a whole event-loop turn after its send time was taken.
    pub(crate) async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        match (&mut self.io.get_ref()).write(data) {
            Ok(n) => data = &data[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
        while !data.is_empty() {
            let mut guard = self.io.writable().await?;
            match guard.try_io(|inner| (&mut inner.get_ref()).write(data)) {
                Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
        Ok(())
    }

    /// Nothing to read and not closed by the peer: an idle kept-alive connection that can
    /// carry another request. Peeks without consuming or touching tokio's readiness.
    pub(crate) fn is_idle_open(&self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.io.get_ref().peek(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

#[cfg(target_os = "linux")]
mod rx {
    //! `SO_TIMESTAMPNS`: the kernel stamps every packet as it is received (`CLOCK_REALTIME`)
    //! and `recvmsg` hands back the stamp of the last one read. TCP keeps the newest stamp
    //! when it coalesces packets, so a read holding several chunks gets the last one's time.

    use std::io;
    use std::net::TcpStream;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use super::Received;

    /// Ask the kernel to stamp what this socket receives; false when it will not.
    pub(super) fn enable(stream: &TcpStream) -> bool {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket descriptor and an int option of the size given.
        let rc = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        rc == 0
    }

    pub(super) fn recv(stream: &TcpStream, buf: &mut [u8]) -> io::Result<Received> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // Room for one timestamp message, 8-byte aligned as cmsg headers require.
        let mut control = [0u64; 8];
        // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of_val(&control) as _;
        // SAFETY: the descriptor is a socket; iov and control point into live buffers.
        let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let now = Instant::now();
        let mut stamp = None;
        // SAFETY: walking the control messages the kernel wrote into `control`, with the
        // lengths it set; the timestamp is read unaligned.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET
                    && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
                {
                    stamp = Some(std::ptr::read_unaligned(
                        libc::CMSG_DATA(cmsg).cast::<libc::timespec>(),
                    ));
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        Ok(Received {
            len: n as usize,
            at: stamp.map_or(now, |ts| to_instant(ts, now)),
            kernel: stamp.is_some(),
        })
    }

    /// The monotonic instant of a wall-clock kernel stamp, by its age against the wall clock
    /// read now. A stamp from the future or older than a minute (a clock step) is not trusted.
    fn to_instant(ts: libc::timespec, now: Instant) -> Instant {
        let (Ok(secs), Ok(nanos)) = (u64::try_from(ts.tv_sec), u32::try_from(ts.tv_nsec)) else {
            return now;
        };
        let stamp = Duration::new(secs, nanos);
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        match wall.checked_sub(stamp) {
            Some(age) if age <= Duration::from_secs(60) => now.checked_sub(age).unwrap_or(now),
            _ => now,
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod rx {
    //! No receive timestamps here: reads are stamped as they return.

    use std::io;
    use std::net::TcpStream;

    use super::Received;

    pub(super) fn enable(_stream: &TcpStream) -> bool {
        false
    }

    pub(super) fn recv(_stream: &TcpStream, _buf: &mut [u8]) -> io::Result<Received> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    /// A byte written while the reader was busy elsewhere is stamped when it arrived, not when
    /// it was read; the stream's end reads as 0.
    #[tokio::test]
    async fn reads_carry_the_arrival_time_not_the_read_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (socket, accepted) = tokio::join!(Socket::connect(addr), listener.accept());
        let socket = socket.unwrap();
        let (mut server, _) = accepted.unwrap();
        assert!(socket.is_idle_open(), "a fresh connection is idle and open");
        let mut buf = [0u8; 64];
        if cfg!(target_os = "linux") {
            // The kernel turns receive stamping on a moment after the first socket asks for
            // it (a deferred static-key switch); until then reads fall back to their own time.
            let mut stamped = false;
            for _ in 0..100 {
                server.write_all(b"x").await.unwrap();
                let got = socket.read(&mut buf).await.unwrap();
                assert_eq!(got.len, 1);
                if got.kernel {
                    stamped = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(stamped, "no kernel receive timestamp within a second");
        }

        server.write_all(b"hello").await.unwrap();
        let written = Instant::now();
        std::thread::sleep(Duration::from_millis(60)); // the "busy event loop"
        assert!(
            !socket.is_idle_open(),
            "unread bytes make it unusable for a new request"
        );
        let got = socket.read(&mut buf).await.unwrap();
        let read_at = Instant::now();
        assert_eq!(&buf[..got.len], b"hello");
        if cfg!(target_os = "linux") {
            assert!(got.kernel, "no kernel timestamp on Linux");
            let late = read_at.saturating_duration_since(got.at);
            assert!(
                late >= Duration::from_millis(50),
                "stamped {late:?} before the read: the stamp is the read's time, not the arrival"
            );
            assert!(
                got.at.saturating_duration_since(written) < Duration::from_millis(20),
                "the stamp is not near the write"
            );
        }

        socket.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        tokio::io::AsyncReadExt::read_exact(&mut server, &mut back)
            .await
            .unwrap();
        assert_eq!(&back, b"ping");
        drop(server);
        assert_eq!(socket.read(&mut buf).await.unwrap().len, 0);
    }
}
