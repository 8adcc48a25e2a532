//! Real PD routers from PyPI (sglang-router 0.3.2, vllm-router 0.1.17, installed by
//! scripts/routers-venv.sh) in front of mock-server prefill and decode workers: worker
//! counts in `GET /workers`, streamed completions through the router with correct token
//! counts, the decode worker's first token after prefill + KV transfer, and the router's
//! added latency against talking to the workers directly; and sglang-router's regular mode
//! (`--worker-urls`) in front of two replicas with a prefix cache, `round_robin` against
//! `cache_aware`, seen through achieved/ideal prefix-cache hit rates.

mod cache_aware;
mod overhead;
mod pd;
pub(crate) mod venv;
