//! One request/response exchange: write the request, stamp every read of the SSE body with
//! when its bytes arrived (the kernel's receive time where it gives one, so a busy event loop
//! does not delay the stamps), turn output-bearing chunks into (time, tokens), and decide
//! the outcome (deadlines, cancellation, HTTP status, mid-stream errors). Not here: when to
//! send (run.rs) or what the times mean (metrics.rs).

use std::pin::{Pin, pin};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::time::Sleep;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::http::{Conn, ConnError, Decoder, Fed, Head, request_head, stall_of};
use super::record::{Chunk, ChunkTokens, RequestOutcome, TimeoutPhase, Usage};
use super::selfcheck::ReadDelays;
use super::sse::{Scanner, classify};
use super::target::Target;

/// Longest error body kept in a record.
const ERROR_BODY: usize = 512;
/// Longest error (non-200) body read (16 MiB); past it the connection is dropped. Only its
/// first [`ERROR_BODY`] bytes are kept, this bounds the time a server can keep it going.
pub(crate) const MAX_ERROR_BODY: u64 = 16 << 20;
/// Longest streamed (200) body read (256 MiB: a 100k-token answer with usage in every chunk
/// is about 40 MiB). What a stream keeps is 8 bytes per output chunk (and its text when asked),
/// so this bounds a request's memory however the server misbehaves.
pub(crate) const MAX_STREAM_BODY: u64 = 256 << 20;
/// A deadline that never comes (tokio timers cap far futures anyway).
const NEVER: Duration = Duration::from_secs(86_400 * 365);

/// Deadlines for one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadlines {
    pub first_token: Option<Duration>,
    pub total: Option<Duration>,
}

/// What the run watches an exchange with: why it should stop early, and where its reads are
/// reported. `cutoff` is a child of `cancel`, so waiting on `cutoff` alone sees both (one
/// waiter per request instead of two); `cancel` tells which it was.
pub(crate) struct Watch<'a> {
    /// The whole run is cancelled.
    pub cancel: &'a CancellationToken,
    /// The drain window of a duration-bound run ran out (or the run was cancelled).
    pub cutoff: &'a CancellationToken,
    /// Every read of the body: how late it was, how many chunks it held.
    pub reads: &'a ReadDelays,
}

/// What came back.
pub(crate) struct Exchange {
    pub sent: Instant,
    pub headers_us: Option<u32>,
    pub chunks: Vec<Chunk>,
    pub chunk_tokens: ChunkTokens,
    pub usage: Usage,
    /// When the first answer (not reasoning) chunk came, microseconds after `sent`.
    pub first_content_us: Option<u32>,
    /// Raw (JSON-escaped) output text, when asked for.
    pub text: Option<Vec<u8>>,
    pub end: Instant,
    pub outcome: RequestOutcome,
    /// The connection, when it can serve another request.
    pub conn: Option<Conn>,
}

fn micros(since: Instant, t: Instant) -> u32 {
    u32::try_from(t.saturating_duration_since(since).as_micros()).unwrap_or(u32::MAX)
}

/// What identifies and sizes one request.
pub(crate) struct Ask {
    pub body: Bytes,
    /// `X-Request-Id` header: lets server logs and the mock's ground truth be joined.
    pub request_id: String,
    /// Expected output-bearing chunks (capacity reserved up front).
    pub expect_chunks: usize,
}

/// How sending the request and reading the response head ended, short of a response.
enum Early {
    Stopped,
    TimedOut,
    /// The connection failed before any response.
    Failed(ConnError),
}

/// The request's deadlines, measured from when it was sent.
#[derive(Clone, Copy)]
struct Clock {
    sent: Instant,
    deadlines: Deadlines,
}

impl Clock {
    /// Until the first token: the earlier of the first-token and total deadlines.
    fn first_deadline(&self) -> Instant {
        let d = self.deadlines;
        self.sent
            + d.first_token
                .into_iter()
                .chain(d.total)
                .min()
                .unwrap_or(NEVER)
    }

    fn total_deadline(&self) -> Instant {
        self.sent + self.deadlines.total.unwrap_or(NEVER)
    }

    /// Which deadline a timeout was, given whether the first token had come.
    fn timeout_phase(&self, got_first: bool) -> TimeoutPhase {
        let d = self.deadlines;
        if !got_first
            && d.first_token
                .is_some_and(|f| d.total.is_none_or(|t| f <= t))
        {
            TimeoutPhase::FirstToken
        } else {
            TimeoutPhase::Total
        }
    }
}

