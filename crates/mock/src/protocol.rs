//! The OpenAI-compatible request side: parse a `/v1/completions` or `/v1/chat/completions`
//! body into a `GenRequest` (token counts, lengths, streaming options), validate it the way
//! vLLM does, and render OpenAI-style error bodies. Not here: response chunks (`render.rs`).

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use crate::tokens::TokenCounter;

/// Which generation endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Completions,
    Chat,
}

impl Endpoint {
    /// The name used in the ground-truth log.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Endpoint::Completions => "completions",
            Endpoint::Chat => "chat",
        }
    }
}

/// A validated generation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GenRequest {
    pub endpoint: Endpoint,
    pub prompt_tokens: u32,
    pub max_tokens: u32,
    /// At least this many tokens before a (simulated) EOS; <= max_tokens.
    pub min_tokens: u32,
    pub ignore_eos: bool,
    pub stream: bool,
    /// A final usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Usage in every chunk (`stream_options.continuous_usage_stats`).
    pub continuous_usage: bool,
    /// The request's `seed`, if any: fixes the output length without ignore_eos.
    pub seed: Option<u64>,
    /// Prefill/decode handoff fields (SGLang `bootstrap_*` or vLLM `kv_transfer_params`).
    pub handoff: Option<Handoff>,
    /// The prompt's token ids, only when `Limits::want_ids` (the prefix cache needs them).
    pub prompt_ids: Option<Vec<u32>>,
}

/// What a request says about its KV handoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Handoff {
    /// SGLang: the room both workers share, and where the prefill's bootstrap server is.
    Sglang {
        host: String,
        port: Option<u16>,
        room: u64,
    },
    /// vLLM NIXL, prefill leg: `do_remote_decode: true`.
    RemoteDecode,
    /// vLLM NIXL, decode leg: the prefill answer's `kv_transfer_params`.
    RemotePrefill {
        host: String,
        port: u16,
        request_id: String,
    },
}

/// An error answered to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    fn bad(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    /// The OpenAI error type name for the status.
    fn kind(&self) -> &'static str {
        match self.status {
            400 => "BadRequestError",
            404 => "NotFoundError",
            405 => "MethodNotAllowed",
            413 => "RequestTooLarge",
            503 => "ServiceUnavailableError",
            _ => "InternalServerError",
        }
    }

    /// `{"error": {"message", "type", "param", "code"}}`.
    pub(crate) fn body(&self) -> Bytes {
        let v = serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind(),
                "param": null,
                "code": self.status,
            }
        });
        Bytes::from(v.to_string())
    }
}

