//! HTTP routes of the mock server: `/health`, `/metrics`, `/v1/models`, `/version`,
//! `/server_info` and `/model_info` (SGLang's), `/tokenize`, `/detokenize`, and the two
//! generation endpoints (parse, inject errors or the crash, play the disaggregation role, hand
//! the sequence to the engine, answer with a stream or wait for the whole text). Not here:
//! the accept loop (`server.rs`) or how bodies are produced (`stream.rs`).

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::App;
use crate::disagg;
use crate::engine::{SeqState, Submission};
use crate::prefix::{PrefixCache, block_hashes};
use crate::protocol::{self, ApiError, Endpoint, GenRequest, Limits};
use crate::render::Render;
use crate::stream::{MockBody, SseBody, TruthDraft};
use crate::tokens::{TokenCounter, mix, unit};
use crate::truth::{TruthRecord, TruthStatus};

/// Largest request body accepted.
const MAX_BODY: usize = 64 << 20;
/// Salt so error injection and output lengths use different draws of the same seed.
const ERROR_SALT: u64 = 0x5eed_e770;

type Resp = Response<MockBody>;

pub(crate) async fn handle(app: Arc<App>, req: Request<Incoming>) -> Resp {
    let arrival = Instant::now();
    let not_ready = not_ready(&app, arrival);
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    match (method, path.as_str()) {
        // SGLang's `/health_generate` (dstack's PD examples probe it) answers as `/health`.
        (Method::GET, "/health" | "/health_generate") => match &not_ready {
            Some(why) => response(StatusCode::SERVICE_UNAVAILABLE, "text/plain", why.clone()),
            None => response(StatusCode::OK, "text/plain", ""),
        },
        (Method::GET, "/metrics") => response(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            app.metrics.render(&app.model_json),
        ),
        (_, _) if not_ready.is_some() => error(&ApiError::new(
            503,
            format!("the model is not ready: {}", not_ready.unwrap_or_default()),
        )),
        (Method::GET, "/v1/models") => models(&app),
        (Method::GET, "/server_info" | "/get_server_info") => server_info(&app),
        (Method::GET, "/model_info" | "/get_model_info") => json_response(
            StatusCode::OK,
            json!({"model_path": app.config.model, "tokenizer_path": null, "is_generation": true})
                .to_string(),
        ),
        (Method::GET, "/version") => json_response(
            StatusCode::OK,
            json!({"version": concat!("orchestrate-mock ", env!("CARGO_PKG_VERSION"))}).to_string(),
        ),
        (Method::POST, "/v1/completions") => {
            generate(app, req, Endpoint::Completions, arrival).await
        }
        (Method::POST, "/v1/chat/completions") => generate(app, req, Endpoint::Chat, arrival).await,
        (Method::POST, "/tokenize") => tokenize(&app, req).await,
        (Method::POST, "/detokenize") => detokenize(&app, req).await,
        (
            _,
            "/health"
            | "/health_generate"
            | "/metrics"
            | "/v1/models"
            | "/server_info"
            | "/model_info"
            | "/version"
            | "/v1/completions"
            | "/v1/chat/completions"
            | "/tokenize"
            | "/detokenize",
        ) => error(&ApiError::new(405, format!("method not allowed on {path}"))),
        _ => error(&ApiError::new(404, format!("no route {path}"))),
    }
}

/// Why `/health` is not 200 yet: the startup delay, or ranks of the gang still missing.
fn not_ready(app: &App, now: Instant) -> Option<String> {
    if now < app.ready_at {
        return Some("loading".into());
    }
    match &app.gang {
        Some(g) if !g.complete() => Some(format!(
            "waiting for the gang: {} of {} ranks joined",
            g.joined(),
            g.nnodes
        )),
        _ => None,
    }
}

