//! dstack's groups: its own PD services and node-group tasks exactly as its docs write them
//! (tests/fixtures/dstack-2026/groups/) load and plan, `plan` saying what each group became
//! (snapshot); malformed groups are errors at their place; a node-group task runs end to end
//! with the mock server, each node getting dstack's variables and the other nodes'
//! addresses as dstack sets them; dstack's Ray cluster of a head and a worker group runs with
//! the real Ray (scripts/ray-venv.sh), readiness counting every group's nodes.

use std::path::{Path, PathBuf};

use orchestrate::plan::{self, PlanContext};
use orchestrate::spec;

use crate::common;

const PROFILE: &str = "tasks/profiles/r1-online.yaml";
const DIR: &str = "tests/fixtures/dstack-2026/groups";

fn files(dir: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(common::repo().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".yml"))
        .collect();
    out.sort();
    out
}

fn load(path: &Path) -> Result<spec::Task, String> {
    spec::load_with(path, Some(&common::repo().join(PROFILE))).map_err(|e| e.to_string())
}

fn load_yaml(yaml: &str) -> Result<spec::Task, String> {
    spec::load_str_with(
        Path::new("inline.dstack.yml"),
        yaml.to_string(),
        Some(&common::repo().join(PROFILE)),
    )
    .map_err(|e| e.to_string())
}

/// Every file of dstack's docs loads unchanged, and so does every other form of groups
/// (tests/fixtures/dstack-2026/forms/: `groups:` on a service, names, secrets, cloud keys,
/// base and Docker-in-Docker images per group); `plan` of each, what each group became and
/// the roles, is a snapshot.
#[test]
fn dstacks_own_group_files_load_and_plan() {
    let docs = files(DIR);
    assert_eq!(docs.len(), 7, "{docs:?}");
    let forms = files("tests/fixtures/dstack-2026/forms");
    let mut all = String::new();
    for f in docs.iter().chain(&forms) {
        load(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let out = std::process::Command::new(common::bin())
            .current_dir(common::repo())
            .env("HF_TOKEN", "hf-test-token")
            .env_remove("ORCHESTRATE_HOSTS")
            .args(["plan", "--profile", PROFILE])
            .arg(f)
            .output()
            .unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        all.push_str(&format!("== {name}\n"));
        if out.status.success() {
            let text = String::from_utf8_lossy(&out.stdout);
            all.push_str(&common::lines_starting(
                &text,
                &["    honored", "    ignored", "  role ", "    instance "],
            ));
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            all.push_str(&format!(
                "plan on this machine: {}\n",
                err.lines().next().unwrap_or_default()
            ));
        }
        all.push('\n');
    }
    let root = format!("{}/", common::repo().display());
    // `port: auto` ports are free ports of this machine: not part of the snapshot.
    let auto = regex::Regex::new(r"port \d+ \(auto\)").unwrap();
    let all = auto.replace_all(&all, "port <free> (auto)");
    insta::assert_snapshot!("dstack_groups_plan", all.replace(&root, ""));
}

/// A docs file loaded without its `- HF_TOKEN` pass-through (which needs the variable set).
fn load_docs(file: &str) -> spec::Task {
    let path = common::repo().join(DIR).join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("  - HF_TOKEN\n", "");
    spec::load_str_with(&path, text, Some(&common::repo().join(PROFILE))).unwrap()
}

/// The PD services become prefill and decode roles behind a router entry role that expects
/// each worker; the node-group tasks become one gang of every group's nodes.
#[test]
fn groups_become_roles_and_gangs() {
    let task = load_docs("pd-sglang.dstack.yml");
    let p = plan::build(&task, &PlanContext::new()).unwrap();
    let d = &p.deployments[0];
    let names: Vec<&str> = d.roles.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["prefill", "decode", "router"]);
    assert_eq!(d.entry_role, "router");
    let w = d.roles[2].readiness.workers.as_ref().unwrap();
    assert_eq!((w.prefill, w.decode), (Some(1), Some(1)));
    assert_eq!(w.register, ["prefill", "decode"]);
    assert_eq!(p.backend_name(), "sglang");

    let task = load_docs("pd-dynamo.dstack.yml");
    let p = plan::build(&task, &PlanContext::new()).unwrap();
    let d = &p.deployments[0];
    let names: Vec<&str> = d.roles.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["router", "prefill", "decode"], "the frontend first");
    let env = &d.roles[1].instances[0].env;
    assert!(
        env.iter().any(|e| e.name == "DSTACK_ROUTER_INTERNAL_IP"),
        "{env:?}"
    );
    assert!(
        d.roles[0]
            .readiness
            .workers
            .as_ref()
            .unwrap()
            .register
            .is_empty()
    );

    let task = load_docs("task-ray-groups.dstack.yml");
    assert_eq!(task.spec.nodes.as_ref().unwrap().value, 3);
    assert!(task.spec.roles.is_none());
    let ray = task.spec.readiness.as_ref().unwrap().ray.as_ref().unwrap();
    assert_eq!(ray.nodes.as_ref().unwrap().value, 3);
    assert_eq!(ray.port.as_ref().unwrap().value, 6379);
}

