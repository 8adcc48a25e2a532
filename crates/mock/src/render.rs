//! The response side of the OpenAI protocol: SSE chunks (`data: {...}\n\n`, role-only first
//! chunk for chat, finish_reason on the last token chunk, the `choices: []` usage chunk,
//! `data: [DONE]`) and non-streaming bodies, formatted by hand into one buffer per chunk
//! (every embedded string is either ours or pre-escaped). Not here: when chunks are sent.

use std::cell::OnceCell;
use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;

use crate::protocol::Endpoint;
use crate::tokens::push_filler;

/// Everything needed to render one request's responses.
#[derive(Debug, Clone)]
pub(crate) struct Render {
    pub endpoint: Endpoint,
    /// `cmpl-...` or `chatcmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model name as a JSON string literal (quotes included).
    pub model_json: Arc<str>,
    pub prompt_tokens: u32,
    pub max_tokens: u32,
    /// Where this request's filler words start.
    pub word_seed: u64,
    pub continuous_usage: bool,
    /// Prompt tokens served from the prefix cache; `None` without a cache (no
    /// `prompt_tokens_details` then, as vLLM without `--enable-prompt-tokens-details`).
    pub cached_tokens: Option<u32>,
    /// Chat: the first this many output tokens are reasoning (`delta.reasoning_content`,
    /// `message.reasoning_content`, counted in `completion_tokens_details`); 0: none.
    pub reasoning_tokens: u32,
    /// Cache of `data: {"id":..,"object":..,"created":..,"model":..` for stream chunks;
    /// construct it empty.
    pub chunk_head: OnceCell<Vec<u8>>,
}

/// `data: [DONE]`.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

impl Render {
    fn head(&self, out: &mut Vec<u8>, object: &str) {
        let _ = write!(
            Buf(out),
            "{{\"id\":\"{}\",\"object\":\"{object}\",\"created\":{},\"model\":{}",
            self.id,
            self.created,
            self.model_json
        );
    }

    fn usage(&self, out: &mut Vec<u8>, generated: u32) {
        let _ = write!(
            Buf(out),
            "\"usage\":{{\"prompt_tokens\":{},\"total_tokens\":{},\"completion_tokens\":{}}}",
            self.prompt_tokens,
            u64::from(self.prompt_tokens) + u64::from(generated),
            generated
        );
        if let Some(cached) = self.cached_tokens {
            // Inside the usage object: drop its `}`, add the details, close it again.
            out.pop();
            let _ = write!(
                Buf(out),
                ",\"prompt_tokens_details\":{{\"cached_tokens\":{cached}}}}}"
            );
        }
        if let Some(reasoning) = self.reasoning_of(generated) {
            out.pop();
            let _ = write!(
                Buf(out),
                ",\"completion_tokens_details\":{{\"reasoning_tokens\":{reasoning}}}}}"
            );
        }
    }

    /// How many of the first `generated` tokens are reasoning; `None` when the request does
    /// not reason (completions, or no reasoning configured).
    fn reasoning_of(&self, generated: u32) -> Option<u32> {
        (self.endpoint == Endpoint::Chat && self.reasoning_tokens > 0)
            .then(|| generated.min(self.reasoning_tokens))
    }

