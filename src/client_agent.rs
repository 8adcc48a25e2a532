//! The client agent: the load generator run on another host (`client: {host: H}`), as the
//! hidden `orchestrate client-agent`. Its protocol: stdin carries one JSON line, the
//! [`AgentLoad`] (target, load shape and the prompts, built on the orchestrating machine with
//! its tokenizer), then control lines (`cancel`); stdout carries [`AgentMessage`]s as JSON lines:
//! `started` (pid), one `record` per finished request (times relative to the client's own run
//! start, as local records), `progress` about every 250 ms, then `finished` or `failed`.
//!
//! The agent is its own watchdog: when stdin reaches EOF (the orchestrator stopped listening,
//! was interrupted, or the SSH connection dropped) or stdout breaks, it exits at once. It
//! starts no children, so nothing outlives it.
//!
//! Owns: the wire format and the agent side. Does not own: the load generator (`client`) or
//! the SSH side (`fleet::remote_client`).

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::client::{
    self, ClientConfig, MetricsSource, Observer, Progress, Prompt, RequestRecord, RpsChange,
    RunOutcome, SelfCheck, ServerSeries, ServerWindow,
};

use crate::load::{Backend, Endpoint, LoadShape};

/// Exit code of an agent whose stdin closed or stdout broke before it finished.
pub const EXIT_ORPHANED: i32 = 3;

/// The control line that cancels the run (in-flight requests end as `cancelled`).
pub const CANCEL: &str = "cancel";

/// One point's load for the agent: the client's config (less what cannot travel: the output
/// re-tokenization check) and the prompts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentLoad {
    pub base_url: String,
    pub backend: Backend,
    pub endpoint: Endpoint,
    pub path: Option<String>,
    pub model: String,
    pub ignore_eos: bool,
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    pub api_key: Option<String>,
    pub request_timeout_ms: Option<u64>,
    pub ttft_timeout_ms: Option<u64>,
    pub drain_timeout_ms: Option<u64>,
    /// The stall timeout; `None` (also from an older sender): none.
    #[serde(default)]
    pub stall_timeout_ms: Option<u64>,
    pub shape: LoadShape,
    pub seed: u64,
    pub server_metrics: Option<String>,
    /// The time-series interval; `None` (also from an older sender): off.
    #[serde(default)]
    pub timeseries_interval_ms: Option<u64>,
    /// Other servers scraped beside the entry.
    #[serde(default)]
    pub metrics_sources: Vec<MetricsSource>,
    /// Keep each answer's text in its record (`--save-detailed`'s `generated_texts`).
    #[serde(default)]
    pub keep_texts: bool,
    pub prompts: Vec<Prompt>,
}

fn ms(d: Option<Duration>) -> Option<u64> {
    d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl AgentLoad {
    /// `config` aimed at `base_url` (the server as seen from the agent's host).
    pub fn new(config: &ClientConfig, base_url: &str, prompts: Vec<Prompt>) -> Self {
        AgentLoad {
            base_url: base_url.to_string(),
            backend: config.backend,
            endpoint: config.endpoint,
            path: config.path.clone(),
            model: config.model.clone(),
            ignore_eos: config.ignore_eos,
            extra_body: config.extra_body.clone(),
            api_key: config.api_key.clone(),
            request_timeout_ms: ms(config.request_timeout),
            ttft_timeout_ms: ms(config.ttft_timeout),
            drain_timeout_ms: ms(config.drain_timeout),
            stall_timeout_ms: ms(config.stall_timeout),
            shape: config.shape.clone(),
            seed: config.seed,
            server_metrics: config.server_metrics.clone(),
            timeseries_interval_ms: ms(config.timeseries_interval),
            metrics_sources: config.metrics_sources.clone(),
            keep_texts: config.keep_texts,
            prompts,
        }
    }

    /// The client config and prompts it describes.
    pub fn into_parts(self) -> (ClientConfig, Vec<Prompt>) {
        let mut config = ClientConfig::new(self.base_url, self.model, self.shape);
        config.backend = self.backend;
        config.endpoint = self.endpoint;
        config.path = self.path;
        config.ignore_eos = self.ignore_eos;
        config.extra_body = self.extra_body;
        config.api_key = self.api_key;
        config.request_timeout = self.request_timeout_ms.map(Duration::from_millis);
        config.ttft_timeout = self.ttft_timeout_ms.map(Duration::from_millis);
        config.drain_timeout = self.drain_timeout_ms.map(Duration::from_millis);
        config.stall_timeout = self.stall_timeout_ms.map(Duration::from_millis);
        config.seed = self.seed;
        config.server_metrics = self.server_metrics;
        config.timeseries_interval = self.timeseries_interval_ms.map(Duration::from_millis);
        config.metrics_sources = self.metrics_sources;
        config.keep_texts = self.keep_texts;
        (config, self.prompts)
    }
}

/// One line the agent writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentMessage {
    /// First line: the agent's process id (for the emergency kill).
    Started {
        pid: u32,
    },
    Record(RequestRecord),
    Progress(WireProgress),
    Finished(Box<WireOutcome>),
    /// The client refused to start (bad URL, no prompts, unbounded load).
    Failed {
        error: String,
    },
}

