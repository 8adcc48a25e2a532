//! `readiness:`: when a server is ready, and the topology and Ray-gang checks of a role.

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::spec::values::{DurationValue, NonZeroDurationValue};

/// `readiness:` of a task.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReadinessSpec {
    /// HTTP path probed with GET (default `/health`).
    #[serde(default)]
    pub http: Option<Spanned<String>>,
    /// Only wait for the port to accept TCP connections instead of probing HTTP (then `http`
    /// and `status` must not be set).
    #[serde(default)]
    pub tcp: bool,
    /// Status the HTTP probe expects (default 200).
    #[serde(default)]
    pub status: Option<Spanned<u16>>,
    /// Time between probes, HTTP or TCP (default 1s).
    #[serde(default)]
    pub interval: Option<Spanned<NonZeroDurationValue>>,
    /// Give up after this long (default 30m).
    #[serde(default)]
    pub timeout: Option<Spanned<DurationValue>>,
    /// Also send one tiny completion before declaring the server ready.
    #[serde(default)]
    pub generate: bool,
    /// Topology readiness of a router role: the prefill/decode worker counts it must report
    /// once every role is ready (default for the entry role of a prefill/decode deployment).
    #[serde(default)]
    pub workers: Option<WorkersSpec>,
    /// A Ray gang (vLLM's `--distributed-executor-backend ray`): once the gang is started,
    /// its Ray cluster must have this many alive nodes before the leader is probed.
    #[serde(default)]
    pub ray: Option<RaySpec>,
}

/// `readiness.ray:` — count the alive nodes of each replica's Ray cluster with `ray status`
/// on its head (node 0) before the leader's probe.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RaySpec {
    /// The head's GCS port, as in `ray start --head --port` (default 6379).
    #[serde(default)]
    pub port: Option<Spanned<u16>>,
    /// Alive Ray nodes expected per replica (default: the role's `nodes`).
    #[serde(default)]
    pub nodes: Option<Spanned<u32>>,
    /// The `ray` program on the head's host or in its container (default `ray`, found on
    /// its `PATH`); orchestrate runs `<command> status --address <head address>:<port>`.
    #[serde(default)]
    pub command: Option<Spanned<String>>,
}

/// `readiness.workers:` — what a router must report before the deployment is ready.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkersSpec {
    /// Check the worker counts at all (default true; `false` turns the check off).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Prefill workers expected (default: the instances of roles named `prefill*`).
    #[serde(default)]
    pub prefill: Option<Spanned<u32>>,
    /// Decode workers expected (default: the instances of roles named `decode*`).
    #[serde(default)]
    pub decode: Option<Spanned<u32>>,
    /// How the router reports them: `router` (`GET /workers` stats, SGLang Model Gateway and
    /// vllm-router) or `dynamo` (`GET /health` instances); default `dynamo` for backend
    /// dynamo, else `router`.
    #[serde(default)]
    pub via: Option<WorkersVia>,
    /// Then send one completion through the entry role (default true).
    #[serde(default)]
    pub generate: Option<bool>,
    /// Roles whose replicas orchestrate registers with this router before counting, as dstack
    /// does for its SGLang router: `POST /workers` with each leader's URL and the worker type
    /// (and bootstrap port) its `GET /server_info` reports. Default: none (the router's
    /// command names its workers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub register: Vec<Spanned<String>>,
}

/// How a router reports its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkersVia {
    /// `GET /workers` -> `stats.prefill_count` / `decode_count` (SGLang Model Gateway,
    /// vllm-router).
    Router,
    /// `GET /health` -> `instances[]` with `endpoint: generate`, by `component` (Dynamo
    /// frontend).
    Dynamo,
}
