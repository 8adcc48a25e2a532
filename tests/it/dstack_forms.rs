//! dstack's forms as dstack writes them today (tests/fixtures/dstack-2026/, written from the
//! notes on dstack's current parser): every `ok-*` file validates and `plan` says what each
//! key became; every `bad-*` file (refused by dstack too) is an error at its line and column.
//! Covers autoscaling ranges (`replicas: A..B` with `scaling`) and `--replicas`.

use std::path::{Path, PathBuf};
use std::process::Command;

use orchestrate::plan::{self, Plan, PlanContext};
use orchestrate::spec;

use crate::common;

const PROFILE: &str = "tasks/profiles/r1-online.yaml";
const DIR: &str = "tests/fixtures/dstack-2026";

/// The fixtures of [`DIR`] whose name starts with `prefix`, relative to the repository.
fn fixtures(prefix: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(common::repo().join(DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix) && n.ends_with(".yml"))
        .map(|n| format!("{DIR}/{n}"))
        .collect();
    out.sort();
    out
}

fn plan_of(rel: &str, replicas: Option<u32>) -> Result<Plan, String> {
    plan_in(rel, replicas, &PlanContext::new())
}

fn plan_in(rel: &str, replicas: Option<u32>, ctx: &PlanContext) -> Result<Plan, String> {
    let path: PathBuf = common::repo().join(rel);
    let mut task =
        spec::load_with(&path, Some(&common::repo().join(PROFILE))).map_err(|e| e.to_string())?;
    if let Some(n) = replicas {
        task.set_replicas(n).map_err(|e| e.to_string())?;
    }
    plan::build(&task, ctx).map_err(|e| e.to_string())
}

fn orchestrate(args: &[&str]) -> std::process::Output {
    Command::new(common::bin())
        .current_dir(common::repo())
        .env_remove("ORCHESTRATE_HOSTS")
        .args(args)
        .output()
        .unwrap()
}

fn instances(p: &Plan) -> usize {
    p.deployments[0].roles[0].instances.len()
}

fn notes(p: &Plan) -> Vec<String> {
    p.dstack.iter().map(ToString::to_string).collect()
}

/// A range runs its lower bound (at least one), and `plan` says so and that autoscaling is
/// off; the text plan of every `ok-*` form is a snapshot.
#[test]
fn replica_ranges_run_their_lower_bound_and_plan_says_so() {
    let ok = fixtures("ok-");
    assert_eq!(ok.len(), 4, "{ok:?}");
    let counts: Vec<(String, usize)> = ok
        .iter()
        .map(|f| {
            let p = plan_of(f, None).unwrap_or_else(|e| panic!("{f}: {e}"));
            (p.task.clone(), instances(&p))
        })
        .collect();
    assert_eq!(
        counts,
        [
            ("ok-service-no-model".to_string(), 1),
            ("ok-service-range-map".to_string(), 1),
            ("ok-service-range-scaling".to_string(), 1),
            ("ok-service-range-zero".to_string(), 1),
        ]
    );
    let p = plan_of(&format!("{DIR}/ok-service-range-scaling.dstack.yml"), None).unwrap();
    let n = notes(&p);
    assert!(
        n.iter().any(|n| n.starts_with(
            "honored replicas (line 8): `1..4`: the benchmark runs a fixed 1 replica (the lower bound); autoscaling is off during the measurement"
        )),
        "{n:?}"
    );
    assert!(
        n.iter()
            .any(|n| n.starts_with("ignored scaling (line 10): autoscaling is off")),
        "{n:?}"
    );

    let mut args = vec!["validate", "--profile", PROFILE];
    args.extend(ok.iter().map(String::as_str));
    let out = orchestrate(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    args[0] = "plan";
    let out = orchestrate(&args);
    assert_eq!(out.status.code(), Some(0));
    let text = common::lines_starting(
        &String::from_utf8_lossy(&out.stdout),
        &[
            "task ",
            "    honored",
            "    ignored",
            "  role ",
            "    instance ",
        ],
    );
    insta::assert_snapshot!("dstack_2026_plan", text);
}

/// `--replicas N` picks another count than the lower bound, in the plan and its note.
#[test]
fn the_replicas_flag_picks_the_count() {
    // On one host, replicas need their own ports; `port: auto` gives them.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auto.dstack.yml");
    std::fs::write(
        &file,
        "type: service\nimage: i\ncommands:\n  - vllm serve m --port {{ port }}\nport: auto\nreplicas: 1..4\nscaling: {metric: rps, target: 1}\n",
    )
    .unwrap();
    let f = file.to_string_lossy().into_owned();
    let p = plan_in(&f, Some(3), &PlanContext::new()).unwrap();
    assert_eq!(instances(&p), 3);
    let n = notes(&p);
    assert!(
        n.iter().any(|n| n.starts_with(
            "honored replicas (line 6): `1..4`: the benchmark runs 3 replicas (`--replicas 3`); autoscaling is off"
        )),
        "{n:?}"
    );
    let without = plan_in(&f, None, &PlanContext::new()).unwrap();
    assert_eq!(instances(&without), 1, "the lower bound");
    assert_ne!(
        p.spec_hash, without.spec_hash,
        "the flag is part of the hash"
    );

    let file = file.to_string_lossy().into_owned();
    let profile = common::repo().join(PROFILE).to_string_lossy().into_owned();
    let out = orchestrate(&["plan", "--profile", &profile, "--replicas", "2", &file]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("    instance ").count(), 2, "{text}");
    assert!(text.contains("`--replicas 2`"), "{text}");
    let out = orchestrate(&["plan", "--profile", &profile, &file]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("    instance ").count(), 1, "{text}");

    let out = orchestrate(&["plan", "--profile", &profile, "--replicas", "0", &file]);
    assert_eq!(out.status.code(), Some(2), "clap refuses 0");

    let roles = "tests/fixtures/topology/gang.yaml";
    assert!(Path::new(&common::repo().join(roles)).exists());
    let err = plan_of(roles, Some(2)).unwrap_err();
    assert!(
        err.contains("`--replicas 2` sets the replica count of a single server"),
        "{err}"
    );
}

/// Every `bad-*` form is refused by dstack's own parser; here it is an error at the key's
/// line and column that says what to write (snapshot).
#[test]
fn malformed_ranges_and_scaling_are_errors_at_their_place() {
    let bad = fixtures("bad-");
    assert_eq!(bad.len(), 7, "{bad:?}");
    let root = format!("{}/", common::repo().display());
    let mut all = String::new();
    for f in &bad {
        let err = plan_of(f, None)
            .map(|_| ())
            .expect_err(&format!("{f} should be refused"))
            .replace(&root, "");
        let at = err.split(": ").next().unwrap_or_default();
        assert!(
            at.starts_with(f.as_str()) && at.matches(':').count() == 2,
            "{f}: the error does not name file:line:col: {err}"
        );
        all.push_str(&err);
        all.push_str("\n\n");
    }
    insta::assert_snapshot!("dstack_2026_refused", all);
}
