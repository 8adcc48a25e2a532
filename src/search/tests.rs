//! The search on synthetic servers whose capacity is known: an affine batching server (TPOT
//! grows linearly with concurrency, noisy per request), a rate cliff, a server losing
//! requests beyond its rate; and a server whose restarts shift its speed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

use super::*;
use crate::load::{Slo, SloMetric};

/// A synthetic server: `sample(level, deployment, rng)` draws one request.
struct Oracle<F> {
    sample: F,
    requests: usize,
    rng: StdRng,
    deployment: u32,
}

impl<F: FnMut(f64, u32, &mut StdRng) -> RequestSample> Oracle<F> {
    fn new(seed: u64, requests: usize, sample: F) -> Self {
        Oracle {
            sample,
            requests,
            rng: StdRng::seed_from_u64(seed),
            deployment: 0,
        }
    }

    fn measure(&mut self, p: &Probe) -> Measurement {
        if p.redeploy {
            self.deployment += 1;
        }
        let samples: Vec<RequestSample> = (0..self.requests)
            .map(|_| (self.sample)(p.level, self.deployment, &mut self.rng))
            .collect();
        let completed = samples
            .iter()
            .filter(|s| **s != RequestSample::Miss)
            .count() as u64;
        Measurement {
            samples,
            duration_s: 10.0,
            completed,
            output_tokens: completed * 100,
        }
    }

    fn search(&mut self, spec: SearchSpec) -> SearchRecord {
        let mut s = Search::new(spec);
        let mut guard = 0;
        while let Some(p) = s.next_probe() {
            let m = self.measure(&p);
            s.record(&p, m);
            guard += 1;
            assert!(guard < 100, "the search does not stop");
        }
        s.result(0.0)
    }
}

const NOISE: f64 = 0.02;

/// TPOT = (10 + 0.1 (c - 1)) ms times 1 + N(0, 2%): the mock's linear decode curve.
fn affine(level: f64, _deployment: u32, rng: &mut StdRng) -> RequestSample {
    let base = 10.0 + 0.1 * (level - 1.0);
    let tpot = base * (1.0 + Normal::new(0.0, NOISE).unwrap().sample(rng));
    RequestSample::Done {
        ttft_ms: 20.0,
        tpot_ms: tpot,
        e2el_ms: 20.0 + 99.0 * tpot,
    }
}

/// The concurrency at which the p99 TPOT of `affine` is 40 ms.
fn affine_capacity() -> f64 {
    let p99 = 1.0 + normal_quantile(0.99) * NOISE;
    (40.0 / p99 - 10.0) / 0.1 + 1.0
}

fn tpot_search(max: Option<f64>) -> SearchSpec {
    let mut spec = SearchSpec::new(Axis::Concurrency, 1.0, max);
    spec.percentiles
        .push(PercentileSlo::parse("p99:tpot:40ms").unwrap());
    spec
}

#[test]
fn the_interval_holds_the_capacity_within_the_width_in_at_most_8_points() {
    let truth = affine_capacity();
    for seed in 0..10 {
        let r = Oracle::new(seed, 1000, affine).search(tpot_search(Some(1024.0)));
        let (p, f) = (r.max_passing.unwrap(), r.first_failing.unwrap());
        assert!(
            p <= truth && truth <= f,
            "seed {seed}: {truth} not in [{p}, {f}]"
        );
        assert!(f / p <= 1.1, "seed {seed}: [{p}, {f}]");
        assert!(r.points <= 8, "seed {seed}: {} points", r.points);
        assert_eq!(r.convergence_reason, Convergence::PrecisionReached);
        assert_eq!(r.boundary_summary.boundary_type.as_deref(), Some("smooth"));
        assert_eq!(
            r.boundary_summary.binding_constraint.as_deref(),
            Some("p99 TPOT <= 40 ms")
        );
        assert!(r.monotonicity_check);
        // Repetitions are spent only near the edge.
        for it in r.iterations.iter().filter(|i| i.step == Step::Repeat) {
            assert!((it.level / truth - 1.0).abs() < 0.1, "seed {seed}: {it:?}");
        }
    }
}