/// [`Progress`] on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireProgress {
    pub elapsed_ms: u64,
    pub done: u64,
    pub failed: u64,
    pub in_flight: u64,
    pub total: Option<u64>,
    pub output_tokens: u64,
    pub requests_per_s: f64,
    pub tokens_per_s: f64,
}

impl From<&Progress> for WireProgress {
    fn from(p: &Progress) -> Self {
        WireProgress {
            elapsed_ms: u64::try_from(p.elapsed.as_millis()).unwrap_or(u64::MAX),
            done: p.done,
            failed: p.failed,
            in_flight: p.in_flight,
            total: p.total,
            output_tokens: p.output_tokens,
            requests_per_s: p.requests_per_s,
            tokens_per_s: p.tokens_per_s,
        }
    }
}

impl From<&WireProgress> for Progress {
    fn from(p: &WireProgress) -> Self {
        Progress {
            elapsed: Duration::from_millis(p.elapsed_ms),
            done: p.done,
            failed: p.failed,
            in_flight: p.in_flight,
            total: p.total,
            output_tokens: p.output_tokens,
            requests_per_s: p.requests_per_s,
            tokens_per_s: p.tokens_per_s,
        }
    }
}

/// A [`RunOutcome`] without its records (they went ahead one by one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireOutcome {
    /// The client's run start on the agent's clock (offset 0 of every record).
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub elapsed_us: u64,
    pub max_in_flight: u64,
    pub self_check: SelfCheck,
    pub server_metrics: Option<ServerWindow>,
    /// The servers' gauges over the run.
    #[serde(default)]
    pub server_series: Vec<ServerSeries>,
    /// Ramp-up runs: vLLM's `rps_change_events`.
    #[serde(default)]
    pub rps_change_events: Vec<RpsChange>,
}

impl WireOutcome {
    pub fn new(outcome: &RunOutcome) -> Self {
        WireOutcome {
            started_at: outcome.started_at,
            elapsed_us: u64::try_from(outcome.elapsed.as_micros()).unwrap_or(u64::MAX),
            max_in_flight: outcome.max_in_flight,
            self_check: outcome.self_check.clone(),
            server_metrics: outcome.server_metrics.clone(),
            server_series: outcome.server_series.clone(),
            rps_change_events: outcome.rps_change_events.clone(),
        }
    }

    /// The run outcome, with the records received before it.
    pub fn with_records(self, records: Vec<RequestRecord>) -> RunOutcome {
        RunOutcome {
            records,
            started_at: self.started_at,
            elapsed: Duration::from_micros(self.elapsed_us),
            max_in_flight: self.max_in_flight,
            self_check: self.self_check,
            server_metrics: self.server_metrics,
            server_series: self.server_series,
            rps_change_events: self.rps_change_events,
        }
    }
}

/// Writes messages as JSON lines; a broken stdout ends the agent.
struct Lines {
    out: Mutex<std::io::BufWriter<std::fs::File>>,
}

impl Lines {
    fn stdout() -> std::io::Result<Self> {
        use std::os::fd::AsFd;
        let fd = std::io::stdout().as_fd().try_clone_to_owned()?;
        Ok(Lines {
            out: Mutex::new(std::io::BufWriter::with_capacity(
                256 * 1024,
                std::fs::File::from(fd),
            )),
        })
    }

    fn send(&self, message: &AgentMessage, flush: bool) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let written = serde_json::to_writer(&mut *out, message)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| if flush { out.flush() } else { Ok(()) });
        if written.is_err() {
            std::process::exit(EXIT_ORPHANED);
        }
    }
}

impl Observer for Lines {
    fn on_record(&self, record: &RequestRecord) {
        // Records are cloned into the message: one allocation per request, off the hot path
        // of the exchange (the observer runs after a request ended).
        self.send(&AgentMessage::Record(record.clone()), false);
    }

    fn on_progress(&self, progress: &Progress) {
        self.send(&AgentMessage::Progress(progress.into()), true);
    }
}