/// Default `max_tokens` when a request gives none (OpenAI's completions default).
pub const DEFAULT_MAX_TOKENS: u32 = 16;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawRequest {
    model: Option<String>,
    prompt: Option<Value>,
    messages: Option<Vec<RawMessage>>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    min_tokens: Option<i64>,
    min_new_tokens: Option<i64>,
    ignore_eos: bool,
    stream: bool,
    stream_options: Option<RawStreamOptions>,
    n: Option<i64>,
    seed: Option<u64>,
    bootstrap_host: Option<String>,
    bootstrap_port: Option<u16>,
    bootstrap_room: Option<u64>,
    kv_transfer_params: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawMessage {
    role: Option<String>,
    content: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawStreamOptions {
    include_usage: bool,
    continuous_usage_stats: bool,
}

/// What a request is checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits<'a> {
    pub model: &'a str,
    pub max_model_len: u32,
    pub tokenizer: &'a TokenCounter,
    /// Keep the prompt's token ids (`GenRequest::prompt_ids`), not only their number.
    pub want_ids: bool,
}

/// Parse and validate a generation request body.
pub(crate) fn parse(
    endpoint: Endpoint,
    body: &[u8],
    limits: Limits<'_>,
) -> Result<GenRequest, ApiError> {
    let raw: RawRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad(format!("invalid JSON request body: {e}")))?;
    if let Some(model) = &raw.model
        && model != limits.model
    {
        return Err(ApiError::new(
            404,
            format!("The model `{model}` does not exist."),
        ));
    }
    if raw.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad("the mock server only supports n=1"));
    }
    let (prompt_tokens, prompt_ids) = match endpoint {
        Endpoint::Completions => {
            let prompt = raw
                .prompt
                .as_ref()
                .ok_or_else(|| ApiError::bad("`prompt` is required"))?;
            if limits.want_ids {
                let ids = prompt_ids(prompt, limits.tokenizer)?;
                (saturate(ids.len()), Some(ids))
            } else {
                (count_prompt(prompt, limits.tokenizer)?, None)
            }
        }
        Endpoint::Chat => {
            let messages = raw
                .messages
                .as_ref()
                .ok_or_else(|| ApiError::bad("`messages` is required"))?;
            if limits.want_ids {
                let ids = message_ids(messages, limits.tokenizer)?;
                (saturate(ids.len()), Some(ids))
            } else {
                (count_messages(messages, limits.tokenizer)?, None)
            }
        }
    };
    let max_tokens = match raw.max_tokens.or(raw.max_completion_tokens) {
        None => DEFAULT_MAX_TOKENS,
        Some(n) if n >= 1 => u32::try_from(n).unwrap_or(u32::MAX),
        Some(n) => {
            return Err(ApiError::bad(format!(
                "max_tokens must be at least 1, got {n}."
            )));
        }
    };
    let min_tokens = match raw.min_tokens.or(raw.min_new_tokens) {
        None => 0,
        Some(n) if n < 0 => {
            return Err(ApiError::bad(format!(
                "min_tokens must be greater than or equal to 0, got {n}."
            )));
        }
        Some(n) => u32::try_from(n).unwrap_or(u32::MAX),
    };
    if min_tokens > max_tokens {
        return Err(ApiError::bad(format!(
            "min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."
        )));
    }
    let total = u64::from(prompt_tokens) + u64::from(max_tokens);
    if total > u64::from(limits.max_model_len) {
        return Err(ApiError::bad(format!(
            "This model's maximum context length is {} tokens. However, you requested {total} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion.",
            limits.max_model_len
        )));
    }
    if raw.stream_options.is_some() && !raw.stream {
        return Err(ApiError::bad(
            "Stream options can only be defined when `stream=True`.",
        ));
    }
    let handoff = handoff(&raw)?;
    let opts = raw.stream_options.unwrap_or_default();
    Ok(GenRequest {
        endpoint,
        prompt_tokens,
        max_tokens,
        min_tokens,
        ignore_eos: raw.ignore_eos,
        stream: raw.stream,
        include_usage: opts.include_usage,
        // As vLLM: per-chunk usage only together with the final usage chunk.
        continuous_usage: opts.include_usage && opts.continuous_usage_stats,
        seed: raw.seed,
        handoff,
        prompt_ids,
    })
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The KV handoff a request names: SGLang's `bootstrap_room` (with host and port), or vLLM's
/// `kv_transfer_params` with `do_remote_decode` (prefill leg) or `do_remote_prefill` (decode
/// leg, which needs the prefill answer's `remote_host`, `remote_port`, `remote_request_id`).
fn handoff(raw: &RawRequest) -> Result<Option<Handoff>, ApiError> {
    if let Some(room) = raw.bootstrap_room {
        let host = raw
            .bootstrap_host
            .clone()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| ApiError::bad("`bootstrap_room` needs a `bootstrap_host`"))?;
        return Ok(Some(Handoff::Sglang {
            host,
            port: raw.bootstrap_port,
            room,
        }));
    }
    let Some(params) = raw.kv_transfer_params.as_ref().filter(|v| v.is_object()) else {
        return Ok(None);
    };
    let flag = |name: &str| params.get(name).and_then(Value::as_bool) == Some(true);
    if flag("do_remote_decode") {
        return Ok(Some(Handoff::RemoteDecode));
    }
    if !flag("do_remote_prefill") {
        return Ok(None);
    }
    let host = params.get("remote_host").and_then(Value::as_str);
    let port = params
        .get("remote_port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok());
    let id = params.get("remote_request_id").and_then(Value::as_str);
    match (host, port, id) {
        (Some(host), Some(port), Some(id)) => Ok(Some(Handoff::RemotePrefill {
            host: host.to_owned(),
            port,
            request_id: id.to_owned(),
        })),
        _ => Err(ApiError::bad(
            "kv_transfer_params with do_remote_prefill needs remote_host, remote_port and \
             remote_request_id, as a mock prefill worker's answer gives them",
        )),
    }
}

