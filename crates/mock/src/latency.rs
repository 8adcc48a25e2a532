//! The latency model's parameters: how long one engine step takes as a function of the
//! batch (decode) and of the prompt tokens prefilled in it, plus the batch limits, and the
//! named presets calibrated to seed tables. Pure data; the scheduler that uses it lives in
//! `scheduler.rs`, the wall-clock engine in `engine.rs`.

use std::fmt;
use std::str::FromStr;

use crate::error::MockError;

/// A piecewise-linear function through calibration points `(x, ms)`, sorted by `x`.
/// Between points it interpolates; beyond the last point it extends the last segment's
/// slope; below the first point it is the first point's value.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    points: Vec<(f64, f64)>,
}

impl Curve {
    /// A curve through the given points. Errors when empty, unsorted or negative.
    pub fn new(mut points: Vec<(f64, f64)>) -> Result<Self, MockError> {
        if points.is_empty() {
            return Err(MockError::Config(
                "a latency curve needs at least one point".into(),
            ));
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        for pair in points.windows(2) {
            if pair[0].0 == pair[1].0 {
                return Err(MockError::Config(format!(
                    "latency curve has two points at {}",
                    pair[0].0
                )));
            }
        }
        if points
            .iter()
            .any(|&(x, y)| !x.is_finite() || !y.is_finite() || x < 0.0 || y < 0.0)
        {
            return Err(MockError::Config(
                "latency curve points must be finite and not negative".into(),
            ));
        }
        Ok(Self { points })
    }

    /// The same value everywhere.
    pub fn constant(ms: f64) -> Self {
        Self {
            points: vec![(0.0, ms.max(0.0))],
        }
    }

    /// `base + slope * x`.
    pub fn linear(base_ms: f64, slope_ms: f64) -> Self {
        Self {
            points: vec![
                (0.0, base_ms.max(0.0)),
                (1.0, (base_ms + slope_ms).max(0.0)),
            ],
        }
    }

    /// The value at `x` (never negative).
    pub fn at(&self, x: f64) -> f64 {
        let p = &self.points;
        if p.len() == 1 || x <= p[0].0 {
            return p[0].1;
        }
        let i = p.partition_point(|&(px, _)| px <= x).clamp(1, p.len() - 1);
        let (x0, y0) = p[i - 1];
        let (x1, y1) = p[i];
        (y0 + (y1 - y0) * (x - x0) / (x1 - x0)).max(0.0)
    }
}

impl FromStr for Curve {
    type Err = MockError;

    /// `"1:30,128:70"`: comma-separated `x:ms` points, or one number for a constant.
    fn from_str(s: &str) -> Result<Self, MockError> {
        let bad = || {
            MockError::Config(format!(
                "`{s}` is not a latency curve; write x:ms points like 1:30,128:70 or one number of ms"
            ))
        };
        if let Ok(ms) = s.trim().parse::<f64>() {
            return if ms.is_finite() && ms >= 0.0 {
                Ok(Self::constant(ms))
            } else {
                Err(bad())
            };
        }
        let mut points = Vec::new();
        for part in s.split(',') {
            let (x, y) = part.split_once(':').ok_or_else(bad)?;
            let x: f64 = x.trim().parse().map_err(|_| bad())?;
            let y: f64 = y.trim().parse().map_err(|_| bad())?;
            points.push((x, y));
        }
        Self::new(points)
    }
}

impl fmt::Display for Curve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (x, y)) in self.points.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{x}:{y}")?;
        }
        Ok(())
    }
}

/// How long engine steps take and how many sequences fit in one.
///
/// A step that schedules `n` sequences (decoding ones plus those prefilling) and `p` prompt
/// tokens takes `decode.at(n) + prefill.at(p)` ms (the prefill term is 0 when `p == 0`),
/// divided by the server's `speed`.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyModel {
    /// Step time (ms) by the number of sequences in the step.
    pub decode: Curve,
    /// Extra step time (ms) by the number of prompt tokens prefilled in the step.
    pub prefill: Curve,
    /// At most this many sequences run at once (vLLM `--max-num-seqs`); the rest wait.
    pub max_batch: u32,
    /// Token budget of one step (vLLM `--max-num-batched-tokens`): one per decoding sequence,
    /// the rest goes to prefill chunks (chunked prefill).
    pub max_num_batched_tokens: u32,
}

impl LatencyModel {
    /// Milliseconds of one step with `seqs` sequences and `prefill_tokens` prompt tokens.
    pub fn step_ms(&self, seqs: u32, prefill_tokens: u32) -> f64 {
        let prefill = if prefill_tokens == 0 {
            0.0
        } else {
            self.prefill.at(f64::from(prefill_tokens))
        };
        self.decode.at(f64::from(seqs.max(1))) + prefill
    }
}