/// What an exchange waits on besides the socket: the stop (cutoff or cancel) and the
/// current deadline, pinned once for the whole exchange.
struct Waits<'a, 'w> {
    stop: Pin<&'a mut WaitForCancellationFuture<'w>>,
    sleep: Pin<&'a mut Sleep>,
    cancel: &'w CancellationToken,
}

impl Waits<'_, '_> {
    /// The outcome of a request stopped early: cancelled with the run, else cut off.
    fn stopped(&self) -> RequestOutcome {
        if self.cancel.is_cancelled() {
            RequestOutcome::Cancelled
        } else {
            RequestOutcome::Incomplete
        }
    }
}

/// Send `ask` on `conn` (`fresh`: dialled for this request, so a failure is not a stale
/// kept-alive connection) and read the streamed answer.
pub(crate) async fn exchange(
    conn: Conn,
    fresh: bool,
    target: &Target,
    ask: Ask,
    deadlines: Deadlines,
    keep_text: bool,
    watch: Watch<'_>,
) -> Exchange {
    let request_head = request_head(target, ask.body.len(), &ask.request_id);
    let sent = Instant::now();
    let clock = Clock { sent, deadlines };
    let mut ex = Exchange {
        sent,
        headers_us: None,
        chunks: Vec::with_capacity(ask.expect_chunks),
        chunk_tokens: ChunkTokens::AssumedOne,
        usage: Usage::default(),
        first_content_us: None,
        text: keep_text.then(Vec::new),
        end: sent,
        outcome: RequestOutcome::Completed,
        conn: None,
    };
    let sleep = pin!(tokio::time::sleep_until(clock.first_deadline().into()));
    let stop = pin!(watch.cutoff.cancelled());
    let mut waits = Waits {
        stop,
        sleep,
        cancel: watch.cancel,
    };
    let sending = Sending {
        target,
        head: &request_head,
        body: &ask.body,
    };
    let (conn, head) = match sending.send(conn, fresh, &mut waits).await {
        Ok(sent) => sent,
        Err(early) => {
            ex.end = Instant::now();
            ex.outcome = match early {
                Early::Stopped => waits.stopped(),
                Early::TimedOut => RequestOutcome::TimedOut {
                    phase: clock.timeout_phase(false),
                },
                Early::Failed(e) => e.outcome(),
            };
            return ex;
        }
    };
    ex.headers_us = Some(micros(sent, conn.last_read().at));
    if head.status != 200 {
        error_body(&mut ex, conn, &head, &mut waits).await;
    } else {
        stream(&mut ex, conn, &head, clock, &mut waits, watch.reads).await;
    }
    ex
}

/// One request to send: where, its head and its body.
struct Sending<'a> {
    target: &'a Target,
    head: &'a [u8],
    body: &'a [u8],
}

impl Sending<'_> {
    /// Send and read the head; a kept-alive connection the server closed meanwhile
    /// ([`ConnError::stale`]) is replaced once by a fresh one (nothing was received, so
    /// nothing is lost).
    async fn send(
        &self,
        mut conn: Conn,
        mut fresh: bool,
        waits: &mut Waits<'_, '_>,
    ) -> Result<(Conn, Head), Early> {
        loop {
            let attempt = async {
                conn.send(self.head, self.body)
                    .await
                    .map_err(|e| Early::Failed(ConnError::Send(e)))?;
                conn.read_head().await.map_err(Early::Failed)
            };
            let result = tokio::select! {
                biased;
                _ = waits.stop.as_mut() => Err(Early::Stopped),
                _ = waits.sleep.as_mut() => Err(Early::TimedOut),
                r = attempt => r,
            };
            match result {
                Ok(head) => return Ok((conn, head)),
                Err(Early::Failed(e)) if e.stale() && !fresh => {
                    conn = tokio::select! {
                        biased;
                        _ = waits.stop.as_mut() => return Err(Early::Stopped),
                        _ = waits.sleep.as_mut() => return Err(Early::TimedOut),
                        c = Conn::dial(self.target) => c.map_err(Early::Failed)?,
                    };
                    fresh = true;
                }
                Err(early) => return Err(early),
            }
        }
    }
}

