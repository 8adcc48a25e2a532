//! The streaming request path's HTTP/1.1, written for the one job it has: send a POST on a
//! kept-alive connection and hand back the response body's bytes as the socket yields them.
//! One task owns the socket; every read is one `recv` stamped with when its bytes arrived
//! (socket.rs), decoded in place (chunked transfer coding or a length) with no copy, no frame
//! channel and no second task.
//! The cold paths (scrapes, probes, the server tokenizer) use crate::fetch, hyper's client;
//! this is the hot path only (docs/performance.md says why it keeps its own code).

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::record::RequestOutcome;
use super::socket::{Received, Socket};
use super::target::Target;
use crate::units::error_chain;

/// Bytes read per `recv`: SSE chunks are a few hundred bytes, a read rarely holds more than
/// a handful of them.
pub(crate) const READ_BUF: usize = 4 * 1024;
/// Longest response head accepted.
const MAX_HEAD: usize = 16 * 1024;

/// The server sent (or took) no byte for this long: the stall timeout ran out. Carried inside
/// an `io::Error` of kind `TimedOut`, so it tells itself apart from the system's own timeouts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stall(pub Duration);

impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no byte from the server for {}",
            crate::units::format_duration(self.0)
        )
    }
}

impl std::error::Error for Stall {}

/// The stall timeout this error is, if it is one.
pub(crate) fn stall_of(e: &io::Error) -> Option<Duration> {
    e.get_ref()?.downcast_ref::<Stall>().map(|s| s.0)
}

/// `work`, unless the socket makes no progress for `stall` (`None`: wait for ever).
async fn unstalled<T>(
    stall: Option<Duration>,
    work: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match stall {
        None => work.await,
        Some(d) => tokio::time::timeout(d, work)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, Stall(d)))?,
    }
}

/// Why a connection gave no response. The exchange decides on the variant whether a fresh
/// connection is worth one more try ([`ConnError::stale`]); records keep the text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    #[error("connect {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("sending the request")]
    Send(#[source] io::Error),
    #[error("reading the response")]
    Read(#[source] io::Error),
    #[error("the server closed the connection without a response")]
    ClosedBeforeResponse,
    #[error("the server closed the connection in the response head")]
    ClosedInHead,
    #[error("the response head is longer than {max} bytes")]
    HeadTooLong { max: usize },
    /// The head is not HTTP/1.x as this client reads it (the reason, as text).
    #[error("{0}")]
    BadHead(String),
}

impl ConnError {
    /// A kept-alive connection the server closed meanwhile: nothing was received, so a fresh
    /// connection may succeed and nothing is lost by trying one. (A server that took nothing
    /// for the stall timeout is not stale: it is silent.)
    pub(crate) fn stale(&self) -> bool {
        match self {
            ConnError::Send(e) => stall_of(e).is_none(),
            ConnError::ClosedBeforeResponse => true,
            _ => false,
        }
    }

    /// The stall timeout, when that is what ended the connection.
    pub(crate) fn stalled(&self) -> Option<Duration> {
        match self {
            ConnError::Connect { source, .. }
            | ConnError::Send(source)
            | ConnError::Read(source) => stall_of(source),
            _ => None,
        }
    }

    /// The outcome of a request that got no response because of this.
    pub(crate) fn outcome(&self) -> RequestOutcome {
        match self.stalled() {
            Some(d) => RequestOutcome::stalled(d),
            None => RequestOutcome::ConnectFailed {
                message: error_chain(self),
            },
        }
    }
}

/// One connection: the socket and the bytes read past what was consumed.
pub(crate) struct Conn {
    socket: Socket,
    /// No byte for this long ends a read (or a write, or the connect) as a stall.
    stall: Option<Duration>,
    buf: Box<[u8]>,
    /// The last read: when its bytes arrived.
    last: Received,
    /// `buf[start..end]` is read but not yet consumed.
    start: usize,
    end: usize,
}

/// The status line and the framing of a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub status: u16,
    pub framing: Framing,
    /// The server will close the connection after this response.
    pub close: bool,
}

/// How the body's end is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    Chunked,
    Length(u64),
    /// Until the server closes the connection.
    Close,
}

