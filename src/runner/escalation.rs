//! The sweep's escalation, for `benchmark.validity.over_saturation: stop`: which later points
//! of a deployment put a heavier load of the same kind on it than an over-saturated point
//! did, and so are skipped instead of measured (GuideLLM stops its sweep the same way).

use crate::load::Rate;
use crate::plan::{LoadPlan, PointPlan};

/// Why `next` is not run: the first of the over-saturated points so far (load, id, why)
/// that it escalates; `None`: it is run.
pub(super) fn stopped(
    saturated: &[(LoadPlan, String, String)],
    next: &PointPlan,
) -> Option<String> {
    let (_, at, why) = saturated
        .iter()
        .find(|(load, _, _)| escalates(load, &next.load))?;
    Some(format!(
        "the sweep stopped escalating: point {at} was over-saturated ({why})"
    ))
}

/// The rate a load asks, requests per second (unlimited: infinite).
fn rps(rate: &Rate) -> f64 {
    match rate {
        Rate::Unlimited => f64::INFINITY,
        Rate::Constant { rps } | Rate::Poisson { rps } | Rate::Gamma { rps, .. } => *rps,
    }
}

/// True when `to` escalates `from`: the same load (dataset, lengths, endpoint, SLOs...) but
/// for its concurrency cap, rate and request count, with neither the cap nor the rate lower
/// and at least one of them higher. A point that changes anything else (another input
/// length, another dataset) is a different workload, not an escalation.
pub(super) fn escalates(from: &LoadPlan, to: &LoadPlan) -> bool {
    let cap = |l: &LoadPlan| l.shape.max_concurrency.map_or(f64::INFINITY, f64::from);
    let (cap_from, cap_to) = (cap(from), cap(to));
    let (rate_from, rate_to) = (rps(&from.shape.rate), rps(&to.shape.rate));
    if cap_to < cap_from || rate_to < rate_from || (cap_to == cap_from && rate_to == rate_from) {
        return false;
    }
    let mut same = to.clone();
    same.shape.max_concurrency = from.shape.max_concurrency;
    same.shape.rate = from.shape.rate.clone();
    same.shape.limit = from.shape.limit.clone();
    same == *from
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Limit;

    fn load(cap: Option<u32>, rate: Rate, requests: u64) -> LoadPlan {
        let mut l: LoadPlan = serde_json::from_value(serde_json::json!({
            "endpoint": "chat",
            "dataset": {"shared_prefix": {"num_groups": 2, "prompts_per_group": 3,
                "system_prompt_len": 100, "question_len": 20, "output_len": 8}},
            "tokenizer": null, "ignore_eos": true, "seed": 0, "extra_body": {},
            "request_timeout": null,
            "shape": {"max_concurrency": null, "rate": "unlimited", "ramp_up": null,
                "limit": {"requests": 10}, "warmup": "0s", "cooldown": "0s"}
        }))
        .expect("a load plan");
        l.shape.max_concurrency = cap;
        l.shape.rate = rate;
        l.shape.limit = Limit::Requests(requests);
        l
    }

    #[test]
    fn a_higher_rate_or_cap_escalates_and_a_lower_or_equal_one_does_not() {
        let at = |rps| Rate::Poisson { rps };
        let base = load(None, at(10.0), 100);
        assert!(escalates(&base, &load(None, at(20.0), 200)));
        assert!(!escalates(&base, &load(None, at(5.0), 100)));
        assert!(!escalates(&base, &load(None, at(10.0), 300)));
        assert!(escalates(&base, &load(None, Rate::Unlimited, 100)));
        let closed = load(Some(8), Rate::Unlimited, 80);
        assert!(escalates(&closed, &load(Some(16), Rate::Unlimited, 160)));
        assert!(escalates(&closed, &load(None, Rate::Unlimited, 160)));
        assert!(!escalates(&closed, &load(Some(4), Rate::Unlimited, 40)));
        // A cap up and the rate down is not heavier on both counts.
        assert!(!escalates(
            &load(Some(8), at(10.0), 80),
            &load(Some(16), at(5.0), 80)
        ));
    }

    #[test]
    fn another_workload_is_not_an_escalation() {
        let base = load(Some(8), Rate::Unlimited, 80);
        let mut longer = load(Some(16), Rate::Unlimited, 160);
        longer.dataset = serde_json::from_value(serde_json::json!({"shared_prefix": {
            "num_groups": 2, "prompts_per_group": 3, "system_prompt_len": 1000,
            "question_len": 20, "output_len": 8}}))
        .expect("a dataset");
        assert!(!escalates(&base, &longer));
    }
}
