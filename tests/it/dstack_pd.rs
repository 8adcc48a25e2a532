//! dstack's PD-disaggregated services, run unchanged but for the image and the launch
//! commands (tests/fixtures/dstack-2026/run/): the replica groups become prefill and decode
//! roles of mock servers, the router is the real sglang-router (scripts/routers-venv.sh),
//! orchestrate registers the workers with it as dstack does (`POST /workers`, the type from
//! each worker's `/server_info`), and the topology check counts them before the load. Both
//! of dstack's forms: the service-level `router: {type: sglang, pd_disaggregation: true}`
//! (orchestrate starts the router) and a router replica group (its commands start it). And
//! the `router: {type: dynamo}` group: the real Dynamo frontend (scripts/dynamo-venv.sh)
//! first, then prefill and decode groups of Dynamo's mocker that it discovers, counted in its
//! `GET /health` before the load.

use std::path::Path;
use std::process::Output;

use crate::common::{self, latest};
use crate::topology::{Checked, assert_checked_run, assert_topology_run, command, routers_venv};

/// `orchestrate run FIXTURE --profile` with `venv`'s `bin` first on the `PATH` (the
/// router's `python3`), `ORCH` (the mock's executable), `HF_TOKEN` and `env` passed through.
fn run(dir: &Path, venv: &Path, fixture: &str, env: &[(&str, &Path)]) -> Output {
    let profile = dir.join("profile.yaml");
    std::fs::write(
        &profile,
        format!(
            "dataset: {{kind: random, input_len: 16, output_len: 8}}\ntokenizer: {}\nignore_eos: true\nnum_prompts: 12\nconcurrency: 4\n",
            common::repo().join("data/tokenizer/tokenizer.json").display()
        ),
    )
    .unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![venv.join("bin")];
    dirs.extend(std::env::split_paths(&path));
    command(dir, &common::repo().join(fixture), None)
        .arg("--profile")
        .arg(&profile)
        .env("PATH", std::env::join_paths(dirs).unwrap())
        .env("ORCH", common::bin())
        .env("HF_TOKEN", "hf-test-token")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// A completed run: one prefill and one decode worker (each group's lower bound) registered
/// with and reported by the router before the load (only registration can make it report
/// them: its command names no worker), every request completed through it.
fn assert_pd(dir: &Path, task: &str, out: &Output, router: &str) {
    let checked = Checked {
        role: router,
        via: "router",
        prefill: 1,
        decode: 1,
    };
    assert_topology_run(dir, task, out, 12, &checked);
    let run = latest(&dir.join("results"), task);
    let manifest = common::json(&run.join("manifest.json"));
    assert!(
        manifest.to_string().contains("zai-org/GLM-4.5-Air-FP8"),
        "{manifest}"
    );
    // Each worker ran as its group's launch command says (its log starts with its address).
    let logs = run.join("logs");
    for kind in ["prefill", "decode"] {
        let log = std::fs::read_to_string(logs.join(format!("{kind}-r0-n0.log"))).unwrap();
        assert!(log.contains("listening on"), "{kind}:\n{log}");
    }
}

#[test]
fn dstacks_service_level_sglang_router_runs_in_front_of_its_replica_groups() {
    let Some(venv) = routers_venv() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &venv,
        "tests/fixtures/dstack-2026/run/pd-blog.dstack.yml",
        &[],
    );
    assert_pd(dir.path(), "glm45air", &out, "router");
}

#[test]
fn dstacks_router_replica_group_gets_its_workers_registered() {
    let Some(venv) = routers_venv() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &venv,
        "tests/fixtures/dstack-2026/run/pd-router-group.dstack.yml",
        &[],
    );
    assert_pd(dir.path(), "prefill-decode", &out, "router");
}

/// dstack's Dynamo PD service: the router group runs the real Dynamo frontend first, the
/// prefill and decode groups (Dynamo's mock engine) start once it is ready, with
/// `DSTACK_ROUTER_INTERNAL_IP`, and register through the file store; the topology check
/// counts them in the frontend's `GET /health` before the load, and every request goes
/// through the frontend to the prefill worker and then the decode worker.
#[test]
fn dstacks_dynamo_router_group_fronts_its_prefill_and_decode_groups() {
    let Some(python) = crate::routers::venv::dynamo() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mark = crate::ssh::marker("dyngroups");
    let model = dir.path().join(&mark);
    crate::dynamo::model_dir(&model);
    let (kv, home) = (dir.path().join("kv"), dir.path().join("home"));
    let out = run(
        dir.path(),
        python.parent().unwrap().parent().unwrap(),
        "tests/fixtures/dstack-2026/run/pd-dynamo.dstack.yml",
        // The frontend caches model cards under ~/.cache/dynamo: the test's own HOME.
        &[("MODEL_DIR", &model), ("DYN_FILE_KV", &kv), ("HOME", &home)],
    );
    let frontend = Checked {
        role: "router",
        via: "dynamo",
        prefill: 1,
        decode: 1,
    };
    let deployment = assert_checked_run(dir.path(), "dynamo-pd", &out, 12, &frontend);
    let run = latest(&dir.path().join("results"), "dynamo-pd");
    let instances = &deployment["instances"];
    // The frontend first: each worker started once it was ready.
    let at = |k: &str, f: &str| instances[k][f].as_f64().unwrap();
    for worker in ["prefill", "decode"] {
        let key = format!("{worker}-0");
        assert!(
            at(&key, "started_after_s") >= at("router-0", "ready_after_s"),
            "{instances:#}"
        );
        let log = std::fs::read_to_string(run.join(format!("logs/{worker}-r0-n0.log"))).unwrap();
        assert!(log.contains("router at 127.0.0.1\n"), "{worker}:\n{log}");
        // Disaggregated: every request (and the readiness completion) reached both workers.
        let served = log.matches("request received").count();
        assert!(served > 12, "{worker} served {served} requests:\n{log}");
    }
    for (key, i) in instances.as_object().unwrap() {
        let pgid = i["pgid"].as_i64().unwrap() as i32;
        assert!(
            !crate::run::group_alive(pgid),
            "{key}'s processes outlived the run"
        );
    }
    assert!(crate::topology::gone(&mark), "a mocker outlived the run");
}