/// SGLang's `/server_info`: the fields routers read (disaggregation mode, bootstrap port).
fn server_info(app: &App) -> Resp {
    let body = json!({
        "model_path": app.config.model,
        "served_model_name": app.config.model,
        "disaggregation_mode": app.config.disaggregation.role.name(),
        "disaggregation_bootstrap_port": app.bootstrap.map(|a| a.port()),
        "nnodes": app.gang.as_ref().map_or(1, |g| g.nnodes),
        "node_rank": 0,
        "max_model_len": app.config.max_model_len,
        "version": concat!("orchestrate-mock ", env!("CARGO_PKG_VERSION")),
    });
    json_response(StatusCode::OK, body.to_string())
}

fn response(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(MockBody::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    response(status, "application/json", body)
}

fn error(e: &ApiError) -> Resp {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, e.body())
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn models(app: &App) -> Resp {
    let model = &app.config.model;
    let body = json!({
        "object": "list",
        "data": [{
            "id": model,
            "object": "model",
            "created": unix_secs(),
            "owned_by": "orchestrate-mock",
            "root": model,
            "parent": null,
            "max_model_len": app.config.max_model_len,
        }],
    });
    json_response(StatusCode::OK, body.to_string())
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| ApiError::new(400, format!("could not read the request body: {e}")))
}

async fn generate(
    app: Arc<App>,
    req: Request<Incoming>,
    endpoint: Endpoint,
    arrival: Instant,
) -> Resp {
    let n = app.requests.fetch_add(1, Ordering::Relaxed) + 1;
    if let Some(limit) = app.config.crash_after
        && n > limit
    {
        app.crash_request.store(n, Ordering::Relaxed);
        app.crash.cancel();
        // `serve` is about to cut every connection, this one included.
        return std::future::pending().await;
    }
    let x_request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let id = match endpoint {
        Endpoint::Completions => format!("cmpl-{}-{n}", app.id_tag),
        Endpoint::Chat => format!("chatcmpl-{}-{n}", app.id_tag),
    };
    let mut truth = app.truth.as_ref().map(|sink| TruthDraft {
        record: TruthRecord {
            id: id.clone(),
            x_request_id,
            endpoint: endpoint.name(),
            stream: false,
            http_status: 200,
            status: TruthStatus::Cancelled,
            arrival_ns: app.clock.at_ns(arrival),
            prompt_tokens: 0,
            completion_tokens: 0,
            role_ns: None,
            chunks: Vec::new(),
            end_ns: None,
        },
        sink: sink.clone(),
        clock: app.clock,
    });
    let parsed = match read_body(req).await {
        Ok(body) => protocol::parse(
            endpoint,
            &body,
            Limits {
                model: &app.config.model,
                max_model_len: app.config.max_model_len,
                tokenizer: &app.config.tokenizer,
                want_ids: app.prefix_cache.is_some(),
            },
        ),
        Err(e) => Err(e),
    };
    let ask = match parsed {
        Ok(g) => g,
        Err(e) => return failed(&e, truth),
    };
    if let Some(t) = &mut truth {
        t.record.stream = ask.stream;
        t.record.prompt_tokens = ask.prompt_tokens;
    }
    if app.config.error_rate > 0.0 && unit(app.config.seed ^ ERROR_SALT, n) < app.config.error_rate
    {
        return failed(
            &ApiError::new(500, "injected error (mock server --error-rate)"),
            truth,
        );
    }
    let pd = match disagg::prepare(&app, &ask, &id).await {
        Ok(pd) => pd,
        Err(e) => return failed(&e, truth),
    };
    let mut target = protocol::output_length(&ask, app.config.seed, n);
    if let Some(most) = pd.max_target {
        target = target.min(most);
    }
    // A decode worker's prompt came from its prefill worker: no cache lookup there.
    let cached_tokens = match (&app.prefix_cache, &ask.prompt_ids, pd.engine_prompt) {
        (Some(cache), Some(ids), None) => Some(prefix_lookup(&app, cache, ids)),
        _ => None,
    };
    let state = Arc::new(SeqState::default());
    app.engine.submit(Submission {
        state: state.clone(),
        // The prefill is charged only for what the cache did not hold.
        prompt_tokens: pd
            .engine_prompt
            .unwrap_or(ask.prompt_tokens - cached_tokens.unwrap_or(0)),
        target,
        max_tokens: ask.max_tokens,
        stream: ask.stream,
        arrival,
        on_finish: pd.on_finish,
    });
    let render = Render {
        endpoint,
        id,
        created: unix_secs(),
        model_json: app.model_json.clone(),
        prompt_tokens: ask.prompt_tokens,
        max_tokens: ask.max_tokens,
        word_seed: mix(app.config.seed, n),
        continuous_usage: ask.continuous_usage,
        cached_tokens,
        reasoning_tokens: app.config.reasoning_tokens,
        chunk_head: std::cell::OnceCell::new(),
    };
    if ask.stream {
        stream_response(&app, state, render, &ask, truth)
    } else {
        whole_response(state, render, truth, pd.kv_transfer_params).await
    }
}