/// A non-200 answer: keep the start of its body as the outcome's text; the connection
/// serves again when the body was read whole and the server keeps it open.
async fn error_body(ex: &mut Exchange, mut conn: Conn, head: &Head, waits: &mut Waits<'_, '_>) {
    let mut decoder = Decoder::new(head.framing);
    let mut text = Vec::new();
    let mut complete = decoder.is_done();
    let mut read_bytes = 0u64;
    while !complete && read_bytes <= MAX_ERROR_BODY {
        let read = tokio::select! {
            biased;
            _ = waits.stop.as_mut() => break,
            _ = waits.sleep.as_mut() => break,
            r = conn.read() => r,
        };
        let Ok((bytes, _)) = read else { break };
        if bytes.is_empty() {
            // Closed: the body may be whole (close-delimited) but the connection is gone.
            break;
        }
        read_bytes += bytes.len() as u64;
        let fed = decoder.feed(bytes, |d| {
            if text.len() < ERROR_BODY {
                text.extend_from_slice(&d[..d.len().min(ERROR_BODY - text.len())]);
            }
        });
        match fed {
            Ok(Fed::More) => {}
            Ok(Fed::End { rest }) => {
                conn.unread(rest);
                complete = true;
            }
            Err(_) => break,
        }
    }
    ex.end = Instant::now();
    ex.outcome = RequestOutcome::HttpStatus {
        code: head.status,
        body: String::from_utf8_lossy(&text).trim().to_string(),
    };
    if complete && !head.close {
        ex.conn = Some(conn);
    }
}

/// What the SSE events of one stream added up to so far.
#[derive(Default)]
struct Tally {
    /// Tokens attributed to the output chunks so far.
    counted: u32,
    /// A chunk carrying choices reported usage: later chunks' token counts are its deltas.
    saw_chunk_usage: bool,
    /// Some output chunk reported no usage: its one token is assumed.
    assumed: bool,
    failure: Option<RequestOutcome>,
}

impl Tally {
    /// One `data:` payload, read at `t_us`: an error, usage, or output-bearing chunk.
    ///
    /// Usage is cumulative, so a chunk's tokens are its `completion_tokens` minus the tokens
    /// already counted. A chunk without output bears tokens only when usage came before it
    /// (continuous usage): a first report in a chunk that adds no text, as llama.cpp's and
    /// TRT-LLM's last chunk (`finish_reason`, empty text, usage), is the total of tokens that
    /// earlier chunks already delivered, not that many arriving at once.
    fn event(&mut self, payload: &[u8], t_us: u32, ex: &mut Exchange) {
        let ev = classify(payload, ex.text.as_mut());
        if ev.done || self.failure.is_some() {
            return;
        }
        if ev.error || ev.malformed {
            let shown = String::from_utf8_lossy(&payload[..payload.len().min(ERROR_BODY)]);
            self.failure = Some(RequestOutcome::StreamError {
                message: if ev.error {
                    format!("error event: {shown}")
                } else {
                    format!("malformed chunk: {shown}")
                },
            });
            return;
        }
        if ev.prompt_tokens.is_some() {
            ex.usage.prompt_tokens = ev.prompt_tokens;
        }
        // The usage's cached count wins over llama.cpp's `timings.cache_n`.
        let u = &mut ex.usage;
        u.cached_tokens = ev.cached_tokens.or(u.cached_tokens).or(ev.cache_n);
        u.reasoning_tokens = ev.reasoning_tokens.or(u.reasoning_tokens);
        if ev.carries_answer && ex.first_content_us.is_none() {
            ex.first_content_us = Some(t_us);
        }
        let mut delta = None;
        let continuous = self.saw_chunk_usage;
        if let Some(c) = ev.completion_tokens {
            ex.usage.completion_tokens = Some(c);
            if ev.has_choices {
                self.saw_chunk_usage = true;
                delta = Some(c.saturating_sub(self.counted));
            }
        }
        let bears_tokens =
            ev.carries_output || (continuous && ev.has_choices && delta.unwrap_or(0) > 0);
        if bears_tokens {
            self.assumed |= delta.is_none();
            let tokens = delta.unwrap_or(1);
            self.counted = self.counted.saturating_add(tokens);
            ex.chunks.push(Chunk {
                t_us,
                tokens: u16::try_from(tokens).unwrap_or(u16::MAX),
            });
        }
    }

    /// Where the chunks' token counts came from: usage only when every output chunk had it.
    fn chunk_tokens(&self) -> ChunkTokens {
        if self.saw_chunk_usage && !self.assumed {
            ChunkTokens::Usage
        } else {
            ChunkTokens::AssumedOne
        }
    }
}

