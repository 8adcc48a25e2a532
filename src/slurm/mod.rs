//! Slurm clusters: pre-flight checks against `sinfo` (the provider is in progress).

pub mod preflight;