    /// "length" when max_tokens was reached, else "stop".
    pub(crate) fn finish_reason(&self, generated: u32) -> &'static str {
        if generated >= self.max_tokens {
            "length"
        } else {
            "stop"
        }
    }

    /// Start a stream event: `data: ` and the fields every chunk of this request repeats.
    fn chunk_start(&self, out: &mut Vec<u8>) {
        let head = self.chunk_head.get_or_init(|| {
            let mut h = b"data: ".to_vec();
            self.head(&mut h, self.chunk_object());
            h
        });
        out.extend_from_slice(head);
    }

    fn chunk_object(&self) -> &'static str {
        match self.endpoint {
            Endpoint::Completions => "text_completion",
            Endpoint::Chat => "chat.completion.chunk",
        }
    }

    /// The role-only first chunk of a chat stream.
    pub(crate) fn role_chunk(&self) -> Bytes {
        let mut out = Vec::with_capacity(256);
        self.chunk_start(&mut out);
        out.extend_from_slice(
            b",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]",
        );
        if self.continuous_usage {
            out.push(b',');
            self.usage(&mut out, 0);
        }
        out.extend_from_slice(b"}\n\n");
        Bytes::from(out)
    }

    /// A chunk carrying output tokens `from..to`; the last one carries the finish reason.
    pub(crate) fn token_chunk(&self, from: u32, to: u32, last: bool) -> Bytes {
        let mut out = Vec::with_capacity(256 + 8 * (to - from) as usize);
        self.chunk_start(&mut out);
        match self.endpoint {
            Endpoint::Completions => {
                out.extend_from_slice(b",\"choices\":[{\"index\":0,\"text\":\"");
                push_filler(&mut out, self.word_seed, from, to);
                out.push(b'"');
            }
            Endpoint::Chat => {
                out.extend_from_slice(b",\"choices\":[{\"index\":0,\"delta\":{");
                // Reasoning tokens first, then the answer; a chunk may carry both.
                let split = self.reasoning_tokens.clamp(from, to);
                if split > from {
                    out.extend_from_slice(b"\"reasoning_content\":\"");
                    push_filler(&mut out, self.word_seed, from, split);
                    out.extend_from_slice(b"\",");
                }
                out.extend_from_slice(b"\"content\":");
                if split == to {
                    out.extend_from_slice(b"null");
                } else {
                    out.push(b'"');
                    push_filler(&mut out, self.word_seed, split, to);
                    out.push(b'"');
                }
                out.push(b'}');
            }
        }
        out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
        if last {
            let _ = write!(Buf(&mut out), "\"{}\"", self.finish_reason(to));
        } else {
            out.extend_from_slice(b"null");
        }
        if self.endpoint == Endpoint::Completions {
            out.extend_from_slice(b",\"stop_reason\":null");
        }
        out.extend_from_slice(b"}]");
        if self.continuous_usage {
            out.push(b',');
            self.usage(&mut out, to);
        }
        out.extend_from_slice(b"}\n\n");
        Bytes::from(out)
    }

    /// The final `choices: []` chunk with usage.
    pub(crate) fn usage_chunk(&self, generated: u32) -> Bytes {
        let mut out = Vec::with_capacity(256);
        self.chunk_start(&mut out);
        out.extend_from_slice(b",\"choices\":[],");
        self.usage(&mut out, generated);
        out.extend_from_slice(b"}\n\n");
        Bytes::from(out)
    }

    /// The whole non-streaming response.
    pub(crate) fn full(&self, generated: u32) -> Bytes {
        let mut out = Vec::with_capacity(256 + 8 * generated as usize);
        let reason = self.finish_reason(generated);
        match self.endpoint {
            Endpoint::Completions => {
                self.head(&mut out, "text_completion");
                out.extend_from_slice(b",\"choices\":[{\"index\":0,\"text\":\"");
                push_filler(&mut out, self.word_seed, 0, generated);
                let _ = write!(
                    Buf(&mut out),
                    "\",\"logprobs\":null,\"finish_reason\":\"{reason}\",\"stop_reason\":null}}],"
                );
            }
            Endpoint::Chat => {
                self.head(&mut out, "chat.completion");
                out.extend_from_slice(
                    b",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",",
                );
                let split = self.reasoning_of(generated).unwrap_or(0);
                if split > 0 {
                    out.extend_from_slice(b"\"reasoning_content\":\"");
                    push_filler(&mut out, self.word_seed, 0, split);
                    out.extend_from_slice(b"\",");
                }
                out.extend_from_slice(b"\"content\":\"");
                push_filler(&mut out, self.word_seed, split, generated);
                let _ = write!(
                    Buf(&mut out),
                    "\"}},\"logprobs\":null,\"finish_reason\":\"{reason}\"}}],"
                );
            }
        }
        self.usage(&mut out, generated);
        out.push(b'}');
        Bytes::from(out)
    }
}

