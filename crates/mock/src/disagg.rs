//! Prefill/decode disaggregation roles of the mock server (`--disaggregation
//! prefill|decode`): what a worker of each role does with a generation request, in both wire
//! protocols real routers speak.
//!
//! - SGLang (sglang-router / Model Gateway `--pd-disaggregation`): the router sends the same
//!   request to a prefill and a decode worker with `bootstrap_host`, `bootstrap_port` and
//!   `bootstrap_room`. The prefill worker opens that room; the decode worker asks the
//!   prefill's bootstrap listener until the room's prefill finished.
//! - vLLM NIXL (vllm-router `--vllm-pd-disaggregation`, vLLM's toy proxy): the router first
//!   sends the request to prefill with `max_tokens: 1`, `stream: false` and
//!   `kv_transfer_params.do_remote_decode: true`; the prefill answer carries
//!   `kv_transfer_params` (`remote_engine_id`, `remote_request_id`, `remote_block_ids`,
//!   `remote_host`, `remote_port`, ...), which the router passes to a decode worker.
//!
//! A prefill worker pays the prompt's prefill and answers with one token. A decode worker with
//! a handoff waits for the prefill, then the KV transfer time (proportional to the prompt),
//! then decodes, computing only the last prompt token itself (as vLLM's decode side does).
//! A decode worker without a handoff serves the request whole, as vLLM does. The room
//! registry and bootstrap listener live in `handoff.rs`; the role and its settings
//! (`Role`, `Disaggregation`) in `config.rs`; what a request says (`Handoff`) in
//! `protocol.rs`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::app::App;
use crate::config::Role;
use crate::engine::FinishHook;
use crate::handoff::{self, RoomState};
use crate::protocol::{ApiError, GenRequest, Handoff};

/// Tokens per KV block named in `remote_block_ids` (vLLM's default block size).
const BLOCK_TOKENS: u32 = 16;

/// How the generation handler runs a request, given the server's role.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Generate at most this many tokens (prefill: 1).
    pub max_target: Option<u32>,
    /// Prompt tokens the engine computes (decode with a handoff: 1).
    pub engine_prompt: Option<u32>,
    /// Called when the engine finished (or dropped) the sequence.
    pub on_finish: Option<FinishHook>,
    /// JSON for `kv_transfer_params` in a whole (non-streaming) answer.
    pub kv_transfer_params: Option<String>,
}

/// Decide how to run `ask` (request `id`); a decode worker with a handoff waits here for the
/// prefill and the transfer.
pub(crate) async fn prepare(app: &Arc<App>, ask: &GenRequest, id: &str) -> Result<Plan, ApiError> {
    match app.config.disaggregation.role {
        Role::None => Ok(Plan::default()),
        Role::Prefill => Ok(prefill(app, ask, id)),
        Role::Decode => decode(app, ask).await,
    }
}

fn prefill(app: &Arc<App>, ask: &GenRequest, id: &str) -> Plan {
    let mut plan = Plan {
        max_target: Some(1),
        ..Plan::default()
    };
    let key = match &ask.handoff {
        Some(Handoff::Sglang { room, .. }) => format!("s:{room}"),
        Some(Handoff::RemoteDecode) => format!("n:{id}"),
        _ => return plan,
    };
    app.rooms.open(&key);
    let rooms = app.rooms.clone();
    let prompt_tokens = ask.prompt_tokens;
    plan.on_finish = Some(FinishHook::new(move |ok| {
        let state = if ok {
            RoomState::Done { prompt_tokens }
        } else {
            RoomState::Failed
        };
        rooms.finish(&key, state);
    }));
    if ask.handoff == Some(Handoff::RemoteDecode) && !ask.stream {
        plan.kv_transfer_params = Some(kv_transfer_params(app, ask.prompt_tokens, id));
    }
    plan
}

/// The prefill answer's `kv_transfer_params`, vLLM NixlConnector's fields plus
/// `remote_request_id` (the room key the decode worker asks for).
fn kv_transfer_params(app: &App, prompt_tokens: u32, id: &str) -> String {
    let (host, port) = match app.bootstrap {
        Some(addr) => {
            let host = match &app.config.disaggregation.side_channel_host {
                Some(h) => h.clone(),
                None if addr.ip().is_unspecified() => "127.0.0.1".to_owned(),
                None => addr.ip().to_string(),
            };
            (host, addr.port())
        }
        None => ("127.0.0.1".to_owned(), 0),
    };
    let blocks: Vec<u32> = (0..prompt_tokens.div_ceil(BLOCK_TOKENS)).collect();
    json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_block_ids": blocks,
        "remote_engine_id": app.engine_id,
        "remote_request_id": id,
        "remote_host": host,
        "remote_port": port,
        "tp_size": 1,
    })
    .to_string()
}

async fn decode(app: &Arc<App>, ask: &GenRequest) -> Result<Plan, ApiError> {
    let (host, port, key) = match &ask.handoff {
        Some(Handoff::Sglang { host, port, room }) => {
            let Some(port) = port else {
                return Err(ApiError::new(
                    400,
                    "bootstrap_port is null: give the router the prefill worker's bootstrap \
                     port (--prefill URL BOOTSTRAP_PORT)",
                ));
            };
            (host.as_str(), *port, format!("s:{room}"))
        }
        Some(Handoff::RemotePrefill {
            host,
            port,
            request_id,
        }) => (host.as_str(), *port, format!("n:{request_id}")),
        _ => return Ok(Plan::default()),
    };
    let settings = &app.config.disaggregation;
    let prompt_tokens = handoff::fetch_room(host, port, &key, settings.kv_wait_timeout)
        .await
        .map_err(|e| ApiError::new(500, e))?;
    let ms = f64::from(prompt_tokens) * settings.kv_transfer_ms_per_token / app.config.speed;
    if ms > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(ms / 1000.0)).await;
    }
    Ok(Plan {
        engine_prompt: Some(1),
        ..Plan::default()
    })
}