#[test]
fn a_fixed_seed_gives_the_same_search_and_verdicts() {
    let a = Oracle::new(7, 1000, affine).search(tpot_search(Some(1024.0)));
    let b = Oracle::new(7, 1000, affine).search(tpot_search(Some(1024.0)));
    assert_eq!(a, b);
    assert!(a.iterations.iter().any(|i| i.verdict == Verdict::Pass));
    assert!(a.iterations.iter().any(|i| i.verdict == Verdict::Fail));
}

#[test]
fn without_a_maximum_it_probes_upwards_until_a_level_fails() {
    let truth = affine_capacity();
    // Probing upwards from 1 costs levels the saturated probe saves: allow 12.
    let mut spec = tpot_search(None);
    spec.max_points = 12;
    let r = Oracle::new(1, 1000, affine).search(spec);
    let (p, f) = (r.max_passing.unwrap(), r.first_failing.unwrap());
    assert!(p <= truth && truth <= f, "{truth} not in [{p}, {f}]");
    assert!(f / p <= 1.1);
    let steps: Vec<Step> = r.iterations.iter().map(|i| i.step).collect();
    assert_eq!(steps[..2], [Step::First, Step::Exponential]);
    // Each upward step at least multiplies the level by the growth factor.
    let ups: Vec<f64> = r
        .iterations
        .iter()
        .filter(|i| matches!(i.step, Step::First | Step::Exponential))
        .map(|i| i.level)
        .collect();
    assert!(ups.windows(2).all(|w| w[1] >= 4.0 * w[0]), "{ups:?}");
}

#[test]
fn a_rate_cliff_is_found_and_called_a_cliff() {
    // Below 50 req/s TTFT is 50 ms; beyond it the queue grows and TTFT is seconds.
    let cliff = |level: f64, _: u32, rng: &mut StdRng| RequestSample::Done {
        ttft_ms: if level <= 50.0 { 50.0 } else { 5000.0 } * (1.0 + rng.random::<f64>() * 0.1),
        tpot_ms: 10.0,
        e2el_ms: 1000.0,
    };
    let mut spec = SearchSpec::new(Axis::RequestRate, 1.0, Some(400.0));
    spec.percentiles
        .push(PercentileSlo::parse("p99:ttft:500ms").unwrap());
    // A cliff gives the model nothing to go on: bisection over a 400x range takes more.
    spec.max_points = 10;
    let r = Oracle::new(3, 500, cliff).search(spec);
    let (p, f) = (r.max_passing.unwrap(), r.first_failing.unwrap());
    assert!(
        p <= 50.0 && 50.0 < f && f / p <= 1.1,
        "[{p}, {f}] {:?}",
        r.iterations
    );
    assert!(r.points <= 10, "{:?}", r.iterations);
    assert_eq!(r.cliff, Some(true));
    assert_eq!(r.boundary_summary.boundary_type.as_deref(), Some("cliff"));
    let breach = r
        .boundary_summary
        .infeasible_min
        .unwrap()
        .first_breach
        .unwrap();
    assert_eq!(
        (breach.metric_tag.as_str(), breach.stat.as_str()),
        ("ttft", "p99")
    );
    assert!(breach.observed > 500.0);
}

#[test]
fn attainment_counts_lost_requests_as_misses() {
    // Beyond 50 req/s the server drops the excess: attainment = 50 / rate, so 90% holds up
    // to 55.6 req/s.
    let lossy = |level: f64, _: u32, rng: &mut StdRng| {
        if rng.random::<f64>() < (level - 50.0).max(0.0) / level {
            RequestSample::Miss
        } else {
            RequestSample::Done {
                ttft_ms: 100.0,
                tpot_ms: 10.0,
                e2el_ms: 1100.0,
            }
        }
    };
    let mut spec = SearchSpec::new(Axis::RequestRate, 10.0, Some(200.0));
    spec.attainment = Some(Attainment {
        bounds: vec![Slo {
            metric: SloMetric::Ttft,
            ms: 500.0,
        }],
        fraction: 0.9,
    });
    spec.repetitions = 5;
    let r = Oracle::new(5, 2000, lossy).search(spec);
    let (p, f) = (r.max_passing.unwrap(), r.first_failing.unwrap());
    let truth = 50.0 / 0.9;
    assert!(p <= truth && truth <= f, "{truth} not in [{p}, {f}]");
    assert_eq!(
        r.boundary_summary.binding_constraint.as_deref(),
        Some("attainment >= 90%")
    );
}

