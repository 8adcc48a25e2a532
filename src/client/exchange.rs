//! One request/response exchange: write the request, stamp every read of the SSE body with
//! when its bytes arrived (the kernel's receive time where it gives one, so a busy event loop
//! does not delay the stamps), turn output-bearing chunks into (time, tokens), and decide
//! the outcome (deadlines, cancellation, HTTP status, mid-stream errors). Not here: when to
//! send (run.rs) or what the times mean (metrics.rs).

use std::pin::pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::conn::{Conn, Target};
use super::http::{Decoder, Fed, request_head};
use super::record::{Chunk, ChunkTokens, RequestOutcome, TimeoutPhase, Usage};
use super::selfcheck::ReadDelays;
use super::sse::{Scanner, classify};

/// Longest error body kept in a record.
const ERROR_BODY: usize = 512;
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
    /// The connection failed before any response; `retry` when a fresh one may succeed.
    Failed {
        message: String,
        retry: bool,
    },
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
    let mut ex = Exchange {
        sent,
        headers_us: None,
        chunks: Vec::with_capacity(ask.expect_chunks),
        chunk_tokens: ChunkTokens::AssumedOne,
        usage: Usage {
            prompt_tokens: None,
            completion_tokens: None,
        },
        text: keep_text.then(Vec::new),
        end: sent,
        outcome: RequestOutcome::Completed,
        conn: None,
    };
    let first_deadline = deadlines
        .first_token
        .into_iter()
        .chain(deadlines.total)
        .min()
        .unwrap_or(NEVER);
    let total_deadline = deadlines.total.unwrap_or(NEVER);
    let timeout_phase = |got_first: bool| {
        if !got_first
            && deadlines
                .first_token
                .is_some_and(|f| deadlines.total.is_none_or(|t| f <= t))
        {
            TimeoutPhase::FirstToken
        } else {
            TimeoutPhase::Total
        }
    };
    let mut sleep = pin!(tokio::time::sleep_until((sent + first_deadline).into()));
    let mut stop = pin!(watch.cutoff.cancelled());
    let stopped = || {
        if watch.cancel.is_cancelled() {
            RequestOutcome::Cancelled
        } else {
            RequestOutcome::Incomplete
        }
    };

    // Send and read the head; a kept-alive connection the server closed meanwhile is
    // replaced once by a fresh one (nothing was received, so nothing is lost).
    let mut conn = conn;
    let mut fresh = fresh;
    let head = loop {
        let attempt = async {
            conn.send(&request_head, &ask.body)
                .await
                .map_err(|e| Early::Failed {
                    message: format!("sending the request: {e}"),
                    retry: true,
                })?;
            conn.read_head().await.map_err(|message| Early::Failed {
                retry: message.starts_with("the server closed the connection without"),
                message,
            })
        };
        let result = tokio::select! {
            biased;
            _ = &mut stop => Err(Early::Stopped),
            _ = &mut sleep => Err(Early::TimedOut),
            r = attempt => r,
        };
        match result {
            Err(Early::Failed { retry: true, .. }) if !fresh => {
                let dialled = tokio::select! {
                    biased;
                    _ = &mut stop => Err(Early::Stopped),
                    _ = &mut sleep => Err(Early::TimedOut),
                    c = Conn::dial(target) => c.map_err(|message| Early::Failed { message, retry: false }),
                };
                match dialled {
                    Ok(c) => {
                        conn = c;
                        fresh = true;
                    }
                    Err(e) => break Err(e),
                }
            }
            other => break other,
        }
    };
    let head = match head {
        Ok(h) => h,
        Err(early) => {
            ex.end = Instant::now();
            ex.outcome = match early {
                Early::Stopped => stopped(),
                Early::TimedOut => RequestOutcome::TimedOut {
                    phase: timeout_phase(false),
                },
                Early::Failed { message, .. } => RequestOutcome::ConnectFailed { message },
            };
            return ex;
        }
    };
    ex.headers_us = Some(micros(sent, conn.last_read().at));
    let mut decoder = Decoder::new(head.framing);

    if head.status != 200 {
        let mut text = Vec::new();
        let mut complete = decoder.is_done();
        while !complete {
            let read = tokio::select! {
                biased;
                _ = &mut stop => break,
                _ = &mut sleep => break,
                r = conn.read() => r,
            };
            let Ok((bytes, _)) = read else { break };
            if bytes.is_empty() {
                // Closed: the body may be whole (close-delimited) but the connection is gone.
                break;
            }
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
        return ex;
    }

    let mut scanner = Scanner::default();
    let mut last_completion: u32 = 0;
    let mut saw_chunk_usage = false;
    let mut failure: Option<RequestOutcome> = None;
    let mut clean_end = decoder.is_done();
    let mut reusable = !head.close;
    while !clean_end {
        // A read that is ready is taken before the stop and deadline are polled (the common
        // case costs no waiter registration); they are seen as soon as the stream waits.
        let read = tokio::select! {
            biased;
            r = conn.read() => r,
            _ = &mut stop => { failure = Some(stopped()); break; }
            _ = &mut sleep => {
                failure = Some(RequestOutcome::TimedOut { phase: timeout_phase(!ex.chunks.is_empty()) });
                break;
            }
        };
        let (bytes, received) = match read {
            Err(e) => {
                failure = Some(RequestOutcome::StreamError {
                    message: format!("the stream broke: {e}"),
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
                    failure = Some(RequestOutcome::StreamError {
                        message: format!("the stream broke: {message}"),
                    })
                }
            }
            break;
        }
        let had_first = !ex.chunks.is_empty();
        let chunks_before = ex.chunks.len();
        let t_us = micros(sent, received.at);
        let text = &mut ex.text;
        let chunks = &mut ex.chunks;
        let usage = &mut ex.usage;
        let fed = decoder.feed(bytes, |data| {
            scanner.feed(data, |payload| {
                let ev = classify(payload, text.as_mut());
                if ev.done || failure.is_some() {
                    return;
                }
                if ev.error || ev.malformed {
                    let shown = String::from_utf8_lossy(&payload[..payload.len().min(ERROR_BODY)]);
                    failure = Some(RequestOutcome::StreamError {
                        message: if ev.error {
                            format!("error event: {shown}")
                        } else {
                            format!("malformed chunk: {shown}")
                        },
                    });
                    return;
                }
                if ev.prompt_tokens.is_some() {
                    usage.prompt_tokens = ev.prompt_tokens;
                }
                let mut delta = None;
                if let Some(c) = ev.completion_tokens {
                    usage.completion_tokens = Some(c);
                    if ev.has_choices {
                        saw_chunk_usage = true;
                        delta = Some(c.saturating_sub(last_completion));
                    }
                    last_completion = c;
                }
                let bears_tokens = ev.carries_output || (ev.has_choices && delta.unwrap_or(0) > 0);
                if bears_tokens {
                    let tokens = delta.unwrap_or(1);
                    chunks.push(Chunk {
                        t_us,
                        tokens: u16::try_from(tokens).unwrap_or(u16::MAX),
                    });
                }
            })
        });
        watch.reads.record(
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
                failure.get_or_insert(RequestOutcome::StreamError {
                    message: format!("the stream broke: {message}"),
                });
            }
        }
        if failure.is_some() {
            break;
        }
        if !had_first && !ex.chunks.is_empty() {
            // First token in: only the total deadline applies from now on.
            sleep.as_mut().reset((sent + total_deadline).into());
        }
    }
    if clean_end && failure.is_none() {
        let (text, chunks) = (&mut ex.text, &mut ex.chunks);
        let t_us = micros(sent, conn.last_read().at);
        scanner.finish(|payload| {
            let ev = classify(payload, text.as_mut());
            if ev.carries_output {
                chunks.push(Chunk { t_us, tokens: 1 });
            }
        });
    }
    // A whole stream ends when its last bytes arrived; a broken one when it was given up.
    ex.end = if clean_end && failure.is_none() {
        conn.last_read().at
    } else {
        Instant::now()
    };
    ex.chunk_tokens = if saw_chunk_usage {
        ChunkTokens::Usage
    } else {
        ChunkTokens::AssumedOne
    };
    ex.outcome = match failure {
        Some(f) => f,
        None if ex.chunks.is_empty() => RequestOutcome::StreamError {
            message: "the stream ended without any output-bearing chunk".into(),
        },
        None => RequestOutcome::Completed,
    };
    if clean_end && reusable && ex.outcome.is_completed() {
        ex.conn = Some(conn);
    }
    ex
}