/// Run the agent: read the load from stdin, drive the client, write messages to stdout.
/// Returns the process exit code.
pub async fn serve() -> i32 {
    let lines = match Lines::stdout() {
        Ok(l) => Arc::new(l),
        Err(_) => return EXIT_ORPHANED,
    };
    lines.send(
        &AgentMessage::Started {
            pid: std::process::id(),
        },
        true,
    );
    let cancel = CancellationToken::new();
    let (load_tx, load_rx) = tokio::sync::oneshot::channel();
    let stop = cancel.clone();
    std::thread::spawn(move || {
        let mut input = std::io::stdin().lock();
        let mut first = String::new();
        let _ = load_tx.send(match input.read_line(&mut first) {
            Ok(0) | Err(_) => Err("no load description on stdin".to_string()),
            Ok(_) => serde_json::from_str::<AgentLoad>(&first)
                .map_err(|e| format!("bad load description: {e}")),
        });
        drop(first);
        for line in input.lines() {
            match line {
                Ok(l) if l.trim() == CANCEL => stop.cancel(),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        // Nobody listens any more: leave at once (no children to clean up).
        std::process::exit(EXIT_ORPHANED);
    });
    let load = match load_rx.await {
        Ok(Ok(load)) => load,
        Ok(Err(error)) => {
            lines.send(&AgentMessage::Failed { error }, true);
            return 2;
        }
        Err(_) => return EXIT_ORPHANED,
    };
    let (config, prompts) = load.into_parts();
    match client::run(&config, prompts, lines.clone(), cancel).await {
        Ok(outcome) => {
            lines.send(
                &AgentMessage::Finished(Box::new(WireOutcome::new(&outcome))),
                true,
            );
            0
        }
        Err(e) => {
            lines.send(
                &AgentMessage::Failed {
                    error: e.to_string(),
                },
                true,
            );
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Chunk, ChunkTokens, RequestOutcome, TimeoutPhase, Usage};
    use crate::load::{Limit, Rate};

    fn record(outcome: RequestOutcome) -> RequestRecord {
        RequestRecord {
            index: 3,
            prompt_index: 1,
            session: None,
            turn: None,
            scheduled_us: 10,
            dispatched_us: 12,
            sent_us: 15,
            headers_us: Some(900),
            prompt_len: 16,
            output_len: 30,
            usage: Usage {
                prompt_tokens: Some(16),
                completion_tokens: Some(30),
                ..Default::default()
            },
            tokenizer_output_tokens: None,
            chunk_tokens: ChunkTokens::Usage,
            chunks: vec![
                Chunk {
                    t_us: 1000,
                    tokens: 1,
                },
                Chunk {
                    t_us: 41_000,
                    tokens: 29,
                },
            ],
            first_content_us: None,
            end_us: 41_100,
            generated_text: None,
            outcome,
        }
    }

    #[test]
    fn records_survive_the_wire_unchanged() {
        for outcome in [
            RequestOutcome::Completed,
            RequestOutcome::HttpStatus {
                code: 503,
                body: "busy".into(),
            },
            RequestOutcome::TimedOut {
                phase: TimeoutPhase::FirstToken,
            },
            RequestOutcome::Cancelled,
        ] {
            let message = AgentMessage::Record(record(outcome));
            let line = serde_json::to_string(&message).unwrap();
            let back: AgentMessage = serde_json::from_str(&line).unwrap();
            assert_eq!(back, message, "{line}");
        }
    }

    #[test]
    fn the_load_description_round_trips_into_the_same_config() {
        let shape = LoadShape {
            max_concurrency: Some(4),
            rate: Rate::Gamma {
                rps: 2.5,
                burstiness: 0.5,
            },
            ramp_up: None,
            limit: Limit::Duration(Duration::from_millis(1500)),
            warmup: Duration::from_secs(2),
            cooldown: Duration::ZERO,
        };
        let mut config = ClientConfig::new("http://here:1", "m", shape.clone());
        config.request_timeout = Some(Duration::from_millis(2500));
        config.stall_timeout = Some(Duration::from_millis(1700));
        config.seed = 7;
        config.ignore_eos = true;
        let prompts = vec![Prompt {
            text: "hello".into(),
            prompt_len: 1,
            output_len: 8,
            at_us: None,
            session: None,
            messages: None,
        }];
        let load = AgentLoad::new(&config, "http://there:2", prompts.clone());
        let text = serde_json::to_string(&load).unwrap();
        let (back, back_prompts) = serde_json::from_str::<AgentLoad>(&text)
            .unwrap()
            .into_parts();
        assert_eq!(back.base_url, "http://there:2");
        assert_eq!(back.shape, shape);
        assert_eq!(back.request_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(back.stall_timeout, Some(Duration::from_millis(1700)));
        assert_eq!((back.seed, back.ignore_eos), (7, true));
        assert_eq!(back_prompts, prompts);
    }
}