/// Look the prompt up in the prefix cache (and hold its blocks), count the query and the hit
/// on /metrics as vLLM does (in tokens), and return the cached tokens.
fn prefix_lookup(app: &App, cache: &Mutex<PrefixCache>, ids: &[u32]) -> u32 {
    let hashes = block_hashes(ids, app.config.prefix_cache.block_tokens);
    let prompt = u32::try_from(ids.len()).unwrap_or(u32::MAX);
    let cached = cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .lookup_and_insert(&hashes, prompt);
    let m = &app.metrics;
    m.prefix_cache_queries
        .fetch_add(u64::from(prompt), Ordering::Relaxed);
    m.prefix_cache_hits
        .fetch_add(u64::from(cached), Ordering::Relaxed);
    // The engine counts the prompt tokens it prefills; the cached ones are prompt tokens too.
    m.prompt_tokens
        .fetch_add(u64::from(cached), Ordering::Relaxed);
    cached
}

fn failed(e: &ApiError, truth: Option<TruthDraft>) -> Resp {
    let mut r = error(e);
    if let Some(mut t) = truth {
        t.record.http_status = e.status;
        t.record.status = TruthStatus::Error;
        *r.body_mut() = MockBody::Full(Some(e.body()), Some(Box::new(t)));
    }
    r
}

fn stream_response(
    app: &App,
    state: Arc<SeqState>,
    render: Render,
    ask: &GenRequest,
    truth: Option<TruthDraft>,
) -> Resp {
    let body = SseBody::new(
        state,
        render,
        app.config.tokens_per_chunk,
        ask.include_usage,
        truth,
    );
    let mut r = Response::new(MockBody::Sse(Box::new(body)));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    r
}

