//! dstack's task and service files, unchanged: the seed's tasks and the conformance set
//! (tests/fixtures/dstack/) validate and plan with `--profile`, `plan` shows what each dstack
//! key became, refused forms name the place and the fix, every key of the docs' dstack table
//! has a fixture, and `resources.gpu` in dstack's forms chooses among the hosts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use orchestrate::plan::{self, HostFacts, HostPlan, Plan, PlanContext};
use orchestrate::spec::{self, dstack};

use crate::common;

const PROFILE: &str = "tasks/profiles/r1-online.yaml";

fn files(dir: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(common::repo().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".yml"))
        .collect();
    out.sort();
    out
}

/// The `.yml` files of `dir`, as paths relative to the repository root (as a user types them).
fn relative_files(dir: &str) -> Vec<String> {
    files(dir)
        .iter()
        .map(|p| {
            p.strip_prefix(common::repo())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

fn plan_with(path: &Path, ctx: &PlanContext) -> Result<Plan, String> {
    let profile = common::repo().join(PROFILE);
    let task = spec::load_with(path, Some(&profile)).map_err(|e| e.to_string())?;
    plan::build(&task, ctx).map_err(|e| e.to_string())
}

fn plan_yaml(yaml: &str, ctx: &PlanContext) -> Result<Plan, String> {
    let profile = common::repo().join(PROFILE);
    let task = spec::load_str_with(
        Path::new("inline.dstack.yml"),
        yaml.to_string(),
        Some(&profile),
    )
    .map_err(|e| e.to_string())?;
    plan::build(&task, ctx).map_err(|e| e.to_string())
}

/// The seed's server tasks, exactly as the seed writes them, plan with a profile: name,
/// backend, model and port follow from the file as dstack would run it.
#[test]
fn the_seed_tasks_plan_unchanged_with_a_profile() {
    let seeds = files("tasks/dstack");
    assert_eq!(seeds.len(), 5, "{seeds:?}");
    let mut seen = BTreeMap::new();
    for path in &seeds {
        let plan = plan_with(path, &PlanContext::new())
            .unwrap_or_else(|e| panic!("{} does not plan: {e}", path.display()));
        let port = plan.deployments[0].roles[0].instances[0].port;
        seen.insert(
            plan.task.clone(),
            (plan.backend_name(), plan.model.clone(), port),
        );
        assert_eq!(plan.deployments[0].points.len(), 6, "the profile's sweep");
    }
    let r1 = "deepseek-ai/DeepSeek-R1".to_string();
    assert_eq!(seen["sg-h200"], ("sglang".into(), r1.clone(), 30000));
    assert_eq!(seen["mi300-sglang"], ("sglang".into(), r1.clone(), 30000));
    assert_eq!(seen["vllm-h200"], ("vllm".into(), r1.clone(), 8000));
    assert_eq!(seen["vllm-mi300"], ("vllm".into(), r1, 8000));
    assert_eq!(seen["trt-h200"], ("trtllm".into(), "deepseek".into(), 8000));
}

/// `orchestrate validate` and `plan` take `--profile`; the conformance set's plan shows what
/// each dstack key became (snapshot).
#[test]
fn the_conformance_set_validates_and_plans_showing_each_key() {
    let fixtures = relative_files("tests/fixtures/dstack");
    assert_eq!(fixtures.len(), 4, "{fixtures:?}");
    let run = |verb: &str| {
        Command::new(common::bin())
            .current_dir(common::repo())
            .env("HF_TOKEN", "hf-test-token")
            .env_remove("ORCHESTRATE_HOSTS")
            .arg(verb)
            .args(["--profile", PROFILE])
            .args(&fixtures)
            .output()
            .unwrap()
    };
    let out = run("validate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let out = run("plan");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("hf-test-token"),
        "a passed-through value is redacted"
    );
    let notes = common::lines_starting(&text, &["task ", "    honored", "    ignored", "  role "]);
    insta::assert_snapshot!("dstack_conformance_plan", notes);
}

/// dstack's container keys run as dstack runs them: its Docker-in-Docker image (privileged,
/// `start-dockerd` first) for `docker: true`, its base image with a venv made first for
/// `python`/`nvcc` without `image`, and `privileged`, `user`, `entrypoint` (the commands its
/// arguments) and `shell` as the container's.
#[test]
fn container_forms_run_as_dstack_runs_them() {
    let fixtures = relative_files("tests/fixtures/dstack/container");
    let out = Command::new(common::bin())
        .current_dir(common::repo())
        .env_remove("ORCHESTRATE_HOSTS")
        .args(["plan", "--profile", PROFILE])
        .args(&fixtures)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // Each form reaches the container: the image, the container line, the commands.
    for (form, wanted) in [
        ("docker", "role server: docker image dstackai/dind"),
        ("docker", "container: privileged"),
        ("docker", "$ start-dockerd"),
        ("python", "docker image dstackai/base:0.15-base-ubuntu24.04"),
        ("python", "uv venv -q --prompt dstack -p 3.11 --seed"),
        ("nvcc", "docker image dstackai/base:0.15-devel-ubuntu24.04"),
        ("user", "container: user ubuntu"),
        ("shell", "container: shell /bin/bash"),
        (
            "entrypoint-args",
            "container: entrypoint python3 -m vllm.entrypoints.openai.api_server",
        ),
    ] {
        assert!(text.contains(wanted), "{form}: no `{wanted}` in:\n{text}");
    }
    let lines = common::lines_starting(
        &text,
        &[
            "task ",
            "    honored",
            "    ignored",
            "  role ",
            "    container:",
            "      $ ",
        ],
    );
    insta::assert_snapshot!("dstack_container_plan", lines);
}

/// Every form dstack allows but orchestrate cannot run as written is an error at the key,
/// saying what to write instead.
#[test]
fn refused_forms_name_the_place_and_the_fix() {
    let mut all = String::new();
    let root = format!("{}/", common::repo().display());
    for path in files("tests/fixtures/dstack/refused") {
        let err = plan_with(&path, &PlanContext::new())
            .map(|_| ())
            .expect_err(&format!("{} should be refused", path.display()))
            .replace(&root, "");
        let rel = path
            .strip_prefix(common::repo())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            err.starts_with(&rel),
            "{rel}: error does not name the file: {err}"
        );
        all.push_str(&err);
        all.push_str("\n\n");
    }
    insta::assert_snapshot!("dstack_refused", all);
}

/// The keys of docs/task-file.md's dstack table are `spec::dstack::KEYS`, and each one is
/// written in some fixture of tests/fixtures/dstack/.
#[test]
fn every_key_of_the_docs_dstack_table_has_a_fixture() {
    let doc = std::fs::read_to_string(common::repo().join("docs/task-file.md")).unwrap();
    let table = doc
        .split("| key | here | why |\n|---|---|---|\n")
        .nth(1)
        .expect("the dstack table")
        .split("\n\n")
        .next()
        .unwrap();
    let documented: BTreeSet<String> = table
        .lines()
        .map(|l| {
            l.trim_start_matches("| `")
                .split('`')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let known: BTreeSet<String> = dstack::KEYS.iter().map(|(k, _, _)| k.to_string()).collect();
    assert_eq!(
        documented, known,
        "docs table and spec::dstack::KEYS differ"
    );
    let mut texts = String::new();
    for dir in [
        "tests/fixtures/dstack",
        "tests/fixtures/dstack/container",
        "tests/fixtures/dstack/refused",
        "tests/fixtures/dstack-2026",
        "tests/fixtures/dstack-2026/groups",
        "tests/fixtures/dstack-2026/run",
        "tests/fixtures/dstack-2026/forms",
    ] {
        for f in files(dir) {
            texts.push_str(&std::fs::read_to_string(f).unwrap());
            texts.push('\n');
        }
    }
    let written = |key: &str, indent: &str| {
        texts
            .lines()
            .any(|l| l.starts_with(&format!("{indent}{key}:")))
    };
    for key in &documented {
        assert!(written(key, ""), "no fixture writes `{key}`");
    }
    for key in ["gpu", "cpu", "memory", "shm_size", "disk"] {
        assert!(written(key, "  "), "no fixture writes `resources.{key}`");
    }
    // Every key of dstack's node and replica groups (`NodeGroup`, `ReplicaGroup`) and of a
    // group's `router` (`type`), in the first or a later line of a group entry.
    for key in [
        "name",
        "nodes",
        "count",
        "scaling",
        "resources",
        "commands",
        "ports",
        "image",
        "python",
        "nvcc",
        "docker",
        "privileged",
        "router",
    ] {
        assert!(
            written(key, "  - ") || written(key, "    "),
            "no fixture writes the group key `{key}`"
        );
    }
    assert!(
        written("type", "      "),
        "no fixture writes a group's `router.type`"
    );
    assert!(
        written("pd_disaggregation", "  "),
        "no fixture writes the service-level `router.pd_disaggregation`"
    );
}

#[test]
fn a_file_without_benchmark_asks_for_a_profile() {
    let err = spec::load_str(
        Path::new("svc.dstack.yml"),
        "type: service\nimage: i\ncommands: [vllm serve m]\nport: 8000\n".to_string(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("svc.dstack.yml: no `benchmark` section"),
        "{err}"
    );
    assert!(err.contains("--profile"), "{err}");
}

#[test]
fn an_unset_passed_through_env_name_is_an_error_at_its_line() {
    let err = plan_yaml(
        "type: task\nimage: i\nenv:\n  - DSTACK_IT_SURELY_UNSET\ncommands: [vllm serve m]\n",
        &PlanContext::new(),
    )
    .unwrap_err();
    assert!(err.starts_with("inline.dstack.yml:4:5:"), "{err}");
    assert!(err.contains("`DSTACK_IT_SURELY_UNSET` is not set"), "{err}");
}

#[test]
fn the_plan_notes_what_was_taken_from_the_file() {
    let plan = plan_yaml(
        "type: task\nimage: i\ncommands: [\"python3 -m sglang.launch_server --model-path org/m\"]\nspot_policy: auto\n",
        &PlanContext::new(),
    )
    .unwrap();
    assert_eq!(plan.task, "inline");
    assert_eq!(plan.model, "org/m");
    assert_eq!(plan.backend_name(), "sglang");
    let notes: Vec<String> = plan.dstack.iter().map(ToString::to_string).collect();
    assert!(
        notes
            .iter()
            .any(|n| n
                .starts_with("ignored spot_policy (line 4): orchestrate runs on your own hosts")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("honored name: not written; `inline`")),
        "{notes:?}"
    );
}

fn hosts() -> PlanContext {
    let facts = [
        ("h200-a", 8, "H200"),
        ("l4-a", 1, "L4"),
        ("mi300-a", 8, "MI300X"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (name, n, model))| {
        (
            name.to_string(),
            HostFacts {
                address: format!("10.0.0.{}", i + 1),
                gpus: Some(*n),
                gpu_name: Some(model.to_string()),
            },
        )
    })
    .collect();
    PlanContext::new().with_hosts(facts)
}

fn placed(gpu: &str) -> Result<(String, u32), String> {
    let yaml =
        format!("type: task\nimage: i\ncommands: [vllm serve m]\nresources:\n  gpu: {gpu}\n");
    let plan = plan_yaml(&yaml, &hosts())?;
    let role = &plan.deployments[0].roles[0];
    let host = match &role.instances[0].host {
        HostPlan::Remote { name, .. } => name.clone(),
        HostPlan::Slurm(place) => place.name.clone(),
        HostPlan::Kubernetes(place) => place.cluster.name.clone(),
        HostPlan::Local => "local".into(),
    };
    Ok((host, role.resources.gpu.as_ref().unwrap().count))
}

/// Each of dstack's GPU forms picks the host that satisfies it; none: the nearest miss.
#[test]
fn dstack_gpu_forms_choose_the_host_that_satisfies_them() {
    assert_eq!(placed("MI300X").unwrap(), ("mi300-a".into(), 8));
    assert_eq!(placed("8:H200").unwrap(), ("h200-a".into(), 8));
    assert_eq!(placed("H200:4").unwrap(), ("h200-a".into(), 4));
    assert_eq!(placed("24GB").unwrap(), ("l4-a".into(), 1));
    assert_eq!(placed("1..8").unwrap(), ("h200-a".into(), 8));
    assert_eq!(
        placed("{name: [H100, H200], count: 8, memory: 80GB..}").unwrap(),
        ("h200-a".into(), 8)
    );
    let err = placed("\"A100,H100:2\"").unwrap_err();
    assert!(
        err.contains("no host satisfies `gpu: A100,H100:2`; the nearest is `h200-a`: H200 is not A100 or H100"),
        "{err}"
    );
    assert!(err.starts_with("inline.dstack.yml:5:8:"), "{err}");
    let err = plan_yaml(
        "type: task\nimage: i\ncommands: [vllm serve m]\nhosts: [mi300-a]\nresources: {gpu: \"8:H200\"}\n",
        &hosts(),
    )
    .unwrap_err();
    assert!(
        err.contains("the nearest is `mi300-a`: MI300X is not H200"),
        "{err}"
    );
}

/// `orchestrate run FILE --profile P` runs a file written in dstack's format (no name, no
/// benchmark, `- NAME` env, probes) end to end against the built-in mock server.
#[test]
fn run_takes_the_benchmark_from_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = common::repo().join("data/tokenizer/tokenizer.json");
    std::fs::write(
        dir.path().join("mock.dstack.yml"),
        "type: service\nenv:\n  - ORCH\ncommands:\n  - $ORCH mock-server --port {{ port }} --preset fixed --itl-ms 5\nport: auto\nmodel: mock-model\nprobes:\n  - type: http\n    url: /health\n    interval: 1s\nspot_policy: auto\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("profile.yaml"),
        format!(
            "dataset: {{kind: random, input_len: 16, output_len: 10}}\ntokenizer: {}\nignore_eos: true\nnum_prompts: 2\nconcurrency: 2\n",
            tokenizer.display()
        ),
    )
    .unwrap();
    let out = Command::new(common::bin())
        .current_dir(dir.path())
        .args([
            "run",
            "mock.dstack.yml",
            "--profile",
            "profile.yaml",
            "--results",
            "results",
            "--no-report",
        ])
        .env("ORCH", common::bin())
        .env("ORCHESTRATE_STATE_DIR", dir.path().join("state"))
        .env("NO_COLOR", "1")
        .env_remove("ORCHESTRATE_HOSTS")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = common::latest(&dir.path().join("results"), "mock");
    let manifest = common::json(&run.join("manifest.json"));
    assert!(
        manifest.to_string().contains("\"model\":\"mock-model\""),
        "{manifest}"
    );
    let summary = common::json(&run.join("summary.json"));
    assert_eq!(summary[0]["status"], "completed", "{summary}");
}