/// The request head for a JSON POST of `body_len` bytes.
pub(crate) fn request_head(target: &Target, body_len: usize, request_id: &str) -> Vec<u8> {
    let mut head = Vec::with_capacity(160 + target.path.len());
    head.extend_from_slice(b"POST ");
    head.extend_from_slice(target.path.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    head.extend_from_slice(target.host.as_bytes());
    head.extend_from_slice(b"\r\ncontent-type: application/json\r\ncontent-length: ");
    head.extend_from_slice(body_len.to_string().as_bytes());
    head.extend_from_slice(b"\r\nx-request-id: ");
    head.extend_from_slice(request_id.as_bytes());
    if let Some(auth) = &target.authorization {
        head.extend_from_slice(b"\r\nauthorization: ");
        head.extend_from_slice(auth.as_bytes());
    }
    head.extend_from_slice(b"\r\n\r\n");
    head
}

impl Conn {
    pub(crate) async fn dial(target: &Target) -> Result<Self, ConnError> {
        let socket = unstalled(target.stall, Socket::connect(target.addr))
            .await
            .map_err(|source| ConnError::Connect {
                addr: target.addr,
                source,
            })?;
        Ok(Conn {
            socket,
            stall: target.stall,
            buf: vec![0; READ_BUF].into_boxed_slice(),
            last: Received {
                len: 0,
                at: Instant::now(),
                kernel: false,
            },
            start: 0,
            end: 0,
        })
    }

    /// An idle connection the server has not closed (nor sent anything on) meanwhile.
    pub(crate) fn is_reusable(&self) -> bool {
        self.start == self.end && self.socket.is_idle_open()
    }

    /// The read that brought the bytes last handed out by [`Conn::read`] (or the head):
    /// when they arrived (the kernel's receive time where it gives one).
    pub(crate) fn last_read(&self) -> Received {
        self.last
    }

    /// Write the head and the body (one write when they fit together); a server that takes
    /// nothing for the stall timeout ends it.
    pub(crate) async fn send(&mut self, head: &[u8], body: &[u8]) -> io::Result<()> {
        let socket = &self.socket;
        unstalled(self.stall, async move {
            if head.len() + body.len() <= 64 * 1024 {
                let mut all = Vec::with_capacity(head.len() + body.len());
                all.extend_from_slice(head);
                all.extend_from_slice(body);
                socket.write_all(&all).await
            } else {
                socket.write_all(head).await?;
                socket.write_all(body).await
            }
        })
        .await
    }

    /// Read until the response head is complete and parse it; the bytes after it stay
    /// buffered for [`Conn::read`].
    pub(crate) async fn read_head(&mut self) -> Result<Head, ConnError> {
        let mut head_buf: Vec<u8> = Vec::new();
        loop {
            let got = &self.buf[self.start..self.end];
            let scan_from = head_buf.len().saturating_sub(3);
            head_buf.extend_from_slice(got);
            self.start = self.end;
            if let Some(at) = find_blank_line(&head_buf[scan_from..]) {
                let head_end = scan_from + at + 4;
                // Give back what follows the head.
                let rest = head_buf.len() - head_end;
                self.start = self.end - rest;
                return parse_head(&head_buf[..head_end]).map_err(ConnError::BadHead);
            }
            if head_buf.len() > MAX_HEAD {
                return Err(ConnError::HeadTooLong { max: MAX_HEAD });
            }
            self.fill().await.map_err(ConnError::Read)?;
            if self.start == self.end {
                return Err(if head_buf.is_empty() {
                    ConnError::ClosedBeforeResponse
                } else {
                    ConnError::ClosedInHead
                });
            }
        }
    }

    /// Bytes of the body as they arrive, with when they arrived: what is buffered first, then
    /// one `recv`. An empty slice is the end of the stream (the server closed the connection).
    pub(crate) async fn read(&mut self) -> io::Result<(&mut [u8], Received)> {
        if self.start == self.end {
            self.fill().await?;
        }
        let (start, end) = (self.start, self.end);
        self.start = end;
        Ok((&mut self.buf[start..end], self.last))
    }

    /// Put back the bytes a decoder did not consume (after the end of a response).
    pub(crate) fn unread(&mut self, n: usize) {
        self.start -= n.min(self.start);
    }

    /// One `recv`; no byte for the stall timeout is an error ([`stall_of`] tells it).
    async fn fill(&mut self) -> io::Result<()> {
        let got = unstalled(self.stall, self.socket.read(&mut self.buf)).await?;
        self.start = 0;
        self.end = got.len;
        self.last = got;
        Ok(())
    }
}

fn find_blank_line(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n")
}

/// Parse a response head (status line and headers, ending with a blank line).
pub(crate) fn parse_head(raw: &[u8]) -> Result<Head, String> {
    let text = std::str::from_utf8(raw).map_err(|_| "the response head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1.x response: `{status_line}`"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status code in `{status_line}`"))?;
    let mut chunked = false;
    let mut length = None;
    let mut close = version == "HTTP/1.0";
    for line in lines.filter(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("malformed header line `{line}`"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<u64>()
                    .map_err(|_| format!("bad content-length `{value}`"))?,
            );
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',') {
                let token = token.trim();
                if token.eq_ignore_ascii_case("close") {
                    close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    close = false;
                }
            }
        }
    }
    let framing = if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else if status == 204 || status == 304 || (100..200).contains(&status) {
        Framing::Length(0)
    } else {
        close = true;
        Framing::Close
    };
    Ok(Head {
        status,
        framing,
        close,
    })
}

