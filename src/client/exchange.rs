//! One request/response exchange: write the request, stamp every read of the SSE body with
//! `Instant::now()` as it arrives, turn output-bearing chunks into (time, tokens), and decide
//! the outcome (deadlines, cancellation, HTTP status, mid-stream errors). Not here: when to
//! send (run.rs) or what the times mean (metrics.rs).

use std::pin::pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode};
use tokio_util::sync::CancellationToken;

use super::conn::{Conn, Target};
use super::record::{Chunk, ChunkTokens, RequestOutcome, TimeoutPhase, Usage};
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

/// Why a request should stop early.
pub(crate) struct Stops<'a> {
    /// The whole run is cancelled.
    pub cancel: &'a CancellationToken,
    /// The drain window of a duration-bound run ran out.
    pub cutoff: &'a CancellationToken,
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
    pub request_id: hyper::header::HeaderValue,
    /// Expected output-bearing chunks (capacity reserved up front).
    pub expect_chunks: usize,
}

pub(crate) async fn exchange(
    mut conn: Conn,
    target: &Target,
    ask: Ask,
    deadlines: Deadlines,
    keep_text: bool,
    stops: Stops<'_>,
) -> Exchange {
    let mut req = Request::post(target.path.as_str())
        .header(HOST, target.host.clone())
        .header(CONTENT_TYPE, "application/json")
        .header("x-request-id", ask.request_id);
    if let Some(auth) = &target.authorization {
        req = req.header(AUTHORIZATION, auth.clone());
    }
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
    let req = match req.body(Full::new(ask.body)) {
        Ok(r) => r,
        Err(e) => {
            ex.outcome = RequestOutcome::ConnectFailed {
                message: format!("cannot build the request: {e}"),
            };
            return ex;
        }
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
    let mut cancelled = pin!(stops.cancel.cancelled());
    let mut cut = pin!(stops.cutoff.cancelled());

    let stopped = |cancel: bool| {
        if cancel {
            RequestOutcome::Cancelled
        } else {
            RequestOutcome::Incomplete
        }
    };

    let response = tokio::select! {
        biased;
        _ = &mut cancelled => Err(stopped(true)),
        _ = &mut cut => Err(stopped(false)),
        _ = &mut sleep => Err(RequestOutcome::TimedOut { phase: timeout_phase(false) }),
        r = conn.send_request(req) => r.map_err(|e| RequestOutcome::ConnectFailed { message: e.to_string() }),
    };
    let response = match response {
        Ok(r) => r,
        Err(outcome) => {
            ex.end = Instant::now();
            ex.outcome = outcome;
            return ex;
        }
    };
    ex.headers_us = Some(micros(sent, Instant::now()));
    let status = response.status();
    let mut body = response.into_body();

    if status != StatusCode::OK {
        let mut text = Vec::new();
        let mut complete = true;
        loop {
            let frame = tokio::select! {
                biased;
                _ = &mut cancelled => { complete = false; break; }
                _ = &mut sleep => { complete = false; break; }
                f = body.frame() => f,
            };
            match frame {
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref()
                        && text.len() < ERROR_BODY
                    {
                        text.extend_from_slice(&d[..d.len().min(ERROR_BODY - text.len())]);
                    }
                }
                Some(Err(_)) => {
                    complete = false;
                    break;
                }
                None => break,
            }
        }
        ex.end = Instant::now();
        ex.outcome = RequestOutcome::HttpStatus {
            code: status.as_u16(),
            body: String::from_utf8_lossy(&text).trim().to_string(),
        };
        if complete {
            ex.conn = Some(conn);
        }
        return ex;
    }

    let mut scanner = Scanner::default();
    let mut last_completion: u32 = 0;
    let mut saw_chunk_usage = false;
    let mut failure: Option<RequestOutcome> = None;
    let mut clean_end = false;
    loop {
        let frame = tokio::select! {
            biased;
            _ = &mut cancelled => { failure = Some(stopped(true)); break; }
            _ = &mut cut => { failure = Some(stopped(false)); break; }
            _ = &mut sleep => {
                failure = Some(RequestOutcome::TimedOut { phase: timeout_phase(!ex.chunks.is_empty()) });
                break;
            }
            f = body.frame() => f,
        };
        let now = Instant::now();
        let data = match frame {
            None => {
                clean_end = true;
                break;
            }
            Some(Err(e)) => {
                failure = Some(RequestOutcome::StreamError {
                    message: format!("the stream broke: {e}"),
                });
                break;
            }
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
        };
        let had_first = !ex.chunks.is_empty();
        let t_us = micros(sent, now);
        let text = &mut ex.text;
        let chunks = &mut ex.chunks;
        let usage = &mut ex.usage;
        scanner.feed(&data, |payload| {
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
        });
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
        let t_us = micros(sent, Instant::now());
        scanner.finish(|payload| {
            let ev = classify(payload, text.as_mut());
            if ev.carries_output {
                chunks.push(Chunk { t_us, tokens: 1 });
            }
        });
    }
    ex.end = Instant::now();
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
    if clean_end && ex.outcome.is_completed() {
        ex.conn = Some(conn);
    }
    ex
}
