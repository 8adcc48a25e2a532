//! Whether a load level meets each SLO, with a confidence bound: an order-statistic
//! interval (ranks from Binomial(n, p), distribution-free) for a percentile, a Wilson score
//! interval for attainment. A verdict is `pass` when the whole one-sided interval is within
//! the limit, `fail` when it is wholly beyond it, `inconclusive` otherwise. Samples are the
//! pooled requests of every measurement of the level; per-run percentiles are never averaged.
//! Definitions: docs/metrics.md (Capacity search).

use serde::{Deserialize, Serialize};

use super::sample::{RequestSample, ratio};
use crate::load::search::{Attainment, PercentileSlo};
pub use crate::metrics::normal_quantile;
use crate::metrics::percentile_key;

/// A verdict at a confidence level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    Inconclusive,
}

impl Verdict {
    /// Fail if any fails, else inconclusive if any is, else pass.
    pub fn all(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let mut out = Verdict::Pass;
        for v in verdicts {
            match v {
                Verdict::Fail => return Verdict::Fail,
                Verdict::Inconclusive => out = Verdict::Inconclusive,
                Verdict::Pass => {}
            }
        }
        out
    }
}

/// One SLO judged on a level's pooled samples. Field names follow AIPerf's `first_breach`
/// (`metric_tag`, `stat`, `op`, `threshold`, `observed`), plus the bound and the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// `ttft`, `tpot`, `e2el`, or `good_request_fraction` for attainment.
    pub metric_tag: String,
    /// `p99`, ...; `attainment` for the fraction of good requests.
    pub stat: String,
    /// `le` (at most) for latencies, `ge` (at least) for attainment.
    pub op: String,
    /// Milliseconds, or the attainment fraction.
    pub threshold: f64,
    /// The point estimate: the percentile (numpy's linear interpolation; infinite, written
    /// `"inf"`, when it falls on misses), or good / attempted.
    #[serde(with = "float")]
    pub observed: f64,
    /// The confidence interval of `observed`; `None` where the pooled sample is too small to
    /// bound that side (p99 needs 299 requests for a 95% upper bound).
    #[serde(with = "opt_float")]
    pub ci_low: Option<f64>,
    #[serde(with = "opt_float")]
    pub ci_high: Option<f64>,
    /// Requests judged (misses included).
    pub n: u64,
    pub verdict: Verdict,
    /// How far the level is from this SLO's edge, as a load ratio: the percentile / limit,
    /// or for attainment the per-request worst bound ratio at the required fraction. Above 1
    /// fails. The search reads it to place its next level.
    #[serde(with = "float")]
    pub score: f64,
}

/// A number that may be infinite (a percentile falling on misses): JSON has no infinity, so
/// it is written as the string `"inf"`.
mod float {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Finite(f64),
        Text(String),
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Number::deserialize(d)? {
            Number::Finite(v) => Ok(v),
            Number::Text(t) => match t.as_str() {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                other => Err(serde::de::Error::custom(format!(
                    "`{other}` is not a number or inf"
                ))),
            },
        }
    }
}

/// `float` for an optional number (`null` when absent).
mod opt_float {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => super::float::serialize(v, s),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "super::float")] f64);
        Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
    }
}