/// Undoes the body's framing incrementally, read by read, handing out slices of the data.
#[derive(Debug)]
pub(crate) struct Decoder {
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Chunked: reading the size line (`size` so far; `ext` once past `;`).
    Size {
        size: u64,
        digits: u8,
        ext: bool,
    },
    /// Chunked: `left` bytes of chunk data to go.
    Data {
        left: u64,
    },
    /// Chunked: the CRLF after a chunk's data (`seen` bytes of it).
    DataEnd {
        seen: u8,
    },
    /// Chunked: trailer lines after the last chunk; `line_len` of the current line.
    Trailer {
        line_len: usize,
    },
    /// Length-delimited: `left` bytes to go.
    Length {
        left: u64,
    },
    /// Until the connection closes.
    Close,
    Done,
}

/// What a [`Decoder::feed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fed {
    /// The body goes on.
    More,
    /// The body ended; this many bytes of the input follow it (belong to nothing).
    End { rest: usize },
}

impl Decoder {
    pub(crate) fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Chunked => State::Size {
                size: 0,
                digits: 0,
                ext: false,
            },
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length { left: n },
            Framing::Close => State::Close,
        };
        Decoder { state }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The connection closed: a close-delimited body ends cleanly, anything else is cut.
    pub(crate) fn eof(&mut self) -> Result<(), String> {
        match self.state {
            State::Close | State::Done => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err("the server closed the connection before the end of the body".into()),
        }
    }

    /// Decode one read; `on_data` gets every piece of body data in order.
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<Fed, String> {
        let mut i = 0;
        while i < bytes.len() {
            match &mut self.state {
                State::Done => {
                    return Ok(Fed::End {
                        rest: bytes.len() - i,
                    });
                }
                State::Close => {
                    on_data(&bytes[i..]);
                    return Ok(Fed::More);
                }
                State::Length { left } => {
                    let take = (*left).min((bytes.len() - i) as u64) as usize;
                    on_data(&bytes[i..i + take]);
                    *left -= take as u64;
                    i += take;
                    if *left == 0 {
                        self.state = State::Done;
                    }
                }
                State::Data { left } => {
                    let take = (*left).min((bytes.len() - i) as u64) as usize;
                    on_data(&bytes[i..i + take]);
                    *left -= take as u64;
                    i += take;
                    if *left == 0 {
                        self.state = State::DataEnd { seen: 0 };
                    }
                }
                State::DataEnd { seen } => {
                    let want = if *seen == 0 { b'\r' } else { b'\n' };
                    if bytes[i] != want {
                        return Err("bad chunked encoding: no CRLF after chunk data".into());
                    }
                    i += 1;
                    if *seen == 0 {
                        *seen = 1;
                    } else {
                        self.state = State::Size {
                            size: 0,
                            digits: 0,
                            ext: false,
                        };
                    }
                }
                State::Size { size, digits, ext } => {
                    let b = bytes[i];
                    i += 1;
                    match b {
                        b'\n' => {
                            if *digits == 0 {
                                return Err("bad chunked encoding: empty chunk size".into());
                            }
                            self.state = if *size == 0 {
                                State::Trailer { line_len: 0 }
                            } else {
                                State::Data { left: *size }
                            };
                        }
                        b'\r' => {}
                        _ if *ext => {}
                        b';' | b' ' | b'\t' => *ext = true,
                        _ => {
                            let d = (b as char).to_digit(16).ok_or_else(|| {
                                format!("bad chunked encoding: `{}` in a chunk size", b as char)
                            })?;
                            if *digits >= 15 {
                                return Err("bad chunked encoding: chunk size too large".into());
                            }
                            *size = *size * 16 + u64::from(d);
                            *digits += 1;
                        }
                    }
                }
                State::Trailer { line_len } => {
                    let b = bytes[i];
                    i += 1;
                    match b {
                        b'\n' if *line_len == 0 => self.state = State::Done,
                        b'\n' => *line_len = 0,
                        b'\r' => {}
                        _ => *line_len += 1,
                    }
                }
            }
        }
        Ok(if self.state == State::Done {
            Fed::End { rest: 0 }
        } else {
            Fed::More
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_closed_before_any_response_is_stale() {
        let io = || io::Error::from(io::ErrorKind::BrokenPipe);
        assert!(ConnError::ClosedBeforeResponse.stale());
        assert!(ConnError::Send(io()).stale());
        assert!(!ConnError::ClosedInHead.stale());
        assert!(!ConnError::Read(io()).stale());
        assert!(!ConnError::BadHead("x".into()).stale());
        assert_eq!(
            error_chain(&ConnError::Read(io::Error::other("reset"))),
            "reading the response: reset"
        );
    }

    fn decode_split(framing: Framing, wire: &[u8], step: usize) -> (Vec<u8>, Option<usize>) {
        let mut d = Decoder::new(framing);
        let mut out = Vec::new();
        let mut rest = None;
        for piece in wire.chunks(step) {
            match d.feed(piece, |data| out.extend_from_slice(data)).unwrap() {
                Fed::More => {}
                Fed::End { rest: r } => {
                    rest = Some(r);
                    break;
                }
            }
        }
        (out, rest)
    }

    #[test]
    fn chunked_bodies_decode_whatever_the_read_boundaries() {
        let wire = b"5\r\nhello\r\n1a;name=v\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        for step in 1..wire.len() {
            let (out, rest) = decode_split(Framing::Chunked, wire, step);
            assert_eq!(out, b"helloabcdefghijklmnopqrstuvwxyz", "step {step}");
            assert!(rest.is_some(), "step {step}: the end was not seen");
        }
        // In one read, the bytes after the body are reported as not belonging to it.
        let (_, rest) = decode_split(Framing::Chunked, wire, wire.len());
        assert_eq!(rest, Some(4));
    }

    #[test]
    fn length_bodies_stop_at_their_length() {
        let (out, rest) = decode_split(Framing::Length(5), b"helloEXTRA", 100);
        assert_eq!(out, b"hello");
        assert_eq!(rest, Some(5), "the bytes after the body are not body");
        let mut d = Decoder::new(Framing::Length(5));
        assert_eq!(d.feed(b"hel", |_| {}).unwrap(), Fed::More);
        assert!(d.eof().is_err(), "a cut length body is an error");
        let mut d = Decoder::new(Framing::Close);
        assert_eq!(d.feed(b"anything", |_| {}).unwrap(), Fed::More);
        assert!(d.eof().is_ok(), "a close-delimited body ends at EOF");
    }

    #[test]
    fn malformed_chunked_encoding_is_an_error() {
        let mut d = Decoder::new(Framing::Chunked);
        assert!(d.feed(b"zz\r\n", |_| {}).is_err());
        let mut d = Decoder::new(Framing::Chunked);
        assert!(d.feed(b"2\r\nabXY", |_| {}).is_err());
        let mut d = Decoder::new(Framing::Chunked);
        assert!(d.feed(b"\r\n", |_| {}).is_err());
    }

    #[test]
    fn heads_give_status_framing_and_keep_alive() {
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
        assert_eq!(
            h,
            Head {
                status: 200,
                framing: Framing::Chunked,
                close: false
            }
        );
        let h = parse_head(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 12\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            (h.status, h.framing, h.close),
            (503, Framing::Length(12), true)
        );
        let h = parse_head(b"HTTP/1.0 200 OK\r\n\r\n").unwrap();
        assert_eq!((h.framing, h.close), (Framing::Close, true));
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n").is_err());
    }
}
