//! Whole-number distributions as vLLM's multi-turn benchmark writes them
//! (`{distribution: uniform, min: 2, max: 6}`, `constant`, `lognormal`, `zipf`, `poisson`),
//! sampled from the dataset's seeded generator. Used for the turns of a conversation.

use rand::Rng;
use rand_distr::{Distribution, LogNormal, Poisson, Zipf};
use serde::{Deserialize, Serialize};

/// vLLM's default median/average ratio of a lognormal given by its average.
const MEDIAN_RATIO: f64 = 0.85;

/// A distribution of whole numbers, with vLLM's `generate_multi_turn.json` fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "distribution", rename_all = "snake_case", deny_unknown_fields)]
pub enum Dist {
    /// Always `value`.
    Constant { value: u32 },
    /// Uniform in `[min, max]`, both included.
    Uniform { min: u32, max: u32 },
    /// Lognormal with this average and median/average ratio (default 0.85, vLLM's), capped
    /// at `max`.
    Lognormal {
        average: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        median_ratio: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u32>,
    },
    /// Zipf with exponent `alpha` (> 1), capped at `max` (default 1000).
    Zipf {
        alpha: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u32>,
    },
    /// Poisson with mean `alpha`, capped at `max`.
    Poisson {
        alpha: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u32>,
    },
}

impl Dist {
    /// Why the parameters cannot be sampled, in words naming the field; `None` when they can.
    pub fn problem(&self) -> Option<String> {
        match self {
            Dist::Constant { .. } => None,
            Dist::Uniform { min, max } => {
                (min > max).then(|| format!("uniform `min` {min} is above `max` {max}"))
            }
            Dist::Lognormal {
                average,
                median_ratio,
                ..
            } => {
                if !(average.is_finite() && *average >= 1.0) {
                    return Some(format!("lognormal `average` {average} must be at least 1"));
                }
                median_ratio
                    .filter(|r| !(*r > 0.0 && *r < 1.0))
                    .map(|r| format!("lognormal `median_ratio` {r} must be in (0, 1)"))
            }
            Dist::Zipf { alpha, .. } => (!(alpha.is_finite() && *alpha > 1.0))
                .then(|| format!("zipf `alpha` {alpha} must be above 1")),
            Dist::Poisson { alpha, .. } => (!(alpha.is_finite() && *alpha > 0.0))
                .then(|| format!("poisson `alpha` {alpha} must be above 0")),
        }
    }

    /// One draw (parameters already checked with [`Dist::problem`]; bad ones give 0).
    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        let cap = |v: f64, max: Option<u32>| -> u32 {
            let v = v.round().max(0.0);
            let v = if v > f64::from(u32::MAX) {
                u32::MAX
            } else {
                v as u32
            };
            max.map_or(v, |m| v.min(m))
        };
        match self {
            Dist::Constant { value } => *value,
            Dist::Uniform { min, max } if min <= max => rng.random_range(*min..=*max),
            Dist::Uniform { .. } => 0,
            Dist::Lognormal {
                average,
                median_ratio,
                max,
            } => {
                // median/mean = exp(-sigma^2/2), median = exp(mu).
                let ratio = median_ratio.unwrap_or(MEDIAN_RATIO);
                let median = average * ratio;
                let sigma = (2.0 * (average / median).ln()).sqrt();
                LogNormal::new(median.ln(), sigma).map_or(0, |d| cap(d.sample(rng), *max))
            }
            Dist::Zipf { alpha, max } => {
                let n = f64::from(max.unwrap_or(1000).max(1));
                Zipf::new(n, *alpha).map_or(0, |d| cap(d.sample(rng), *max))
            }
            Dist::Poisson { alpha, max } => {
                Poisson::new(*alpha).map_or(0, |d| cap(d.sample(rng), *max))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn draws_stay_within_their_bounds_and_average() {
        let mut rng = StdRng::seed_from_u64(3);
        let u = Dist::Uniform { min: 2, max: 5 };
        let draws: Vec<u32> = (0..400).map(|_| u.sample(&mut rng)).collect();
        assert!(draws.iter().all(|v| (2..=5).contains(v)));
        assert!(draws.contains(&2) && draws.contains(&5));
        let l = Dist::Lognormal {
            average: 100.0,
            median_ratio: None,
            max: Some(300),
        };
        let draws: Vec<u32> = (0..4000).map(|_| l.sample(&mut rng)).collect();
        assert!(draws.iter().all(|v| *v <= 300));
        let mean = draws.iter().map(|v| f64::from(*v)).sum::<f64>() / draws.len() as f64;
        assert!((85.0..115.0).contains(&mean), "{mean}");
        let p = Dist::Poisson {
            alpha: 4.0,
            max: Some(6),
        };
        assert!((0..200).all(|_| p.sample(&mut rng) <= 6));
        assert_eq!(Dist::Constant { value: 7 }.sample(&mut rng), 7);
        let z = Dist::Zipf {
            alpha: 1.5,
            max: Some(9),
        };
        assert!(
            (0..200)
                .map(|_| z.sample(&mut rng))
                .all(|v| (1..=9).contains(&v))
        );
    }

    #[test]
    fn bad_parameters_are_named() {
        let p = Dist::Uniform { min: 6, max: 2 }.problem().unwrap();
        assert!(p.contains("`min` 6") && p.contains("`max` 2"), "{p}");
        let p = Dist::Zipf {
            alpha: 1.0,
            max: None,
        }
        .problem()
        .unwrap();
        assert!(p.contains("`alpha`"), "{p}");
        assert_eq!(Dist::Constant { value: 1 }.problem(), None);
        // vLLM's JSON reads as it is.
        let d: Dist =
            serde_json::from_str(r#"{"distribution": "uniform", "min": 12, "max": 18}"#).unwrap();
        assert_eq!(d, Dist::Uniform { min: 12, max: 18 });
    }
}