/// `fmt::Write` into a byte buffer.
struct Buf<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Buf<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn render(endpoint: Endpoint, continuous_usage: bool) -> Render {
        Render {
            endpoint,
            id: "cmpl-1".into(),
            created: 7,
            model_json: Arc::from(serde_json::to_string("m\"x").unwrap()),
            prompt_tokens: 3,
            max_tokens: 4,
            word_seed: 0,
            continuous_usage,
            cached_tokens: None,
            reasoning_tokens: 0,
            chunk_head: OnceCell::new(),
        }
    }

    fn sse_json(b: &Bytes) -> Value {
        let s = std::str::from_utf8(b).unwrap();
        let body = s
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn completion_chunks_are_valid_openai_json() {
        let r = render(Endpoint::Completions, false);
        let c = sse_json(&r.token_chunk(0, 2, false));
        assert_eq!(c["object"], "text_completion");
        assert_eq!(c["model"], "m\"x");
        assert_eq!(c["choices"][0]["text"], " the of");
        assert!(c["choices"][0]["finish_reason"].is_null());
        assert!(c.get("usage").is_none());
        let c = sse_json(&r.token_chunk(2, 4, true));
        assert_eq!(c["choices"][0]["finish_reason"], "length");
        let u = sse_json(&r.usage_chunk(4));
        assert_eq!(u["choices"], serde_json::json!([]));
        assert_eq!(u["usage"]["completion_tokens"], 4);
        assert_eq!(u["usage"]["total_tokens"], 7);
        let full: Value = serde_json::from_slice(&r.full(3)).unwrap();
        assert_eq!(full["choices"][0]["finish_reason"], "stop");
        assert_eq!(full["usage"]["prompt_tokens"], 3);
    }

    #[test]
    fn chat_chunks_have_role_then_content() {
        let r = render(Endpoint::Chat, true);
        let role = sse_json(&r.role_chunk());
        assert_eq!(role["object"], "chat.completion.chunk");
        assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(role["usage"]["completion_tokens"], 0);
        let c = sse_json(&r.token_chunk(0, 1, false));
        assert_eq!(c["choices"][0]["delta"]["content"], " the");
        assert_eq!(c["usage"]["completion_tokens"], 1);
        let full: Value = serde_json::from_slice(&r.full(4)).unwrap();
        assert_eq!(full["object"], "chat.completion");
        assert_eq!(full["choices"][0]["message"]["content"], " the of and to");
        assert_eq!(full["choices"][0]["finish_reason"], "length");
    }

    #[test]
    fn chat_reasons_first_then_answers_and_counts_reasoning_tokens() {
        let mut r = render(Endpoint::Chat, true);
        r.reasoning_tokens = 3;
        let c = sse_json(&r.token_chunk(0, 2, false));
        let delta = &c["choices"][0]["delta"];
        assert_eq!(delta["reasoning_content"], " the of");
        assert!(delta["content"].is_null(), "{c}");
        assert_eq!(
            c["usage"]["completion_tokens_details"]["reasoning_tokens"],
            2
        );
        // The chunk across the boundary carries both; later ones only the answer.
        let c = sse_json(&r.token_chunk(2, 4, true));
        assert_eq!(c["choices"][0]["delta"]["reasoning_content"], " and");
        assert_eq!(c["choices"][0]["delta"]["content"], " to");
        assert_eq!(
            c["usage"]["completion_tokens_details"]["reasoning_tokens"],
            3
        );
        let u = sse_json(&r.usage_chunk(4));
        assert_eq!(u["usage"]["completion_tokens"], 4);
        assert_eq!(
            u["usage"]["completion_tokens_details"]["reasoning_tokens"],
            3
        );
        let full: Value = serde_json::from_slice(&r.full(4)).unwrap();
        assert_eq!(
            full["choices"][0]["message"]["reasoning_content"],
            " the of and"
        );
        assert_eq!(full["choices"][0]["message"]["content"], " to");
        // Completions never reason.
        let mut r = render(Endpoint::Completions, false);
        r.reasoning_tokens = 3;
        let c = sse_json(&r.token_chunk(0, 2, false));
        assert_eq!(c["choices"][0]["text"], " the of");
        assert!(
            sse_json(&r.usage_chunk(2))["usage"]
                .get("completion_tokens_details")
                .is_none()
        );
    }

    #[test]
    fn cached_tokens_only_with_a_cache_in_final_and_whole_usage() {
        for endpoint in [Endpoint::Completions, Endpoint::Chat] {
            let mut r = render(endpoint, false);
            let u = sse_json(&r.usage_chunk(4));
            assert!(u["usage"].get("prompt_tokens_details").is_none());
            r.cached_tokens = Some(2);
            let u = sse_json(&r.usage_chunk(4));
            assert_eq!(u["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
            assert_eq!(u["usage"]["total_tokens"], 7);
            let full: Value = serde_json::from_slice(&r.full(3)).unwrap();
            assert_eq!(full["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
            assert_eq!(full["usage"]["completion_tokens"], 3);
        }
    }
}
