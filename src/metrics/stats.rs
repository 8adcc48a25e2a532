//! Distribution statistics as numpy computes them: mean, median, population std, and
//! percentiles with linear interpolation (`np.percentile` default).

use serde_json::{Map, Value, json};

/// z such that P(N(0,1) <= z) = `p` (Acklam's rational approximation, |error| < 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// t such that P(T <= t) = `p` for Student's t with `df` degrees of freedom (Cornish-Fisher
/// expansion around the normal quantile; within 1% of the exact value from 3 degrees of
/// freedom on, exact as `df` grows).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    let z = normal_quantile(p);
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * df)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * df * df)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * df.powi(3))
}

/// Linear-interpolation percentile of sorted values (`p` in 0..=100).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0).clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// vLLM's key for a percentile: `p99` when integral, `p99.9` otherwise.
pub fn percentile_key(p: f64) -> String {
    if p.fract() == 0.0 {
        format!("p{}", p as i64)
    } else {
        format!("p{p}")
    }
}

/// Summary of one metric, in the metric's unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub count: usize,
    pub mean: f64,
    pub median: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
    /// `(p, value)` for each asked percentile.
    pub percentiles: Vec<(f64, f64)>,
}

impl Stats {
    /// Stats of `values` (sorted in place). Zeros for an empty set, as vLLM reports.
    pub fn of(values: &mut [f64], percentiles: &[f64]) -> Stats {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let mean = if n == 0 {
            0.0
        } else {
            values.iter().sum::<f64>() / n as f64
        };
        let var = if n == 0 {
            0.0
        } else {
            values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64
        };
        Stats {
            count: n,
            mean,
            median: percentile(values, 50.0),
            std: var.sqrt(),
            min: values.first().copied().unwrap_or(0.0),
            max: values.last().copied().unwrap_or(0.0),
            percentiles: percentiles
                .iter()
                .map(|&p| (p, percentile(values, p)))
                .collect(),
        }
    }

    /// `mean_{name}_ms`, `median_..`, `std_..`, `p{P}_..` into `out` (vLLM's keys).
    pub fn write(&self, name: &str, out: &mut Map<String, Value>) {
        out.insert(format!("mean_{name}_ms"), json!(self.mean));
        out.insert(format!("median_{name}_ms"), json!(self.median));
        out.insert(format!("std_{name}_ms"), json!(self.std));
        for (p, v) in &self.percentiles {
            out.insert(format!("{}_{name}_ms", percentile_key(*p)), json!(v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_numpy() {
        // np.percentile([1,2,3,4], [50, 99, 25]) = [2.5, 3.97, 1.75]; np.std = 1.118033988749895
        let mut v = vec![4.0, 1.0, 3.0, 2.0];
        let s = Stats::of(&mut v, &[50.0, 99.0, 25.0]);
        assert_eq!(s.mean, 2.5);
        assert_eq!(s.median, 2.5);
        assert!((s.percentiles[1].1 - 3.97).abs() < 1e-12);
        assert!((s.percentiles[2].1 - 1.75).abs() < 1e-12);
        assert!((s.std - 1.118033988749895).abs() < 1e-12);
        assert_eq!(percentile_key(99.0), "p99");
        assert_eq!(percentile_key(99.9), "p99.9");
        let empty = Stats::of(&mut [], &[99.0]);
        assert_eq!(
            (empty.count, empty.mean, empty.percentiles[0].1),
            (0, 0.0, 0.0)
        );
    }
}
