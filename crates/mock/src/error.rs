//! The mock server's error type: bad configuration, I/O on its listener or ground-truth
//! file, the deliberate crash of `--crash-after`, and a gang that lost a rank. Request-level
//! errors are HTTP responses (see `protocol.rs`), never this type.

use std::path::PathBuf;

/// Why the mock server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// A setting is out of range or unparsable; the message names it and what to do.
    #[error("{0}")]
    Config(String),
    #[error("load the tokenizer {path}")]
    Tokenizer {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("open the ground-truth log {path}")]
    GroundTruth {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("start the engine thread")]
    Engine(#[source] std::io::Error),
    /// `crash_after` requests were served and another arrived: the server "crashed" as asked.
    #[error("crash as configured: request {request} arrived after crash-after {crash_after}")]
    Crashed { crash_after: u64, request: u64 },
    /// Rank 0 of a gang lost another rank; like an NCCL job, the instance cannot go on.
    #[error(
        "rank {rank} of {nnodes} (from {peer}) went away: {why}; a model instance cannot run \
         without all its ranks, so rank 0 stops (as an NCCL job aborts)"
    )]
    RankLost {
        rank: u32,
        nnodes: u32,
        peer: String,
        why: String,
    },
    /// A rank > 0 lost rank 0.
    #[error("rank 0 at {master} went away: {why}; this rank stops with it")]
    MasterLost { master: String, why: String },
}
