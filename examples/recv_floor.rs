//! The kernel's share of a streaming client's CPU: the least a client can spend per streamed
//! chunk on this machine. One thread, one epoll set, plain `recv` (or `recvmsg` with kernel
//! receive timestamps, as the real client does), no parsing beyond counting `data: {` events
//! and spotting the end of each chunked response, no records, no async runtime.
//!
//! `recv_floor ADDR STREAMS TOKENS REQUESTS [stamps]` keeps STREAMS completions streaming from
//! an OpenAI-style server at ADDR (the mock: `orchestrate mock-server --preset fixed`), each
//! asking for TOKENS tokens with ignore_eos, until REQUESTS have ended (at most 10 minutes),
//! then prints the process's CPU per streamed event. scripts/recv-floor.sh runs it beside
//! `orchestrate bench` against the same mock, so the two figures come from one session.

use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(600);

struct Stream {
    sock: TcpStream,
    /// The last bytes seen, to spot the chunked terminator across reads.
    tail: [u8; 5],
}

fn request(tokens: u32) -> Vec<u8> {
    let prompt = "hello ".repeat(32);
    let body = format!(
        r#"{{"model":"mock-model","prompt":"{prompt}","max_tokens":{tokens},"ignore_eos":true,"stream":true}}"#
    );
    format!(
        "POST /v1/completions HTTP/1.1\r\nhost: floor\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn cpu() -> (f64, f64) {
    // SAFETY: getrusage fills the zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(u.ru_utime), s(u.ru_stime))
}

fn recv(fd: i32, buf: &mut [u8], stamps: bool) -> isize {
    if !stamps {
        // SAFETY: buf is live and writable for its length.
        return unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    }
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr pointing at live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: as above.
    unsafe { libc::recvmsg(fd, &mut msg, 0) }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: recv_floor ADDR STREAMS TOKENS REQUESTS [stamps]");
        std::process::exit(2);
    }
    let addr = &args[1];
    let streams: usize = args[2].parse().expect("STREAMS");
    let tokens: u32 = args[3].parse().expect("TOKENS");
    let requests: u64 = args[4].parse().expect("REQUESTS");
    let stamps = args.get(5).is_some_and(|a| a == "stamps");
    let req = request(tokens);

    // SAFETY: plain epoll calls on descriptors we own.
    let ep = unsafe { libc::epoll_create1(0) };
    assert!(ep >= 0, "epoll_create1");
    let mut conns = Vec::with_capacity(streams);
    for i in 0..streams {
        let sock = TcpStream::connect(addr).expect("connect");
        sock.set_nodelay(true).unwrap();
        if stamps {
            let on: libc::c_int = 1;
            // SAFETY: an int option on our socket.
            unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_TIMESTAMPNS,
                    (&on as *const libc::c_int).cast(),
                    4,
                )
            };
        }
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        // SAFETY: registering our socket.
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, sock.as_raw_fd(), &mut ev) };
        conns.push(Stream { sock, tail: [0; 5] });
    }
    let (u0, s0) = cpu();
    let t0 = Instant::now();
    let mut issued = 0u64;
    for c in conns.iter_mut().take(requests as usize) {
        c.sock.write_all(&req).expect("send");
        issued += 1;
    }
    let (mut ended, mut events, mut reads) = (0u64, 0u64, 0u64);
    let mut buf = vec![0u8; 4096];
    let mut ready = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    while ended < requests && t0.elapsed() < LIMIT {
        // SAFETY: the events buffer is live for its length.
        let n = unsafe { libc::epoll_wait(ep, ready.as_mut_ptr(), ready.len() as i32, 1000) };
        for ev in ready.iter().take(n.max(0) as usize) {
            let c = &mut conns[ev.u64 as usize];
            let got = recv(c.sock.as_raw_fd(), &mut buf, stamps);
            if got <= 0 {
                continue;
            }
            reads += 1;
            let bytes = &buf[..got as usize];
            events += bytes.windows(7).filter(|w| w == b"data: {").count() as u64;
            let keep = bytes.len().min(5);
            c.tail.rotate_left(keep);
            c.tail[5 - keep..].copy_from_slice(&bytes[bytes.len() - keep..]);
            if &c.tail == b"0\r\n\r\n" {
                ended += 1;
                c.tail = [0; 5];
                if issued < requests {
                    c.sock.write_all(&req).expect("send");
                    issued += 1;
                }
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let (u1, s1) = cpu();
    let (user, sys) = (u1 - u0, s1 - s0);
    println!(
        "floor ({}) {streams} streams: {ended} requests, {events} events, {reads} reads in {wall:.1} s | cpu us/event {:.2} (user {:.2} + sys {:.2}) | reads/event {:.2}",
        if stamps {
            "recvmsg + SO_TIMESTAMPNS"
        } else {
            "recv"
        },
        (user + sys) * 1e6 / events.max(1) as f64,
        user * 1e6 / events.max(1) as f64,
        sys * 1e6 / events.max(1) as f64,
        reads as f64 / events.max(1) as f64,
    );
}