/// The Wilson score interval of `good` out of `n` at normal quantile `z`.
pub fn wilson(good: u64, n: u64, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let n = n as f64;
    let p = good as f64 / n;
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// P(Binomial(n, q) <= k) for k = 0..=n, summed in log space so large n does not underflow.
fn binomial_cdf(n: usize, q: f64) -> Vec<f64> {
    let (lq, l1q) = (q.ln(), (1.0 - q).ln());
    let mut log_pmf = n as f64 * l1q;
    let mut acc = 0.0;
    let mut cdf = Vec::with_capacity(n + 1);
    for k in 0..=n {
        if k > 0 {
            log_pmf += ((n - k + 1) as f64 / k as f64).ln() + lq - l1q;
        }
        acc += log_pmf.exp();
        cdf.push(acc.min(1.0));
    }
    cdf
}

/// 1-based ranks of the order statistics that bound the `q`-quantile of `n` samples, each
/// with one-sided confidence `confidence`: `(lower, upper)`, `None` where no rank is far
/// enough out. X(k) >= the quantile with probability P(Bin(n, q) <= k - 1).
pub fn quantile_ranks(n: usize, q: f64, confidence: f64) -> (Option<usize>, Option<usize>) {
    if n == 0 {
        return (None, None);
    }
    let cdf = binomial_cdf(n, q);
    let upper = (1..=n).find(|&k| cdf[k - 1] >= confidence);
    // P(X(k) <= quantile) = P(Bin >= k) = 1 - cdf[k - 1].
    let lower = (1..=n).rev().find(|&k| 1.0 - cdf[k - 1] >= confidence);
    (lower, upper)
}

/// numpy's linear-interpolation percentile of ascending `sorted`, infinite when it touches
/// an infinite value.
fn percentile_of(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::INFINITY;
    }
    let rank = (p / 100.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    let (a, b) = (sorted[lo], sorted[hi]);
    if a.is_infinite() || b.is_infinite() {
        return f64::INFINITY;
    }
    a + (b - a) * (rank - lo as f64)
}

fn judge(low: Option<f64>, high: Option<f64>, within: impl Fn(f64) -> bool) -> Verdict {
    if high.is_some_and(&within) && low.is_some_and(&within) {
        Verdict::Pass
    } else if low.is_some_and(|l| !within(l)) && high.is_some_and(|h| !within(h)) {
        Verdict::Fail
    } else {
        Verdict::Inconclusive
    }
}

/// A percentile SLO on pooled samples.
pub(super) fn check_percentile(
    slo: &PercentileSlo,
    samples: &[RequestSample],
    confidence: f64,
) -> Check {
    let mut values: Vec<f64> = samples.iter().map(|s| s.value(slo.metric)).collect();
    values.sort_by(f64::total_cmp);
    let q = slo.percentile / 100.0;
    let (lo, hi) = quantile_ranks(values.len(), q, confidence);
    let ci_low = lo.map(|k| values[k - 1]);
    let ci_high = hi.map(|k| values[k - 1]);
    // A missing lower rank bounds nothing from below: the quantile may be as low as 0.
    let low_for_judging = ci_low.or(Some(0.0));
    let observed = percentile_of(&values, slo.percentile);
    Check {
        metric_tag: slo.metric.name().to_string(),
        stat: percentile_key(slo.percentile),
        op: "le".into(),
        threshold: slo.ms,
        observed,
        ci_low,
        ci_high,
        n: values.len() as u64,
        verdict: judge(low_for_judging, ci_high, |v| v <= slo.ms),
        score: ratio(observed, slo.ms),
    }
}

/// An attainment SLO on pooled samples.
pub(super) fn check_attainment(
    a: &Attainment,
    samples: &[RequestSample],
    confidence: f64,
) -> Check {
    let mut scores: Vec<f64> = samples.iter().map(|s| s.score(&a.bounds)).collect();
    scores.sort_by(f64::total_cmp);
    let n = scores.len() as u64;
    let good = scores.iter().filter(|&&s| s <= 1.0).count() as u64;
    let (lo, hi) = wilson(good, n, normal_quantile(confidence));
    let observed = if n == 0 { 0.0 } else { good as f64 / n as f64 };
    let verdict = if n == 0 {
        Verdict::Inconclusive
    } else {
        judge(Some(lo), Some(hi), |v| v >= a.fraction)
    };
    Check {
        metric_tag: "good_request_fraction".into(),
        stat: "attainment".into(),
        op: "ge".into(),
        threshold: a.fraction,
        observed,
        ci_low: Some(lo),
        ci_high: Some(hi),
        n,
        verdict,
        score: percentile_of(&scores, a.fraction * 100.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{Slo, SloMetric};

    fn done(ttft_ms: f64) -> RequestSample {
        RequestSample::Done {
            ttft_ms,
            tpot_ms: 1.0,
            e2el_ms: ttft_ms + 10.0,
        }
    }

    #[test]
    fn normal_quantiles_match_the_tables() {
        assert!((normal_quantile(0.95) - 1.644_853_6).abs() < 1e-6);
        assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-6);
        assert!((normal_quantile(0.5)).abs() < 1e-9);
        assert!((normal_quantile(0.001) + 3.090_232).abs() < 1e-5);
    }

    #[test]
    fn wilson_matches_a_worked_example() {
        // 81 of 263 at z = 1.96: (0.2553, 0.3662) (Wilson 1927 as tabulated by Newcombe).
        let (lo, hi) = wilson(81, 263, 1.96);
        assert!((lo - 0.2553).abs() < 1e-3, "{lo}");
        assert!((hi - 0.3662).abs() < 1e-3, "{hi}");
    }

    #[test]
    fn p99_needs_299_requests_for_an_upper_bound() {
        // X(n) >= the p99 with probability 1 - 0.99^n, which reaches 0.95 at n = 299.
        assert_eq!(quantile_ranks(298, 0.99, 0.95).1, None);
        assert_eq!(quantile_ranks(299, 0.99, 0.95).1, Some(299));
        // The median of 100: ranks 42 and 59 (one-sided 95%; binomial tables).
        assert_eq!(quantile_ranks(100, 0.5, 0.95), (Some(42), Some(59)));
    }

    #[test]
    fn a_percentile_passes_fails_or_stays_open_by_its_bounds() {
        let slo = PercentileSlo {
            metric: SloMetric::Ttft,
            percentile: 90.0,
            ms: 100.0,
        };
        let fast: Vec<_> = (0..200).map(|i| done(f64::from(i) * 0.4)).collect();
        assert_eq!(check_percentile(&slo, &fast, 0.95).verdict, Verdict::Pass);
        let slow: Vec<_> = (0..200).map(|i| done(150.0 + f64::from(i))).collect();
        let c = check_percentile(&slo, &slow, 0.95);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(c.score > 1.0);
        // Spread across the limit at the 90th percentile: the interval straddles it.
        let edge: Vec<_> = (0..200)
            .map(|i| done(f64::from(i) * 100.0 / 180.0))
            .collect();
        assert_eq!(
            check_percentile(&slo, &edge, 0.95).verdict,
            Verdict::Inconclusive
        );
    }

    #[test]
    fn misses_are_infinitely_slow_and_never_good() {
        let slo = PercentileSlo {
            metric: SloMetric::Ttft,
            percentile: 50.0,
            ms: 100.0,
        };
        let mut s: Vec<_> = (0..60).map(|_| done(1.0)).collect();
        s.extend((0..140).map(|_| RequestSample::Miss));
        let c = check_percentile(&slo, &s, 0.95);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(c.observed.is_infinite());
        let a = Attainment {
            bounds: vec![Slo {
                metric: SloMetric::Ttft,
                ms: 100.0,
            }],
            fraction: 0.5,
        };
        let c = check_attainment(&a, &s, 0.95);
        assert_eq!(c.observed, 0.3);
        assert_eq!(c.verdict, Verdict::Fail);
    }

    #[test]
    fn attainment_is_judged_by_its_wilson_bound() {
        let a = Attainment {
            bounds: vec![Slo {
                metric: SloMetric::Ttft,
                ms: 100.0,
            }],
            fraction: 0.9,
        };
        let sample = |good: usize, n: usize| -> Vec<RequestSample> {
            (0..n)
                .map(|i| done(if i < good { 10.0 } else { 500.0 }))
                .collect()
        };
        assert_eq!(
            check_attainment(&a, &sample(990, 1000), 0.95).verdict,
            Verdict::Pass
        );
        assert_eq!(
            check_attainment(&a, &sample(800, 1000), 0.95).verdict,
            Verdict::Fail
        );
        // 91% of 100 is within the limit but not by enough to be sure.
        let c = check_attainment(&a, &sample(91, 100), 0.95);
        assert_eq!(c.verdict, Verdict::Inconclusive);
        assert!(c.ci_low.unwrap() < 0.9 && c.ci_high.unwrap() > 0.9);
        assert_eq!(
            Verdict::all([Verdict::Pass, Verdict::Inconclusive]),
            Verdict::Inconclusive
        );
        assert_eq!(
            Verdict::all([Verdict::Inconclusive, Verdict::Fail]),
            Verdict::Fail
        );
    }
}
