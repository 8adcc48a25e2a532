//! Response bodies: `SseBody` turns a sequence's published progress into SSE frames as the
//! connection asks for them (first token at once, then every `tokens_per_chunk` tokens;
//! a slow reader gets the tokens that piled up in one chunk, as real servers coalesce), and
//! stamps each frame into the ground-truth draft at the moment it is handed to hyper.
//! Dropping a body cancels its sequence. Not here: the engine or JSON formatting.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::engine::SeqState;
use crate::render::{DONE, Render};
use crate::truth::{TruthRecord, TruthSink, TruthStatus, WallClock};

/// A ground-truth record being filled in; sent when dropped.
#[derive(Debug)]
pub(crate) struct TruthDraft {
    pub record: TruthRecord,
    pub sink: TruthSink,
    pub clock: WallClock,
}

impl TruthDraft {
    fn chunk(&mut self, tokens: u32) {
        self.record.chunks.push((self.clock.now_ns(), tokens));
        self.record.completion_tokens += tokens;
    }
}

impl Drop for TruthDraft {
    fn drop(&mut self) {
        let record = std::mem::replace(
            &mut self.record,
            TruthRecord {
                id: String::new(),
                x_request_id: None,
                endpoint: "",
                stream: false,
                http_status: 0,
                status: TruthStatus::Cancelled,
                arrival_ns: 0,
                prompt_tokens: 0,
                completion_tokens: 0,
                role_ns: None,
                chunks: Vec::new(),
                end_ns: None,
            },
        );
        self.sink.send(record);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Tokens,
    Usage,
    Done,
    End,
}

/// A streaming completion.
#[derive(Debug)]
pub(crate) struct SseBody {
    state: Arc<SeqState>,
    render: Render,
    tokens_per_chunk: u32,
    include_usage: bool,
    role_pending: bool,
    sent: u32,
    phase: Phase,
    truth: Option<TruthDraft>,
}

impl SseBody {
    pub(crate) fn new(
        state: Arc<SeqState>,
        render: Render,
        tokens_per_chunk: u32,
        include_usage: bool,
        truth: Option<TruthDraft>,
    ) -> Self {
        let role_pending = render.endpoint == crate::protocol::Endpoint::Chat;
        Self {
            state,
            render,
            tokens_per_chunk: tokens_per_chunk.max(1),
            include_usage,
            role_pending,
            sent: 0,
            phase: Phase::Tokens,
            truth,
        }
    }

    fn next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        match self.phase {
            Phase::Tokens => {
                let s = self.state.poll_snapshot(cx);
                if self.role_pending && s.started {
                    self.role_pending = false;
                    if let Some(t) = &mut self.truth {
                        t.record.role_ns = Some(t.clock.now_ns());
                    }
                    return Poll::Ready(Some(self.render.role_chunk()));
                }
                let new = s.generated.saturating_sub(self.sent);
                if new > 0 && (s.finished || self.sent == 0 || new >= self.tokens_per_chunk) {
                    let chunk = self.render.token_chunk(self.sent, s.generated, s.finished);
                    if let Some(t) = &mut self.truth {
                        t.chunk(new);
                    }
                    self.sent = s.generated;
                    if s.finished {
                        self.phase = if self.include_usage {
                            Phase::Usage
                        } else {
                            Phase::Done
                        };
                    }
                    return Poll::Ready(Some(chunk));
                }
                if s.aborted {
                    // The server is stopping: end the body without [DONE].
                    self.phase = Phase::End;
                    return Poll::Ready(None);
                }
                Poll::Pending
            }
            Phase::Usage => {
                self.phase = Phase::Done;
                Poll::Ready(Some(self.render.usage_chunk(self.sent)))
            }
            Phase::Done => {
                self.phase = Phase::End;
                if let Some(t) = &mut self.truth {
                    t.record.end_ns = Some(t.clock.now_ns());
                    t.record.status = TruthStatus::Ok;
                }
                Poll::Ready(Some(Bytes::from_static(DONE)))
            }
            Phase::End => Poll::Ready(None),
        }
    }
}

impl Drop for SseBody {
    fn drop(&mut self) {
        self.state.cancel();
    }
}