/// dstack's rules on groups are errors at the key, with the fix.
#[test]
fn malformed_groups_are_errors_at_their_place() {
    let service =
        |groups: &str| format!("type: service\nport: 8000\nmodel: m\nreplicas:\n{groups}");
    let cases: Vec<(String, &str, &str)> = vec![
        (
            service("  - count: 1\n    commands: [a]\n    router: {type: sglng}\n  - count: 1\n    commands: [b]\n"),
            "inline.dstack.yml:7:",
            "did you mean `sglang`?",
        ),
        (
            service("  - count: 1..2\n    commands: [a]\n  - count: 1\n    router: {type: sglang}\n    commands: [r]\n"),
            "inline.dstack.yml:5:12:",
            "is a range, which dstack autoscales: it needs `scaling`",
        ),
        (
            service("  - count: 2\n    commands: [r]\n    router: {type: sglang}\n  - count: 1\n    commands: [b]\n"),
            "inline.dstack.yml:5:12:",
            "the router group must have `count: 1`",
        ),
        (
            service("  - count: 1\n    commands: [a]\n  - count: 1\n    commands: [b]\n"),
            "inline.dstack.yml:5:3:",
            "replica groups without a router",
        ),
        (
            format!("{}router: {{type: dynamo}}\n", service("  - count: 1\n    commands: [a]\n")),
            "inline.dstack.yml:7:",
            "a service-level `router` is SGLang's only",
        ),
        (
            format!("{}router: {{type: sglang, policy: round_robn}}\n", service("  - count: 1\n    commands: [a]\n")),
            "inline.dstack.yml:7:",
            "did you mean `round_robin`?",
        ),
        (
            service("  - count: 1\n    comands: [a]\n"),
            "inline.dstack.yml:6:",
            "did you mean `commands`?",
        ),
        (
            "type: task\nnodes: 2\ngroups:\n  - nodes: 1\n    commands: [a]\n".to_string(),
            "inline.dstack.yml:2:8:",
            "`nodes` and `groups` are mutually exclusive",
        ),
        (
            "type: task\ngroups:\n  - nodes: 1\n    commands: [\"echo ${{ groups[1].nodes[0].IP_ADDRESS }}\"]\n".to_string(),
            "inline.dstack.yml:4:",
            "names no node",
        ),
        (
            "type: task\ngroups:\n  - nodes: 1\n    count: 2\n    commands: [a]\n".to_string(),
            "inline.dstack.yml:4:12:",
            "a service's replica group key",
        ),
    ];
    for (yaml, at, wanted) in cases {
        let err = load_yaml(&yaml)
            .and_then(|t| {
                plan::build(&t, &PlanContext::new())
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .expect_err(&yaml);
        assert!(err.starts_with(at), "{yaml}\n-> {err}");
        assert!(err.contains(wanted), "{yaml}\n-> {err}");
    }
}

/// A benchmark profile in `dir` of 4 requests, 2 at a time (the project's tokenizer).
fn profile(dir: &Path) -> PathBuf {
    let profile = dir.join("profile.yaml");
    std::fs::write(
        &profile,
        format!(
            "dataset: {{kind: random, input_len: 16, output_len: 8}}\ntokenizer: {}\nignore_eos: true\nnum_prompts: 4\nconcurrency: 2\n",
            common::repo().join("data/tokenizer/tokenizer.json").display()
        ),
    )
    .unwrap();
    profile
}

/// A node-group task runs: the head (node 0) serves the benchmark, each worker gets dstack's
/// rank (counted across groups), node count and master address, and the head's address for
/// `${{ groups[0].nodes[0].IP_ADDRESS }}`.
#[test]
fn a_node_group_task_runs_with_dstacks_variables() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let profile = profile(dir.path());
    let fixture = common::repo().join("tests/fixtures/dstack-2026/run/task-groups.dstack.yml");
    let out = crate::topology::command(dir.path(), &fixture, None)
        .arg("--profile")
        .arg(&profile)
        .env("ORCH", common::bin())
        .env("OUT", &out_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |f: &str| std::fs::read_to_string(out_dir.join(f)).unwrap_or_default();
    assert_eq!(read("head.txt").trim(), "rank=0 nodes=3 master=127.0.0.1");
    for rank in [1, 2] {
        assert_eq!(
            read(&format!("worker-{rank}.txt")).trim(),
            format!("rank={rank} nodes=3 master=127.0.0.1 head=127.0.0.1")
        );
    }
    let points = crate::topology::summaries(dir.path(), "groups-mock");
    assert_eq!(points[0]["completed"], 4, "{:#}", points[0]);
}

/// dstack's Ray cluster as node groups (a head group and a group of two workers that join
/// `${{ groups[0].nodes[0].IP_ADDRESS }}:PORT`) runs like the seed 001 Ray gang with the
/// real Ray: the head starts first, readiness counts the three Ray nodes of both groups
/// before the head is probed, the load completes, and no Ray process outlives the run.
#[test]
fn dstacks_ray_cluster_as_node_groups_runs_with_every_node_counted() {
    let Some(ray) = crate::ray::venv::ray() else {
        return;
    };
    let _one = crate::ray::one_cluster();
    let dir = tempfile::tempdir().unwrap();
    let temp = dir.path().join("ray");
    let gcs = crate::ray::free_port();
    let fixture = common::repo().join("tests/fixtures/dstack-2026/run/task-ray-groups.dstack.yml");
    let text = std::fs::read_to_string(&fixture).unwrap();
    assert_eq!(text.matches("6379").count(), 2, "{text}");
    let task = dir.path().join("task-ray-groups.dstack.yml");
    std::fs::write(&task, text.replace("6379", &gcs.to_string())).unwrap();
    // `ray` (in the commands and for `ray status`) from the venv, first on the PATH.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![ray.parent().unwrap().to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    let started = std::time::Instant::now();
    let out = crate::topology::command(dir.path(), &task, None)
        .arg("--profile")
        .arg(profile(dir.path()))
        .env("PATH", std::env::join_paths(dirs).unwrap())
        .env("ORCH", common::bin())
        .env("RAY_TEMP", &temp)
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let run = common::latest(&dir.path().join("results"), "ray-groups");
    let manifest = common::json(&run.join("manifest.json"));
    assert!(out.status.success(), "{stderr}\n{manifest:#}");
    let instances = &manifest["deployments"][0]["instances"];
    let head = &instances["server-0"];
    assert_eq!(head["ray"]["nodes"], 3, "{head:#}");
    assert_eq!(head["ray"]["expected"], 3, "{head:#}");
    assert_eq!(
        head["ray"]["address"],
        format!("127.0.0.1:{gcs}"),
        "{head:#}"
    );
    assert!(stderr.contains("ray: 3/3 nodes"), "{stderr}");
    // The head first: the workers were launched once its `ray status` answered.
    let head_start = head["started_after_s"].as_f64().unwrap();
    for n in 1..3 {
        let start = instances[format!("server-{n}")]["started_after_s"]
            .as_f64()
            .unwrap();
        assert!(
            start > head_start + 0.5,
            "node {n} started {start}s, the head {head_start}s"
        );
        let log = std::fs::read_to_string(run.join(format!("logs/server-r0-n{n}.log"))).unwrap();
        assert!(log.contains("Ray runtime started"), "node {n}:\n{log}");
    }
    let ready = head["ready_after_s"].as_f64().unwrap();
    assert!(
        ready >= head["ray"]["waited_s"].as_f64().unwrap(),
        "{head:#}"
    );
    let points = crate::topology::summaries(dir.path(), "ray-groups");
    assert_eq!(points[0]["completed"], 4, "{:#}", points[0]);
    crate::ray::assert_nothing_left(&manifest, &temp, gcs, 3);
    eprintln!(
        "ray groups run took {took:?}; ray wait {}s",
        head["ray"]["waited_s"]
    );
}

/// On four hosts of their own, the nodes of a head group and a worker group get what dstack
/// gives each node of a run: `DSTACK_NODE_RANK` counted across the groups, the run's node
/// count, master and every node's address (in rank order), its own group's GPUs and the
/// GPUs of every node,
/// the run name; `${{ groups[i].nodes[j].IP_ADDRESS }}` is that node's host, for j > 0 too.
#[test]
fn every_group_node_gets_dstacks_variables_and_any_nodes_address() {
    let yaml = "type: task\nname: groups-env\nmodel: m\nhosts: [n0, n1, n2, n3]\ngroups:\n  - name: head\n    nodes: 1\n    commands: [\"serve --peers ${{ groups[1].nodes[0].IP_ADDRESS }},${{ groups[1].nodes[2].IP_ADDRESS }}\"]\n    resources: {gpu: H200:8}\n    ports: [8000]\n  - name: workers\n    nodes: 3\n    commands: [\"join ${{ groups[0].nodes[0].IP_ADDRESS }} --last ${{ groups[1].nodes[2].IP_ADDRESS }}\"]\n";
    let task = load_yaml(yaml).unwrap();
    let ctx = PlanContext::new().with_hosts(crate::spec::gang_hosts());
    let p = plan::build(&task, &ctx).unwrap();
    let role = &p.deployments[0].roles[0];
    let addresses: Vec<&str> = role.instances.iter().map(|i| i.host.address()).collect();
    assert_eq!(
        addresses,
        ["10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13"]
    );
    for (rank, i) in role.instances.iter().enumerate() {
        assert_eq!((i.replica, i.node_rank), (0, rank));
        let command = i.commands.join("\n");
        let command = command.trim();
        if rank == 0 {
            assert_eq!(command, "serve --peers 10.0.0.11,10.0.0.13");
        } else {
            assert_eq!(command, "join 10.0.0.10 --last 10.0.0.13");
        }
        let env = crate::spec::env_of(i);
        assert_eq!(env["DSTACK_NODE_RANK"], rank.to_string());
        assert_eq!(env["DSTACK_NODES_NUM"], "4");
        assert_eq!(env["DSTACK_MASTER_NODE_IP"], "10.0.0.10");
        assert_eq!(env["DSTACK_NODES_IPS"], addresses.join("\n"));
        // Each node's own group's GPUs (the workers' group asks for none), and their sum.
        let per_node = if rank == 0 { "8" } else { "0" };
        assert_eq!(env["DSTACK_GPUS_PER_NODE"], per_node);
        assert_eq!(env["DSTACK_GPUS_NUM"], "8");
        assert_eq!(env["DSTACK_RUN_NAME"], "groups-env");
    }
}