/// A 200 answer: read the SSE body read by read, stamping each with when its bytes
/// arrived, until it ends, breaks, times out or is stopped; then settle the outcome.
async fn stream(
    ex: &mut Exchange,
    mut conn: Conn,
    head: &Head,
    clock: Clock,
    waits: &mut Waits<'_, '_>,
    reads: &ReadDelays,
) {
    let mut decoder = Decoder::new(head.framing);
    let mut scanner = Scanner::default();
    let mut tally = Tally::default();
    let mut clean_end = decoder.is_done();
    let mut reusable = !head.close;
    let mut body_bytes = 0u64;
    while !clean_end {
        // A read that is ready is taken before the stop and deadline are polled (the common
        // case costs no waiter registration); they are seen as soon as the stream waits.
        let read = tokio::select! {
            biased;
            r = conn.read() => r,
            _ = waits.stop.as_mut() => { tally.failure = Some(waits.stopped()); break; }
            _ = waits.sleep.as_mut() => {
                tally.failure = Some(RequestOutcome::TimedOut { phase: clock.timeout_phase(!ex.chunks.is_empty()) });
                break;
            }
        };
        let (bytes, received) = match read {
            Err(e) => {
                tally.failure = Some(match stall_of(&e) {
                    Some(d) => RequestOutcome::stalled(d),
                    None => RequestOutcome::StreamError {
                        message: format!("the stream broke: {e}"),
                    },
                });
                break;
            }
            Ok(read) => read,
        };
        if bytes.is_empty() {
            reusable = false;
            match decoder.eof() {
                Ok(()) => clean_end = true,
                Err(message) => {
                    tally.failure = Some(RequestOutcome::StreamError {
                        message: format!("the stream broke: {message}"),
                    });
                }
            }
            break;
        }
        body_bytes += bytes.len() as u64;
        if body_bytes > MAX_STREAM_BODY {
            tally.failure = Some(RequestOutcome::StreamError {
                message: format!(
                    "the response body passed {} MiB without ending",
                    MAX_STREAM_BODY >> 20
                ),
            });
            break;
        }
        let had_first = !ex.chunks.is_empty();
        let chunks_before = ex.chunks.len();
        let t_us = micros(clock.sent, received.at);
        let mut too_long = None;
        let fed = decoder.feed(bytes, |data| {
            if too_long.is_none()
                && let Err(e) = scanner.feed(data, |payload| tally.event(payload, t_us, ex))
            {
                too_long = Some(e);
            }
        });
        if let Some(e) = too_long {
            tally.failure.get_or_insert(RequestOutcome::StreamError {
                message: e.to_string(),
            });
        }
        reads.record(
            received.at,
            received.kernel,
            ex.chunks.len() - chunks_before,
        );
        match fed {
            Ok(Fed::More) => {}
            Ok(Fed::End { rest }) => {
                conn.unread(rest);
                clean_end = true;
            }
            Err(message) => {
                tally.failure.get_or_insert(RequestOutcome::StreamError {
                    message: format!("the stream broke: {message}"),
                });
            }
        }
        if tally.failure.is_some() {
            break;
        }
        if !had_first && !ex.chunks.is_empty() {
            // First token in: only the total deadline applies from now on.
            waits.sleep.as_mut().reset(clock.total_deadline().into());
        }
    }
    settle(ex, conn, scanner, tally, clean_end && reusable, clean_end);
}

/// The end of a stream: a last unterminated event, the end time, the token source, the
/// outcome, and the connection when it can serve again.
fn settle(
    ex: &mut Exchange,
    conn: Conn,
    mut scanner: Scanner,
    tally: Tally,
    reusable: bool,
    clean_end: bool,
) {
    let whole = clean_end && tally.failure.is_none();
    if whole {
        let (text, chunks) = (&mut ex.text, &mut ex.chunks);
        let t_us = micros(ex.sent, conn.last_read().at);
        let first_content = &mut ex.first_content_us;
        scanner.finish(|payload| {
            let ev = classify(payload, text.as_mut());
            if ev.carries_output {
                chunks.push(Chunk { t_us, tokens: 1 });
            }
            if ev.carries_answer && first_content.is_none() {
                *first_content = Some(t_us);
            }
        });
    }
    // A whole stream ends when its last bytes arrived; a broken one when it was given up.
    ex.end = if whole {
        conn.last_read().at
    } else {
        Instant::now()
    };
    ex.chunk_tokens = tally.chunk_tokens();
    ex.outcome = match tally.failure {
        Some(f) => f,
        None if ex.chunks.is_empty() => RequestOutcome::StreamError {
            message: "the stream ended without any output-bearing chunk".into(),
        },
        None => RequestOutcome::Completed,
    };
    if reusable && ex.outcome.is_completed() {
        ex.conn = Some(conn);
    }
}
