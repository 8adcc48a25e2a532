//! dstack's resource requests as the task file writes them: count and size ranges (`8`,
//! `1..8`, `80GB..`), `resources.gpu` in every dstack form (`MI300X`, `8:H200`, `H100:8`,
//! `24GB`, `1..8`, `A100,H100:2`, `{name: [H100, H200], count: 8, memory: 80GB..}`),
//! `resources.cpu` (`8`, `arm:8`, `{arch, count}`) and `resources.disk` (`200GB`,
//! `2000GB..`, `{size: ...}`). Each has a hand-written visitor so errors keep their YAML
//! location.
//!
//! Sizes use this project's units (`80GB` is 80·10^9 bytes, `16Gi` is 16·2^30); a bare
//! number is gigabytes, as in dstack.
//!
//! Owns: parsing one request. Does not own: matching requests against hosts (`hosts::gpu`).
//!
//! Layout: [`range`] (counts and sizes), [`gpu`] (`resources.gpu`), [`host`]
//! (`resources.cpu` and `resources.disk`).

mod gpu;
mod host;
mod range;

pub use gpu::{GpuValue, parse_gpu, vendor_of};
pub use host::{CpuValue, DiskValue};
pub use range::{CountRange, SizeRange};