/// Count a completions `prompt`: a string, a list of token ids, or a one-element list of
/// either.
fn count_prompt(prompt: &Value, tokenizer: &TokenCounter) -> Result<u32, ApiError> {
    match prompt {
        Value::String(s) => Ok(tokenizer.count(s, true)),
        Value::Array(items) if items.iter().all(Value::is_u64) => {
            Ok(u32::try_from(items.len()).unwrap_or(u32::MAX))
        }
        Value::Array(items) if items.len() == 1 => count_prompt(&items[0], tokenizer),
        Value::Array(_) => Err(ApiError::bad(
            "the mock server takes one prompt per request (a string or a list of token ids)",
        )),
        _ => Err(ApiError::bad(
            "`prompt` must be a string or a list of token ids",
        )),
    }
}

/// The token ids of a completions `prompt` (the forms `count_prompt` takes). Ids given in the
/// request are kept as they are (truncated to 32 bits).
fn prompt_ids(prompt: &Value, tokenizer: &TokenCounter) -> Result<Vec<u32>, ApiError> {
    match prompt {
        Value::String(s) => Ok(tokenizer.encode(s, true)),
        Value::Array(items) if items.iter().all(Value::is_u64) => Ok(items
            .iter()
            .filter_map(Value::as_u64)
            .map(|id| id as u32)
            .collect()),
        Value::Array(items) if items.len() == 1 => prompt_ids(&items[0], tokenizer),
        // The same errors as counting.
        other => count_prompt(other, tokenizer).map(|_| Vec::new()),
    }
}

/// The token ids of chat `messages` through the tokenizer's chat template; `None` when it has
/// none.
fn chat_template_ids(
    messages: &[RawMessage],
    tokenizer: &TokenCounter,
) -> Option<Result<Vec<u32>, ApiError>> {
    let texts: Vec<(&str, String)> = messages
        .iter()
        .map(|m| {
            (
                m.role.as_deref().unwrap_or("user"),
                content_text(m.content.as_ref()),
            )
        })
        .collect();
    let pairs: Vec<(&str, &str)> = texts.iter().map(|(r, t)| (*r, t.as_str())).collect();
    let ids = tokenizer.encode_chat(&pairs)?;
    Some(ids.map_err(|e| ApiError::bad(format!("cannot apply the chat template: {e}"))))
}

/// The token ids of chat `messages`: the chat template's when the tokenizer has one, else
/// each content's ids in turn (as `count_messages` counts them).
fn message_ids(messages: &[RawMessage], tokenizer: &TokenCounter) -> Result<Vec<u32>, ApiError> {
    if let Some(ids) = chat_template_ids(messages, tokenizer) {
        return ids;
    }
    let mut out = Vec::new();
    for m in messages {
        match m.content.as_ref() {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => out.extend(tokenizer.encode(s, false)),
            Some(Value::Array(parts)) => {
                for t in parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                {
                    out.extend(tokenizer.encode(t, false));
                }
            }
            Some(_) => {
                return Err(ApiError::bad(
                    "message `content` must be a string or a list of parts",
                ));
            }
        }
    }
    Ok(out)
}

/// Count chat `messages`: through the tokenizer's chat template when it has one (as vLLM),
/// else the sum of the contents.
fn count_messages(messages: &[RawMessage], tokenizer: &TokenCounter) -> Result<u32, ApiError> {
    if let Some(ids) = chat_template_ids(messages, tokenizer) {
        return Ok(u32::try_from(ids?.len()).unwrap_or(u32::MAX));
    }
    let mut total = 0u32;
    for m in messages {
        total = total.saturating_add(count_content(m.content.as_ref(), tokenizer)?);
    }
    Ok(total)
}

