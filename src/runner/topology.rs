//! The topology rule: which role of a deployment is a router, what it must report, and the
//! check run once every role is ready (see `readiness::workers`).
//!
//! A role is checked when its `readiness.workers` says so, or, by default, when it is the
//! entry role of a deployment that has other roles named `prefill*` or `decode*` (the router
//! in front of them). Expected counts default to the instances of those roles; `via` defaults
//! to `dynamo` for backend dynamo, else `router`. After the counts, one completion goes
//! through the entry role (`readiness.workers.generate`, default true). With
//! `readiness.workers.register`, the named roles' leaders are first added to the router
//! (`readiness::register`), as dstack does for its SGLang router.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::load::Backend;
use crate::plan::{DeploymentPlan, Plan, RolePlan};
use crate::provider::Instance;
use crate::readiness::GenerateProbe;
use crate::readiness::register;
use crate::readiness::workers::{self, ExitWatch, Expected, Reported, Timing, TopologyError};
use crate::spec::WorkersVia;

/// One router to check.
#[derive(Debug, Clone)]
pub(super) struct Check<'a> {
    pub role: &'a RolePlan,
    pub expected: Expected,
    pub generate: bool,
    /// Roles whose leaders are registered with the router before the counts.
    pub register: &'a [String],
}

/// What the check saw, for the manifest (the entry instance's facts, `topology`).
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Outcome {
    pub role: String,
    pub via: WorkersVia,
    pub expected: Reported,
    pub reported: Reported,
    /// Seconds the check took (counts, then the completion).
    pub checked_s: f64,
}

/// Worker roles: named `prefill*` or `decode*` (not the router itself).
fn is_kind(name: &str, kind: &str) -> bool {
    name.starts_with(kind)
}

/// The routers of `deployment` and what each must report.
pub(super) fn checks<'a>(plan: &Plan, deployment: &'a DeploymentPlan) -> Vec<Check<'a>> {
    let count = |kind: &str, router: &str| -> u32 {
        deployment
            .roles
            .iter()
            .filter(|r| r.name != router && is_kind(&r.name, kind))
            // A router lists one worker per serving process: the leader (node 0) of each
            // gang, or with `procs` every process.
            .map(|r| r.instances.iter().filter(|i| i.serves()).count())
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
            .sum()
    };
    let default_via = if plan.backend == Backend::Dynamo {
        WorkersVia::Dynamo
    } else {
        WorkersVia::Router
    };
    let mut out = Vec::new();
    for role in &deployment.roles {
        let explicit = role.readiness.workers.as_ref();
        let is_router = role.name == deployment.entry_role
            && !is_kind(&role.name, "prefill")
            && !is_kind(&role.name, "decode")
            && count("prefill", &role.name) + count("decode", &role.name) > 0;
        let (enabled, generate) = match explicit {
            Some(w) => (w.enabled, w.generate),
            None => (is_router, true),
        };
        if !enabled {
            continue;
        }
        out.push(Check {
            role,
            expected: Expected {
                prefill: explicit
                    .and_then(|w| w.prefill)
                    .unwrap_or_else(|| count("prefill", &role.name)),
                decode: explicit
                    .and_then(|w| w.decode)
                    .unwrap_or_else(|| count("decode", &role.name)),
                via: explicit.and_then(|w| w.via).unwrap_or(default_via),
            },
            generate,
            register: explicit.map_or(&[][..], |w| &w.register[..]),
        });
    }
    out
}

/// Run `check` against the first instance of its role (first registering `workers` with
/// it), then a completion through `entry`.
pub(super) async fn run_check(
    check: &Check<'_>,
    router: &dyn Instance,
    entry: &dyn Instance,
    workers: &[register::Worker<'_>],
    model: &str,
    cancel: &CancellationToken,
    exited: &mut ExitWatch<'_>,
) -> Result<Outcome, TopologyError> {
    let started = Instant::now();
    let timing = Timing {
        interval: check.role.readiness.interval.min(Duration::from_secs(1)),
        timeout: check.role.readiness.timeout,
    };
    if !workers.is_empty() {
        register::register(router, &check.role.name, workers, timing, cancel, exited).await?;
    }
    let reported = workers::wait(
        router,
        &check.role.name,
        &check.expected,
        timing,
        cancel,
        exited,
    )
    .await?;
    if check.generate {
        let probe = GenerateProbe {
            model: model.to_string(),
        };
        let left = Timing {
            timeout: timing.timeout.saturating_sub(started.elapsed()),
            ..timing
        };
        workers::generate(entry, &probe, left, cancel, exited).await?;
    }
    Ok(Outcome {
        role: check.role.name.clone(),
        via: check.expected.via,
        expected: Reported {
            prefill: check.expected.prefill,
            decode: check.expected.decode,
        },
        reported,
        checked_s: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlanContext;

    fn plan(backend: &str, router_readiness: &str, entry: &str) -> Plan {
        let yaml = format!(
            "name: t\nbackend: {backend}\nmodel: m\nroles:\n  prefill: {{port: auto, replicas: 2, commands: [p]}}\n  decode-a: {{port: auto, replicas: 3, commands: [d]}}\n  router: {{port: auto, depends_on: [prefill, decode-a], commands: [r]{router_readiness}}}\n{entry}benchmark:\n  dataset: {{kind: random, input_len: 8, output_len: 8}}\n  num_prompts: 10\n"
        );
        let task = crate::spec::load_str(std::path::Path::new("t.yaml"), yaml).unwrap();
        crate::plan::build(&task, &PlanContext::new()).unwrap()
    }

    fn expected(plan: &Plan) -> Vec<(String, u32, u32, WorkersVia, bool)> {
        checks(plan, &plan.deployments[0])
            .into_iter()
            .map(|c| {
                (
                    c.role.name.clone(),
                    c.expected.prefill,
                    c.expected.decode,
                    c.expected.via,
                    c.generate,
                )
            })
            .collect()
    }

    #[test]
    fn the_entry_router_of_prefill_and_decode_roles_is_checked_by_default() {
        let p = plan("sglang", "", "");
        assert_eq!(
            expected(&p),
            [("router".to_string(), 2, 3, WorkersVia::Router, true)]
        );
        let p = plan("dynamo", "", "");
        assert_eq!(expected(&p)[0].3, WorkersVia::Dynamo);
    }

    #[test]
    fn readiness_workers_overrides_or_turns_off_the_check() {
        let p = plan(
            "vllm",
            ", readiness: {workers: {prefill: 1, via: dynamo, generate: false}}",
            "",
        );
        assert_eq!(
            expected(&p),
            [("router".to_string(), 1, 3, WorkersVia::Dynamo, false)]
        );
        let p = plan("vllm", ", readiness: {workers: {enabled: false}}", "");
        assert!(expected(&p).is_empty());
    }

    #[test]
    fn a_worker_role_as_entry_has_no_router_to_check() {
        let p = plan("vllm", "", "entry_role: decode-a\n");
        assert!(expected(&p).is_empty());
    }
}
