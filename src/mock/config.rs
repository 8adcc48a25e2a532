//! `MockConfig`: everything one mock server needs, resolved (no file paths left to read
//! except the ground-truth log it creates). Built from a preset and then adjusted; the CLI
//! and tests construct it the same way. Not here: parsing flags (src/cli/mock_server.rs).

use std::path::PathBuf;
use std::time::Duration;

use super::MockError;
use super::disagg::Disaggregation;
use super::latency::{LatencyModel, Preset};
use super::tokens::TokenCounter;

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
}

impl MockConfig {
    /// The defaults of a preset: model "mock-model", speed 1, one token per chunk, no
    /// startup delay, no errors, no crash, no ground truth, whitespace token counting, not
    /// disaggregated.
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
        if self.model.is_empty() {
            return bad("the model name must not be empty".into());
        }
        Ok(())
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
}