/// A message's text: the string, or its parts' `text` joined.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Count one chat message's `content`: a string, or a list of parts whose `text` counts.
fn count_content(content: Option<&Value>, tokenizer: &TokenCounter) -> Result<u32, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(s)) => Ok(tokenizer.count(s, false)),
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(|t| tokenizer.count(t, false))
            .fold(0u32, u32::saturating_add)),
        Some(_) => Err(ApiError::bad(
            "message `content` must be a string or a list of parts",
        )),
    }
}

/// The number of tokens to generate: `max_tokens` with ignore_eos, otherwise a seeded
/// length in `[max(min_tokens, 1), max_tokens]` (the simulated EOS).
pub(crate) fn output_length(req: &GenRequest, seed: u64, request_index: u64) -> u32 {
    if req.ignore_eos {
        return req.max_tokens;
    }
    let lo = req.min_tokens.max(1);
    let span = u64::from(req.max_tokens - lo) + 1;
    let h = match req.seed {
        Some(s) => crate::tokens::mix(seed ^ s, 0),
        None => crate::tokens::mix(seed, request_index),
    };
    lo + (h % span) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits<'static> {
        static WS: TokenCounter = TokenCounter::Whitespace;
        Limits {
            model: "m",
            max_model_len: 100,
            tokenizer: &WS,
            want_ids: false,
        }
    }

    fn p(endpoint: Endpoint, body: &str) -> Result<GenRequest, ApiError> {
        parse(endpoint, body.as_bytes(), limits())
    }

    #[test]
    fn ids_kept_only_when_wanted_and_match_the_count() {
        let with_ids = Limits {
            want_ids: true,
            ..limits()
        };
        let body = br#"{"prompt":"a b c a"}"#;
        let r = parse(Endpoint::Completions, body, with_ids).unwrap();
        let ids = r.prompt_ids.unwrap();
        assert_eq!((ids.len(), r.prompt_tokens), (4, 4));
        assert_eq!(ids[0], ids[3], "the same word is the same id");
        assert!(
            p(Endpoint::Completions, r#"{"prompt":"a b"}"#)
                .unwrap()
                .prompt_ids
                .is_none()
        );
        let r = parse(Endpoint::Completions, br#"{"prompt":[7,8,9]}"#, with_ids).unwrap();
        assert_eq!(r.prompt_ids.unwrap(), vec![7, 8, 9]);
        let body = br#"{"messages":[{"role":"system","content":"x y"},{"role":"user","content":[{"type":"text","text":"a b c"}]}]}"#;
        let r = parse(Endpoint::Chat, body, with_ids).unwrap();
        assert_eq!((r.prompt_ids.unwrap().len(), r.prompt_tokens), (5, 5));
        let e = parse(Endpoint::Completions, br#"{"prompt":["a","b"]}"#, with_ids).unwrap_err();
        assert_eq!(e.status, 400);
    }

    #[test]
    fn completions_forms_of_prompt() {
        let r = p(Endpoint::Completions, r#"{"prompt":"a b c"}"#).unwrap();
        assert_eq!((r.prompt_tokens, r.max_tokens, r.stream), (3, 16, false));
        let r = p(Endpoint::Completions, r#"{"prompt":[5,6,7,8]}"#).unwrap();
        assert_eq!(r.prompt_tokens, 4);
        let r = p(Endpoint::Completions, r#"{"prompt":[[5,6]]}"#).unwrap();
        assert_eq!(r.prompt_tokens, 2);
        let e = p(Endpoint::Completions, r#"{"prompt":["a","b"]}"#).unwrap_err();
        assert_eq!(e.status, 400);
    }

    #[test]
    fn chat_counts_message_contents() {
        let r = p(
            Endpoint::Chat,
            r#"{"model":"m","messages":[{"role":"system","content":"x y"},{"role":"user","content":[{"type":"text","text":"a b c"}]}],"max_completion_tokens":5,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#,
        )
        .unwrap();
        assert_eq!((r.prompt_tokens, r.max_tokens), (5, 5));
        assert!(r.stream && r.include_usage && r.continuous_usage);
        let r = p(
            Endpoint::Chat,
            r#"{"messages":[],"stream":true,"stream_options":{"continuous_usage_stats":true}}"#,
        )
        .unwrap();
        assert!(!r.include_usage && !r.continuous_usage);
    }

    #[test]
    fn lengths_and_names_are_checked_like_vllm() {
        let cases = [
            (r#"{"prompt":"a","model":"other"}"#, 404, "does not exist"),
            (r#"{"prompt":"a","max_tokens":0}"#, 400, "max_tokens"),
            (
                r#"{"prompt":"a","max_tokens":5,"min_tokens":6}"#,
                400,
                "min_tokens",
            ),
            (
                r#"{"prompt":"a","max_tokens":100}"#,
                400,
                "maximum context length",
            ),
            (
                r#"{"prompt":"a","stream_options":{"include_usage":true}}"#,
                400,
                "stream=True",
            ),
            (r#"{"prompt":"a","n":2}"#, 400, "n=1"),
            (r#"{"max_tokens":2}"#, 400, "prompt"),
            ("{", 400, "invalid JSON"),
        ];
        for (body, status, needle) in cases {
            let e = p(Endpoint::Completions, body).unwrap_err();
            assert_eq!(e.status, status, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
        let body: Value = serde_json::from_slice(&ApiError::new(404, "x").body()).unwrap();
        assert_eq!(body["error"]["type"], "NotFoundError");
        assert_eq!(body["error"]["code"], 404);
    }

    #[test]
    fn handoff_fields_of_both_protocols() {
        let r = p(
            Endpoint::Completions,
            r#"{"prompt":"a","bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":9223372036854775807}"#,
        )
        .unwrap();
        assert_eq!(
            r.handoff,
            Some(Handoff::Sglang {
                host: "10.0.0.1".into(),
                port: Some(8998),
                room: (1 << 63) - 1
            })
        );
        let r = p(
            Endpoint::Completions,
            r#"{"prompt":"a","bootstrap_host":"h","bootstrap_port":null,"bootstrap_room":1}"#,
        )
        .unwrap();
        assert!(matches!(
            r.handoff,
            Some(Handoff::Sglang { port: None, .. })
        ));
        let r = p(
            Endpoint::Completions,
            r#"{"prompt":"a","kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_host":null}}"#,
        )
        .unwrap();
        assert_eq!(r.handoff, Some(Handoff::RemoteDecode));
        let r = p(
            Endpoint::Chat,
            r#"{"messages":[],"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"h","remote_port":5600,"remote_request_id":"cmpl-1","remote_engine_id":"e"}}"#,
        )
        .unwrap();
        assert_eq!(
            r.handoff,
            Some(Handoff::RemotePrefill {
                host: "h".into(),
                port: 5600,
                request_id: "cmpl-1".into()
            })
        );
        let e = p(
            Endpoint::Completions,
            r#"{"prompt":"a","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"h"}}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("remote_request_id"), "{}", e.message);
        let e = p(
            Endpoint::Completions,
            r#"{"prompt":"a","bootstrap_room":1}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("bootstrap_host"), "{}", e.message);
        let r = p(
            Endpoint::Completions,
            r#"{"prompt":"a","kv_transfer_params":null}"#,
        )
        .unwrap();
        assert_eq!(r.handoff, None);
    }

    #[test]
    fn output_length_respects_ignore_eos_and_min_tokens() {
        let mut r = p(
            Endpoint::Completions,
            r#"{"prompt":"a","max_tokens":50,"min_new_tokens":20}"#,
        )
        .unwrap();
        let lens: Vec<u32> = (0..200).map(|i| output_length(&r, 9, i)).collect();
        assert!(lens.iter().all(|&n| (20..=50).contains(&n)));
        assert!(
            lens.iter().any(|&n| n < 50),
            "without ignore_eos some stop early"
        );
        r.ignore_eos = true;
        assert!((0..50).all(|i| output_length(&r, 9, i) == 50));
        r.ignore_eos = false;
        r.seed = Some(3);
        assert_eq!(output_length(&r, 9, 1), output_length(&r, 9, 2));
    }
}