/// Named latency presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// For client benchmarks: every step 20 ms whatever the batch, no prefill cost, no batch
    /// limit worth the name; an idle server answers the first token 20 ms after arrival.
    Fixed,
    /// vLLM 0.9 serving DeepSeek-R1 with TP16 on 2 x 8 H20 (the Dynamo seed's baseline):
    /// TPOT about 30 ms at concurrency 1 rising to about 87 ms at 128, TTFT about 160 ms for
    /// 1,000 input tokens; max-num-batched-tokens 4096, max-model-len 4096.
    H20VllmTp16,
}

impl Preset {
    /// Every preset, for help texts and errors.
    pub const ALL: [Preset; 2] = [Preset::Fixed, Preset::H20VllmTp16];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Fixed => "fixed",
            Preset::H20VllmTp16 => "h20-vllm-tp16",
        }
    }

    /// The latency model of this preset.
    pub fn latency(self) -> LatencyModel {
        match self {
            Preset::Fixed => LatencyModel {
                decode: Curve::constant(20.0),
                prefill: Curve::constant(0.0),
                max_batch: 1_000_000,
                max_num_batched_tokens: u32::MAX,
            },
            Preset::H20VllmTp16 => LatencyModel {
                // Calibrated with `scheduler::simulate` against the seed's 1000:1000 table
                // (see docs/mock-server.md); the test `h20_preset_matches_seed` holds it there.
                decode: curve(&[
                    (1.0, 29.9),
                    (2.0, 34.0),
                    (4.0, 35.4),
                    (8.0, 38.2),
                    (16.0, 43.5),
                    (32.0, 50.8),
                    (64.0, 63.0),
                    (128.0, 77.5),
                    (256.0, 105.0),
                ]),
                // Prefill of 500 / 1,000 / 3,000 tokens at concurrency 1 answers in about
                // 152 / 159 / 316 ms in the seed (TTFT = decode(1) + prefill).
                prefill: curve(&[
                    (1.0, 8.0),
                    (500.0, 121.0),
                    (1000.0, 128.0),
                    (3000.0, 285.0),
                    (4096.0, 372.0),
                ]),
                max_batch: 256,
                max_num_batched_tokens: 4096,
            },
        }
    }

    /// The context length the preset's server accepts (prompt + max_tokens).
    pub fn max_model_len(self) -> u32 {
        match self {
            Preset::Fixed => 1 << 20,
            Preset::H20VllmTp16 => 4096,
        }
    }
}

fn curve(points: &[(f64, f64)]) -> Curve {
    Curve {
        points: points.to_vec(),
    }
}

impl FromStr for Preset {
    type Err = MockError;

    fn from_str(s: &str) -> Result<Self, MockError> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Preset::ALL.iter().map(|p| p.name()).collect();
                MockError::Config(format!(
                    "unknown preset `{s}`; use one of: {}",
                    names.join(", ")
                ))
            })
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_interpolates_and_extrapolates() {
        let c: Curve = "1:30,3:50".parse().unwrap();
        assert_eq!(c.at(0.0), 30.0);
        assert_eq!(c.at(1.0), 30.0);
        assert_eq!(c.at(2.0), 40.0);
        assert_eq!(c.at(5.0), 70.0);
        assert_eq!("12.5".parse::<Curve>().unwrap().at(1000.0), 12.5);
        assert_eq!(Curve::linear(10.0, 0.5).at(100.0), 60.0);
    }

    #[test]
    fn curve_rejects_garbage() {
        for bad in ["", "1:", "a:3", "1:3,1:4", "-1:3", "1:-3"] {
            assert!(bad.parse::<Curve>().is_err(), "{bad}");
        }
    }

    #[test]
    fn presets_round_trip_by_name() {
        for p in Preset::ALL {
            assert_eq!(p.name().parse::<Preset>().unwrap(), p);
        }
        let err = "h100".parse::<Preset>().unwrap_err().to_string();
        assert!(
            err.contains("fixed") && err.contains("h20-vllm-tp16"),
            "{err}"
        );
    }

    #[test]
    fn step_time_adds_prefill_only_when_prefilling() {
        let m = Preset::H20VllmTp16.latency();
        assert_eq!(m.step_ms(1, 0), 29.9);
        assert!(m.step_ms(1, 1000) > 150.0);
        assert!(m.step_ms(128, 0) > m.step_ms(1, 0));
    }
}