#[test]
fn capacity_outside_the_range_is_said_so() {
    let r = Oracle::new(0, 1000, affine).search(tpot_search(Some(100.0)));
    assert_eq!(r.convergence_reason, Convergence::NoFailureInRange);
    assert_eq!((r.max_passing, r.first_failing), (Some(100.0), None));
    assert_eq!(r.points, 2);
    let mut spec = tpot_search(Some(1024.0));
    spec.min = 500.0;
    let r = Oracle::new(0, 1000, affine).search(spec);
    assert_eq!(r.convergence_reason, Convergence::NoPassInRange);
    assert_eq!((r.max_passing, r.first_failing), (None, Some(500.0)));
    assert_eq!(r.points, 1);
}

#[test]
fn repeat_deployments_measures_both_ends_on_fresh_deployments() {
    // Each restart makes the server up to 3% slower or faster.
    let restarts = |level: f64, deployment: u32, rng: &mut StdRng| {
        let shift = [1.0, 1.03, 0.97, 1.02][deployment as usize % 4];
        match affine(level, deployment, rng) {
            RequestSample::Done {
                ttft_ms,
                tpot_ms,
                e2el_ms,
            } => RequestSample::Done {
                ttft_ms,
                tpot_ms: tpot_ms * shift,
                e2el_ms,
            },
            miss => miss,
        }
    };
    let mut spec = tpot_search(Some(1024.0));
    spec.repeat_deployments = 3;
    let r = Oracle::new(2, 1000, restarts).search(spec);
    let (p, f) = (r.max_passing.unwrap(), r.first_failing.unwrap());
    for end in [p, f] {
        let pt = r.all_points.iter().find(|x| x.level == end).unwrap();
        assert!(pt.deployments >= 3, "{pt:?}");
    }
    assert!(
        r.iterations
            .iter()
            .any(|i| i.step == Step::Redeploy && i.redeploy)
    );
    // Levels away from the edge were measured on one deployment.
    let first = r.all_points.first().unwrap();
    assert_eq!((first.level, first.deployments), (1.0, 1));
}

#[test]
fn the_archived_json_carries_aiperfs_field_names() {
    let r = Oracle::new(0, 1000, affine).search(tpot_search(Some(1024.0)));
    let v = r.to_json();
    assert_eq!(
        v["max_passing_concurrency"],
        serde_json::json!(r.max_passing)
    );
    assert_eq!(
        v["first_failing_concurrency"],
        serde_json::json!(r.first_failing)
    );
    assert_eq!(v["first_failing_breach"]["op"], "le");
    assert!(v["boundary_summary"]["feasible_max"]["objective_value"].is_number());
    assert_eq!(
        v["iterations"][0]["variation_values"]["concurrency"],
        serde_json::json!(1.0)
    );
    let back: SearchRecord = serde_json::from_value(v).unwrap();
    assert_eq!(
        (back.max_passing, back.first_failing),
        (r.max_passing, r.first_failing)
    );
    assert_eq!(back.iterations.len(), r.iterations.len());
    assert_eq!(
        back.boundary_summary.binding_constraint,
        r.boundary_summary.binding_constraint
    );
    assert!(r.headline().contains("bound by p99 TPOT <= 40 ms"));
}

#[test]
fn an_infinite_percentile_survives_the_archive() {
    let mut spec = tpot_search(Some(8.0));
    spec.min = 2.0;
    // Every request misses: the p99 is infinite, written as "inf" and read back.
    let r = Oracle::new(0, 400, |_: f64, _: u32, _: &mut StdRng| RequestSample::Miss).search(spec);
    assert_eq!(r.convergence_reason, Convergence::NoPassInRange);
    let v = r.to_json();
    assert_eq!(v["first_failing_breach"]["observed"], "inf");
    let back: SearchRecord = serde_json::from_value(v).unwrap();
    let breach = back
        .boundary_summary
        .infeasible_min
        .unwrap()
        .first_breach
        .unwrap();
    assert!(breach.observed.is_infinite() && breach.ci_low.unwrap().is_infinite());
}
