//! The confidence interval of a change between two runs: a percentile bootstrap over the
//! repetitions of one point, resampling each side with replacement and taking the relative
//! change of the medians. Deterministic (a fixed seed per comparison), so the same archives
//! always give the same verdict.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Resamples per interval: enough for stable 2.5 % / 97.5 % percentiles, cheap next to
/// reading the archive.
pub(super) const RESAMPLES: usize = 2000;

/// The 95 % interval of `(median(current) - median(baseline)) / median(baseline)`, or `None`
/// when either side has fewer than two repetitions (no noise estimate) or the baseline's
/// median is 0.
pub(super) fn change_interval(current: &[f64], baseline: &[f64], seed: u64) -> Option<(f64, f64)> {
    if current.len() < 2 || baseline.len() < 2 {
        return None;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut changes = Vec::with_capacity(RESAMPLES);
    let mut a = vec![0.0; current.len()];
    let mut b = vec![0.0; baseline.len()];
    for _ in 0..RESAMPLES {
        for slot in a.iter_mut() {
            *slot = current[rng.random_range(0..current.len())];
        }
        for slot in b.iter_mut() {
            *slot = baseline[rng.random_range(0..baseline.len())];
        }
        let base = median(&mut b);
        if base == 0.0 {
            return None;
        }
        changes.push((median(&mut a) - base) / base);
    }
    changes.sort_by(f64::total_cmp);
    let at = |q: f64| changes[((changes.len() - 1) as f64 * q).round() as usize];
    Some((at(0.025), at(0.975)))
}

/// A seed for one comparison, from its point and metric, so intervals do not share draws.
pub(super) fn seed_of(point: &str, metric: &str) -> u64 {
    // FNV-1a: stable across builds and platforms, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in point.bytes().chain([0]).chain(metric.bytes()) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Where a change within `[lo, hi]` (fractions) lies against a threshold whose sign says
/// which way is worse (`limit`), allowing `allowed`: `Greater` when all of it is worse by
/// more than allowed, `Less` when all of it is better by more, else `Equal`.
pub(super) fn beyond(limit: f64, (lo, hi): (f64, f64), allowed: f64) -> std::cmp::Ordering {
    let (least_worse, most_worse) = if limit < 0.0 { (-hi, -lo) } else { (lo, hi) };
    if least_worse > allowed + 1e-12 {
        std::cmp::Ordering::Greater
    } else if -most_worse > allowed + 1e-12 {
        std::cmp::Ordering::Less
    } else {
        std::cmp::Ordering::Equal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_repetition_has_no_interval() {
        assert_eq!(change_interval(&[1.0], &[1.0, 1.1], 1), None);
        assert_eq!(change_interval(&[1.0, 1.1], &[2.0], 1), None);
    }

    #[test]
    fn a_clear_drop_gives_an_interval_below_zero_and_noise_one_around_it() {
        let base = [100.0, 101.0, 99.0, 100.5, 99.5];
        let drop = [95.0, 95.8, 94.2, 95.4, 94.6];
        let (lo, hi) = change_interval(&drop, &base, 7).unwrap();
        assert!(
            lo > -0.08 && hi < -0.02 && lo <= -0.05 && hi >= -0.05,
            "({lo}, {hi})"
        );
        let same = [100.8, 99.1, 100.2, 99.7, 100.4];
        let (lo, hi) = change_interval(&same, &base, 7).unwrap();
        assert!(lo < 0.0 && hi > 0.0, "({lo}, {hi})");
    }

    #[test]
    fn the_same_inputs_give_the_same_interval() {
        let a = [1.0, 1.2, 0.9];
        let b = [1.1, 1.0, 1.05];
        let seed = seed_of("concurrency=4", "p99_ttft_ms");
        assert_eq!(change_interval(&a, &b, seed), change_interval(&a, &b, seed));
        assert_ne!(seed, seed_of("concurrency=4", "p99_tpot_ms"));
    }
}