/// Every response body the server sends.
#[derive(Debug)]
pub(crate) enum MockBody {
    /// A complete body (JSON, text, empty), with its ground-truth draft if it is a
    /// generation response.
    Full(Option<Bytes>, Option<Box<TruthDraft>>),
    Sse(Box<SseBody>),
}

impl MockBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        Self::Full(Some(bytes.into()), None)
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            MockBody::Full(bytes, truth) => {
                let Some(b) = bytes.take() else {
                    return Poll::Ready(None);
                };
                if let Some(t) = truth {
                    let tokens = t.record.completion_tokens;
                    t.record.completion_tokens = 0;
                    if t.record.http_status == 200 {
                        t.chunk(tokens);
                        t.record.status = TruthStatus::Ok;
                    }
                    t.record.end_ns = Some(t.clock.now_ns());
                }
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            MockBody::Sse(sse) => sse.next(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            MockBody::Full(b, _) => b.is_none(),
            MockBody::Sse(s) => s.phase == Phase::End,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b), _) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None, _) => SizeHint::with_exact(0),
            MockBody::Sse(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::OnceCell;
    use std::task::Waker;

    use super::*;
    use crate::protocol::Endpoint;

    fn body(endpoint: Endpoint, k: u32) -> (Arc<SeqState>, SseBody) {
        let state = Arc::new(SeqState::default());
        let render = Render {
            endpoint,
            id: "cmpl-1".into(),
            created: 1,
            model_json: Arc::from("\"m\""),
            prompt_tokens: 2,
            max_tokens: 10,
            word_seed: 0,
            continuous_usage: false,
            cached_tokens: None,
            reasoning_tokens: 0,
            chunk_head: OnceCell::new(),
        };
        (state.clone(), SseBody::new(state, render, k, true, None))
    }

    fn poll(b: &mut SseBody) -> Poll<Option<String>> {
        let mut cx = Context::from_waker(Waker::noop());
        b.next(&mut cx)
            .map(|o| o.map(|bytes| String::from_utf8(bytes.to_vec()).unwrap()))
    }

    fn words(chunk: &str) -> usize {
        let v: serde_json::Value =
            serde_json::from_str(chunk.strip_prefix("data: ").unwrap().trim_end()).unwrap();
        v["choices"][0]["text"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .count()
    }

    fn ready(b: &mut SseBody) -> String {
        match poll(b) {
            Poll::Ready(Some(c)) => c,
            other => panic!("expected a chunk, got {other:?}"),
        }
    }

    #[test]
    fn first_token_alone_then_every_k_then_usage_and_done() {
        let (state, mut b) = body(Endpoint::Completions, 4);
        assert!(poll(&mut b).is_pending());
        state.set(1, false);
        assert_eq!(words(&ready(&mut b)), 1);
        state.set(4, false);
        assert!(poll(&mut b).is_pending(), "3 new tokens < 4");
        state.set(5, false);
        assert_eq!(words(&ready(&mut b)), 4);
        // A reader that falls behind gets everything that piled up in one chunk.
        state.set(9, false);
        assert_eq!(words(&ready(&mut b)), 4);
        state.set(10, true);
        let last = ready(&mut b);
        assert_eq!(words(&last), 1);
        assert!(last.contains("\"finish_reason\":\"length\""));
        let usage = ready(&mut b);
        assert!(usage.contains("\"choices\":[]") && usage.contains("\"completion_tokens\":10"));
        assert_eq!(ready(&mut b), "data: [DONE]\n\n");
        assert_eq!(poll(&mut b), Poll::Ready(None));
    }

    #[test]
    fn a_slow_reader_gets_coalesced_tokens() {
        let (state, mut b) = body(Endpoint::Completions, 1);
        state.set(3, false);
        assert_eq!(words(&ready(&mut b)), 3);
    }

    #[test]
    fn chat_sends_the_role_chunk_first_and_drop_cancels() {
        let (state, mut b) = body(Endpoint::Chat, 1);
        state.set(1, false);
        assert!(ready(&mut b).contains("\"role\":\"assistant\""));
        assert!(ready(&mut b).contains("\"content\":\" the\""));
        assert!(!state.is_cancelled());
        drop(b);
        assert!(state.is_cancelled());
    }
}
