//! Distribution statistics as numpy computes them: mean, median, population std, and
//! percentiles with linear interpolation (`np.percentile` default).

use serde_json::{Map, Value, json};

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