/// Cancels the sequence if the handler is dropped (client gone) before it finished.
struct CancelOnDrop(Arc<SeqState>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

async fn whole_response(
    state: Arc<SeqState>,
    render: Render,
    truth: Option<TruthDraft>,
    kv_transfer_params: Option<String>,
) -> Resp {
    let guard = CancelOnDrop(state);
    let done = poll_fn(|cx| guard.0.poll_done(cx)).await;
    if done.aborted {
        return failed(&ApiError::new(503, "the server is shutting down"), truth);
    }
    let mut r = json_response(StatusCode::OK, Bytes::new());
    let mut body = render.full(done.generated);
    if let Some(params) = kv_transfer_params {
        // The object's closing brace makes way for one more field.
        let mut v = body.to_vec();
        v.pop();
        v.extend_from_slice(b",\"kv_transfer_params\":");
        v.extend_from_slice(params.as_bytes());
        v.push(b'}');
        body = Bytes::from(v);
    }
    *r.body_mut() = match truth {
        Some(mut t) => {
            // Moved into the single chunk when the body is handed over.
            t.record.completion_tokens = done.generated;
            MockBody::Full(Some(body), Some(Box::new(t)))
        }
        None => MockBody::full(body),
    };
    r
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TokenizeRequest {
    model: Option<String>,
    prompt: Option<Value>,
    messages: Option<Vec<Value>>,
    add_special_tokens: Option<bool>,
}

/// vLLM's `/tokenize`: `{"prompt": ...}` or `{"messages": [...]}` ->
/// `{"count", "max_model_len", "tokens", "token_strs"}`.
async fn tokenize(app: &App, req: Request<Incoming>) -> Resp {
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(e) => return error(&e),
    };
    let r: TokenizeRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(&ApiError::new(
                400,
                format!("invalid JSON request body: {e}"),
            ));
        }
    };
    if let Some(model) = &r.model
        && model != &app.config.model
    {
        return error(&ApiError::new(
            404,
            format!("The model `{model}` does not exist."),
        ));
    }
    let tok = &app.config.tokenizer;
    let chat = match (&r.prompt, &r.messages) {
        (None, Some(messages)) => chat_ids(tok, messages),
        _ => None,
    };
    let tokens: Vec<u32> = match (&r.prompt, &r.messages) {
        (Some(Value::String(s)), _) => tok.encode(s, r.add_special_tokens.unwrap_or(true)),
        (Some(Value::Array(ids)), _) if ids.iter().all(Value::is_u64) => ids
            .iter()
            .filter_map(Value::as_u64)
            .map(|v| v as u32)
            .collect(),
        (None, Some(_)) if chat.is_some() => match chat {
            Some(Ok(ids)) => ids,
            Some(Err(e)) => return error(&ApiError::new(400, e)),
            None => Vec::new(),
        },
        (None, Some(messages)) => {
            let mut ids = Vec::new();
            for m in messages {
                match m.get("content") {
                    Some(Value::String(s)) => {
                        ids.extend(tok.encode(s, r.add_special_tokens.unwrap_or(false)));
                    }
                    Some(Value::Array(parts)) => {
                        for t in parts
                            .iter()
                            .filter_map(|p| p.get("text").and_then(Value::as_str))
                        {
                            ids.extend(tok.encode(t, r.add_special_tokens.unwrap_or(false)));
                        }
                    }
                    _ => {}
                }
            }
            ids
        }
        _ => {
            return error(&ApiError::new(
                400,
                "`prompt` (a string or token ids) or `messages` is required",
            ));
        }
    };
    let body = json!({
        "count": tokens.len(),
        "max_model_len": app.config.max_model_len,
        "tokens": tokens,
        "token_strs": null,
    });
    json_response(StatusCode::OK, body.to_string())
}

#[derive(Debug, Deserialize)]
struct DetokenizeRequest {
    model: Option<String>,
    tokens: Vec<u32>,
}

/// vLLM's `/detokenize`: `{"model", "tokens": [...]}` -> `{"prompt": "..."}`.
async fn detokenize(app: &App, req: Request<Incoming>) -> Resp {
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(e) => return error(&e),
    };
    let r: DetokenizeRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(&ApiError::new(
                400,
                format!("invalid JSON request body (expected {{\"tokens\": [ids]}}): {e}"),
            ));
        }
    };
    if let Some(model) = &r.model
        && model != &app.config.model
    {
        return error(&ApiError::new(
            404,
            format!("The model `{model}` does not exist."),
        ));
    }
    match app.config.tokenizer.decode(&r.tokens) {
        Ok(prompt) => json_response(StatusCode::OK, json!({"prompt": prompt}).to_string()),
        Err(e) => error(&ApiError::new(400, format!("cannot detokenize: {e}"))),
    }
}

/// `/tokenize` of chat `messages` through the chat template, when the tokenizer has one.
fn chat_ids(tok: &TokenCounter, messages: &[Value]) -> Option<Result<Vec<u32>, String>> {
    let pairs: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| {
            (
                m.get("role").and_then(Value::as_str).unwrap_or("user"),
                m.get("content").and_then(Value::as_str).unwrap_or(""),
            )
        })
        .collect();
    tok.encode_chat(&pairs)
}
