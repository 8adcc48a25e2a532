//! `MockConfig`: everything one mock server needs, resolved (no file paths left to read
//! except the ground-truth log it creates). Built from a preset and then adjusted; the CLI
//! and tests construct it the same way; with it the prefill/decode role and its settings
//! (`Role`, `Disaggregation`; what each role does is `disagg.rs`). Not here: parsing flags
//! (orchestrate's src/cli/mock_server.rs).

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::error::MockError;
use crate::latency::{LatencyModel, Preset};
use crate::prefix::PrefixCacheConfig;
use crate::tokens::TokenCounter;

/// A mock server's settings.
#[derive(Debug, Clone)]
pub struct MockConfig {
    /// The served model name (`/v1/models`); requests naming another model get a 404.
    pub model: String,
    /// Step timing and batch limits.
    pub latency: LatencyModel,
    /// Divides every modelled time (2.0 = twice as fast). Not the startup delay.
    pub speed: f64,
    /// Longest prompt + max_tokens accepted (400 beyond, like vLLM).
    pub max_model_len: u32,
    /// Output tokens per SSE chunk (like vLLM `--stream-interval`); the last may be shorter.
    pub tokens_per_chunk: u32,
    /// `/health` answers 503 and requests are refused with 503 for this long after start.
    pub startup_delay: Duration,
    /// Fraction of completion requests answered with a 500 error (seeded).
    pub error_rate: f64,
    /// After this many completion requests, the next one crashes the server.
    pub crash_after: Option<u64>,
    /// Where to write the ground-truth chunk log (JSON lines), if anywhere.
    pub ground_truth: Option<PathBuf>,
    /// How prompt tokens are counted.
    pub tokenizer: TokenCounter,
    /// Seeds error injection, output lengths without ignore_eos, and the filler text.
    pub seed: u64,
    /// The prefill/decode role and its handoff settings.
    pub disaggregation: Disaggregation,
    /// The prefix cache (off by default: capacity 0).
    pub prefix_cache: PrefixCacheConfig,
    /// Chat answers begin with this many reasoning tokens (`reasoning_content` deltas, as a
    /// reasoning model behind vLLM's reasoning parser); 0: none.
    pub reasoning_tokens: u32,
}

impl MockConfig {
    /// The defaults of a preset: model "mock-model", speed 1, one token per chunk, no
    /// startup delay, no errors, no crash, no ground truth, whitespace token counting, not
    /// disaggregated, no prefix cache, no reasoning.
    pub fn new(preset: Preset) -> Self {
        Self {
            model: "mock-model".into(),
            latency: preset.latency(),
            speed: 1.0,
            max_model_len: preset.max_model_len(),
            tokens_per_chunk: 1,
            startup_delay: Duration::ZERO,
            error_rate: 0.0,
            crash_after: None,
            ground_truth: None,
            tokenizer: TokenCounter::Whitespace,
            seed: 0,
            disaggregation: Disaggregation::default(),
            prefix_cache: PrefixCacheConfig::default(),
            reasoning_tokens: 0,
        }
    }

    /// Check ranges; the message names the setting and what to use instead.
    pub fn validate(&self) -> Result<(), MockError> {
        let bad = |m: String| Err(MockError::Config(m));
        if !(self.speed.is_finite() && self.speed > 0.0) {
            return bad(format!("speed {} must be a positive number", self.speed));
        }
        if !(0.0..=1.0).contains(&self.error_rate) {
            return bad(format!(
                "error rate {} must be a fraction between 0 and 1",
                self.error_rate
            ));
        }
        if self.tokens_per_chunk == 0 {
            return bad("tokens per chunk must be at least 1".into());
        }
        if self.latency.max_batch == 0 {
            return bad("max batch must be at least 1".into());
        }
        if self.latency.max_num_batched_tokens == 0 {
            return bad("max-num-batched-tokens must be at least 1".into());
        }
        let kv = self.disaggregation.kv_transfer_ms_per_token;
        if !(kv.is_finite() && kv >= 0.0) {
            return bad(format!(
                "kv transfer time {kv} ms per token must be a number >= 0"
            ));
        }
        if self.prefix_cache.block_tokens == 0 {
            return bad("prefix cache block size must be at least 1 token".into());
        }
        if self.model.is_empty() {
            return bad("the model name must not be empty".into());
        }
        Ok(())
    }
}

/// Which part of a disaggregated deployment this server plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// A whole engine (prefill and decode).
    #[default]
    None,
    Prefill,
    Decode,
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" | "null" => Ok(Role::None),
            "prefill" => Ok(Role::Prefill),
            "decode" => Ok(Role::Decode),
            other => Err(format!(
                "unknown disaggregation mode `{other}`: use none, prefill or decode"
            )),
        }
    }
}

impl Role {
    /// The name SGLang's `/server_info` uses (`disaggregation_mode`).
    pub fn name(self) -> &'static str {
        match self {
            Role::None => "null",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

/// The disaggregation settings of a mock server.
#[derive(Debug, Clone, PartialEq)]
pub struct Disaggregation {
    pub role: Role,
    /// Decode: KV transfer time per prompt token, in model ms (divided by `speed`).
    pub kv_transfer_ms_per_token: f64,
    /// Decode: how long to wait for the prefill of a room before failing the request.
    pub kv_wait_timeout: Duration,
    /// Prefill: the host named in `kv_transfer_params.remote_host` (vLLM's
    /// `VLLM_NIXL_SIDE_CHANNEL_HOST`); the bootstrap listener's address when unset.
    pub side_channel_host: Option<String>,
}

impl Default for Disaggregation {
    fn default() -> Self {
        Self {
            role: Role::None,
            kv_transfer_ms_per_token: 0.01,
            kv_wait_timeout: Duration::from_secs(300),
            side_channel_host: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_bad_values_are_named() {
        for p in Preset::ALL {
            MockConfig::new(p).validate().unwrap();
        }
        let mut c = MockConfig::new(Preset::Fixed);
        c.error_rate = 1.5;
        assert!(c.validate().unwrap_err().to_string().contains("error rate"));
        let mut c = MockConfig::new(Preset::Fixed);
        c.speed = 0.0;
        assert!(c.validate().unwrap_err().to_string().contains("speed"));
        let mut c = MockConfig::new(Preset::Fixed);
        c.tokens_per_chunk = 0;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("tokens per chunk")
        );
    }

    #[test]
    fn roles_parse_with_a_clear_error() {
        assert_eq!("prefill".parse::<Role>(), Ok(Role::Prefill));
        assert_eq!("null".parse::<Role>(), Ok(Role::None));
        let e = "both".parse::<Role>().unwrap_err();
        assert!(e.contains("none, prefill or decode"), "{e}");
    }
}
