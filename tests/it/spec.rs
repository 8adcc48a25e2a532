//! Task files: every broken fixture's error (file:line:col, snippet, suggestion) as a
//! snapshot; matrix expansion and deployment grouping; templates; secrets redaction; the
//! seed tasks' rendered launch commands and `plan` output.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use orchestrate::dataset::DatasetSpec;
use orchestrate::plan::{self, EnvValue, HostFacts, HostPlan, Plan, PlanContext, ProviderKind};
use orchestrate::spec;

use crate::common;

fn plan_file(path: &str) -> Result<Plan, String> {
    let task = spec::load(Path::new(path)).map_err(|e| e.to_string())?;
    plan::build(&task, &PlanContext::new()).map_err(|e| e.to_string())
}

fn plan_str(yaml: &str) -> Result<Plan, String> {
    plan_str_with(yaml, PlanContext::new())
}

fn plan_str_with(yaml: &str, ctx: PlanContext) -> Result<Plan, String> {
    let task =
        spec::load_str(Path::new("inline.yaml"), yaml.to_string()).map_err(|e| e.to_string())?;
    plan::build(&task, &ctx).map_err(|e| e.to_string())
}

#[test]
fn broken_fixtures_name_the_place_and_the_fix() {
    let dir = common::repo().join("tests/fixtures/spec");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert!(names.len() >= 9, "fixtures missing: {names:?}");
    for name in names {
        let rel = format!("tests/fixtures/spec/{name}");
        let err = plan_file(&rel).expect_err(&format!("{rel} should be rejected"));
        assert!(
            err.starts_with(&rel),
            "{rel}: error does not name the file: {err}"
        );
        insta::assert_snapshot!(name.trim_end_matches(".yaml").to_string(), err);
    }
}

#[test]
fn validate_reports_every_bad_file_and_exits_2() {
    let out = Command::new(common::bin())
        .current_dir(common::repo())
        .args([
            "validate",
            "tasks/demo.yaml",
            "tests/fixtures/spec/typo_top.yaml",
            "tests/fixtures/spec/typo_nested.yaml",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout, "ok: tasks/demo.yaml\n");
    assert!(
        stderr.contains("typo_top.yaml:3:1: unknown key `comands`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("typo_nested.yaml:8:3: unknown key `concurency`"),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean `concurrency`?"), "{stderr}");
}

/// Shipped tasks that validate only with a hosts file of theirs (tested in seeds_topology and
/// kubernetes::moai).
const SEEDS_ON_CLUSTERS: [&str; 3] = [
    "tasks/moai-r1-pd-mi300x.yaml",
    "tasks/moai-r1-pd-k8s.yaml",
    "tasks/dynamo-vs-vllm-h20.yaml",
];

#[test]
fn every_shipped_task_validates() {
    let mut tasks: Vec<String> = std::fs::read_dir(common::repo().join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| format!("tasks/{}", p.file_name().unwrap().to_string_lossy()))
        // The two multi-host seeds name hosts of their own hosts examples (tasks/hosts/) and,
        // for seed 000, the cluster's ShareGPT file: seeds_topology plans them with those.
        .filter(|t| !SEEDS_ON_CLUSTERS.contains(&t.as_str()))
        .collect();
    tasks.sort();
    let out = Command::new(common::bin())
        .current_dir(common::repo())
        .arg("validate")
        .args(&tasks)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        tasks.len()
    );
}

/// The seed (dstack-sglang-vllm-trtllm-h200-mi300x.md) gives these launch commands; our
/// task files write them with templates and must render them exactly.
#[test]
fn seed_tasks_render_the_seed_launch_commands() {
    let cases: &[(&str, &[&str])] = &[
        (
            "tasks/sglang-h200.yaml",
            &[
                "python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-R1 --tp 8 --trust-remote-code --enable-dp-attention",
            ],
        ),
        (
            "tasks/sglang-mi300.yaml",
            &["python3 -m sglang.launch_server --model-path $MODEL_ID --tp 8 --trust-remote-code"],
        ),
        (
            "tasks/vllm-h200.yaml",
            &[
                "pip uninstall -y vllm",
                "pip install vllm --pre --extra-index-url https://wheels.vllm.ai/nightly",
                "vllm serve deepseek-ai/DeepSeek-R1 --trust-remote-code --tensor-parallel-size 8",
            ],
        ),
        (
            "tasks/vllm-mi300.yaml",
            &[
                "vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 8 --trust-remote-code --max-model-len 32768",
            ],
        ),
        (
            "tasks/trtllm-h200.yaml",
            &[
                "git lfs install",
                "git clone https://huggingface.co/deepseek-ai/DeepSeek-R1 deepseek",
                "trtllm-serve --backend pytorch --max_batch_size $MAX_BATCH_SIZE --max_num_tokens $MAX_NUM_TOKENS --max_seq_len $MAX_SEQ_LENGTH --tp_size $DSTACK_GPUS_NUM --ep_size 4 --pp_size 1 deepseek",
            ],
        ),
    ];
    for (file, commands) in cases {
        let plan = plan_file(file).unwrap();
        assert_eq!(plan.deployments.len(), 1, "{file}");
        let role = &plan.deployments[0].roles[0];
        assert_eq!(role.provider, ProviderKind::Docker, "{file}");
        let inst = &role.instances[0];
        assert_eq!(&inst.commands, commands, "{file}");
        let env: BTreeMap<_, _> = inst
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.expose()))
            .collect();
        assert_eq!(env["DSTACK_GPUS_NUM"], "8", "{file}");
        // The study's online sweep: 3200 in / 800 out, concurrency 4..128, 500 prompts.
        let conc: Vec<_> = plan.deployments[0]
            .points
            .iter()
            .map(|p| p.load.shape.max_concurrency)
            .collect();
        assert_eq!(conc, [4, 8, 16, 32, 64, 128].map(Some), "{file}");
        let p = &plan.deployments[0].points[0].load;
        assert_eq!(
            p.dataset,
            DatasetSpec::Random {
                input_len: 3200,
                output_len: 800,
                range_ratio: 0.0,
                prefix_len: 0
            }
        );
        assert_eq!(p.shape.limit, orchestrate::load::Limit::Requests(500));
        assert!(p.ignore_eos);
    }
}

#[test]
fn plan_output_of_the_seed_tasks() {
    for task in [
        "sglang-h200",
        "sglang-mi300",
        "vllm-h200",
        "vllm-mi300",
        "trtllm-h200",
        "vllm-h200-prefix",
        "sglang-h200-output-length",
    ] {
        let out = Command::new(common::bin())
            .current_dir(common::repo())
            .args(["plan", &format!("tasks/{task}.yaml")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        insta::with_settings!({filters => vec![(r"sha256 [0-9a-f]{64}", "sha256 [hash]")]}, {
            insta::assert_snapshot!(format!("plan-{task}"), String::from_utf8_lossy(&out.stdout));
        });
    }
}

#[test]
fn plan_of_the_demo_task_fills_in_the_executable_and_a_free_port() {
    let out = Command::new(common::bin())
        .current_dir(common::repo())
        .args(["plan", "tasks/demo.yaml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let exe = common::bin().display().to_string();
    assert!(
        text.contains(&format!("$ {exe} mock-server --port ")),
        "{text}"
    );
    insta::with_settings!({filters => vec![
        (r"sha256 [0-9a-f]{64}", "sha256 [hash]"),
        (regex_escape(&exe).as_str(), "[orchestrate]"),
        (r"port \d+", "port [port]"),
    ]}, {
        insta::assert_snapshot!("plan-demo", text);
    });
    let out = Command::new(common::bin())
        .current_dir(common::repo())
        .args(["plan", "--format", "json", "tasks/demo.yaml"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["port_auto"], true);
    let port = json[0]["deployments"][0]["roles"][0]["instances"][0]["port"]
        .as_u64()
        .unwrap();
    assert!(port > 0);
    assert_eq!(
        json[0]["deployments"][0]["points"][3]["load"]["shape"]["limit"]["requests"],
        256
    );
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '/' || c == '_' || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

#[test]
fn deployment_axes_split_deployments_and_load_axes_share_one() {
    let plan = plan_str(
        r#"
name: grouping
model: m
image: "vllm/vllm-openai:{{ version }}"
commands: ["vllm serve m --tensor-parallel-size {{ tp }}"]
benchmark:
  dataset: {kind: random, input_len: 100, output_len: 10}
  num_prompts: "{{ concurrency * 4 }}"
  matrix:
    version: [v0.7.3, v0.8.0]
    tp: [4, 8]
    concurrency: [1, 8]
    exclude:
      - {version: v0.8.0, tp: 4}
    include:
      - {version: v0.8.0, tp: 8, concurrency: 64}
"#,
    )
    .unwrap();
    let summary: Vec<(String, String, Vec<String>)> = plan
        .deployments
        .iter()
        .map(|d| {
            let r = &d.roles[0];
            (
                r.image.clone().unwrap(),
                r.instances[0].commands[0].clone(),
                d.points.iter().map(|p| p.id.clone()).collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "vllm/vllm-openai:v0.7.3".into(),
                "vllm serve m --tensor-parallel-size 4".into(),
                vec![
                    "version=v0.7.3,tp=4,concurrency=1".to_string(),
                    "version=v0.7.3,tp=4,concurrency=8".into()
                ]
            ),
            (
                "vllm/vllm-openai:v0.7.3".into(),
                "vllm serve m --tensor-parallel-size 8".into(),
                vec![
                    "version=v0.7.3,tp=8,concurrency=1".into(),
                    "version=v0.7.3,tp=8,concurrency=8".into()
                ]
            ),
            (
                "vllm/vllm-openai:v0.8.0".into(),
                "vllm serve m --tensor-parallel-size 8".into(),
                vec![
                    "version=v0.8.0,tp=8,concurrency=1".into(),
                    "version=v0.8.0,tp=8,concurrency=8".into(),
                    "version=v0.8.0,tp=8,concurrency=64".into()
                ]
            ),
        ]
    );
    let d = &plan.deployments[2];
    assert_eq!(d.axes.keys().collect::<Vec<_>>(), ["tp", "version"]);
    assert_eq!(
        d.points[2].load.shape.limit,
        orchestrate::load::Limit::Requests(256)
    );
    assert_eq!(d.points[2].load.shape.max_concurrency, Some(64));
}

#[test]
fn a_load_axis_used_in_the_launch_command_changes_the_deployment() {
    let plan = plan_str(
        r#"
name: max-seqs
model: m
commands: ["vllm serve m --max-num-seqs {{ concurrency }}"]
benchmark:
  dataset: {kind: random, input_len: 100, output_len: 10}
  duration: 2m
  matrix: {concurrency: [1, 2]}
"#,
    )
    .unwrap();
    assert_eq!(plan.deployments.len(), 2);
    assert_eq!(
        plan.deployments[1].roles[0].instances[0].commands[0],
        "vllm serve m --max-num-seqs 2"
    );
    assert_eq!(
        plan.deployments[1].points[0].load.shape.max_concurrency,
        Some(2)
    );
    assert_eq!(plan.deployments[1].roles[0].provider, ProviderKind::Local);
}

#[test]
fn secrets_resolve_from_the_environment_and_are_redacted_when_printed() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("secret.yaml");
    std::fs::write(
        &task,
        "name: secret\nmodel: m\nenv:\n  HF_TOKEN: ${{ secrets.ORCH_TEST_TOKEN }}\n  AUTH: \"Bearer ${{ secrets.ORCH_TEST_TOKEN }}\"\ncommands: [\"serve\"]\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n",
    )
    .unwrap();
    for format in ["text", "json"] {
        let out = Command::new(common::bin())
            .env("ORCH_TEST_TOKEN", "hf_very_secret_value")
            .args(["plan", "--format", format])
            .arg(&task)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains("hf_very_secret_value"),
            "{format} leaks the secret:\n{text}"
        );
        assert!(text.contains("***"), "{format}:\n{text}");
        if format == "json" {
            // The manifest's `resolved` renders env per instance, the secret still `***`.
            let plans: serde_json::Value = serde_json::from_str(&text).unwrap();
            let env = &plans[0]["resolved"]["deployments"]["d1"]["roles"][0]["instances"][0]["env"];
            assert_eq!(env[0]["name"], "HF_TOKEN", "{env}");
            assert!(
                env[0]["value"].as_str().unwrap().starts_with("***"),
                "{env}"
            );
        }
    }
    // In process the value is there for the server, and only there.
    let task = spec::load(&task).unwrap();
    let err = plan::build(&task, &PlanContext::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("secret `ORCH_TEST_TOKEN` is not set"), "{err}");
}

#[test]
fn secrets_outside_env_are_rejected() {
    let err = plan_str("name: s\nmodel: m\ncommands: [\"serve --key ${{ secrets.K }}\"]\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n").unwrap_err();
    assert!(
        err.contains("inline.yaml:3:12: secrets are only allowed in `env` values"),
        "{err}"
    );
}

#[test]
fn env_accepts_the_dstack_list_and_the_map_form_in_order() {
    for env in ["env:\n  - A=1\n  - B=x=y\n", "env:\n  A: 1\n  B: x=y\n"] {
        let plan = plan_str(&format!("name: e\nmodel: m\n{env}commands: [\"serve\"]\nbenchmark:\n  dataset: {{kind: random, input_len: 1, output_len: 1}}\n  num_prompts: 1\n")).unwrap();
        let env: Vec<(String, String)> = plan.deployments[0].roles[0].instances[0]
            .env
            .iter()
            .take(2)
            .map(|e| (e.name.clone(), e.value.expose().to_string()))
            .collect();
        assert_eq!(
            env,
            [
                ("A".to_string(), "1".to_string()),
                ("B".into(), "x=y".into())
            ]
        );
        assert!(matches!(
            plan.deployments[0].roles[0].instances[0].env[0].value,
            EnvValue::Plain(_)
        ));
    }
}

#[test]
fn hosts_come_from_the_context_and_feed_node_templates() {
    let hosts: BTreeMap<String, HostFacts> = [
        (
            "a".to_string(),
            HostFacts {
                address: "10.0.0.1".into(),
                gpus: Some(8),
                gpu_name: Some("H200".into()),
            },
        ),
        (
            "b".to_string(),
            HostFacts {
                address: "10.0.0.2".into(),
                gpus: Some(8),
                gpu_name: Some("H200".into()),
            },
        ),
    ]
    .into();
    let plan = plan_str_with(
        "name: h\nmodel: m\nhosts: [a, b]\nnodes: 2\nport: 9000\ncommands: [\"serve --rank {{ node_rank }}/{{ nnodes }} --master {{ master_addr }}:{{ port }} --tp {{ gpus }} on {{ host }}\"]\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n",
        PlanContext::new().with_hosts(hosts),
    )
    .unwrap();
    let inst = &plan.deployments[0].roles[0].instances;
    assert_eq!(
        inst[1].commands[0],
        "serve --rank 1/2 --master 10.0.0.1:9000 --tp 8 on b"
    );
    assert!(
        matches!(&inst[1].host, HostPlan::Remote { name, address } if name == "b" && address == "10.0.0.2")
    );
    let err = plan_str("name: h\nmodel: m\nhosts: [c]\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n").unwrap_err();
    assert!(err.contains("inline.yaml:3:9: unknown host `c`"), "{err}");
}

#[test]
fn a_task_overrides_its_profile_key_by_key_and_profile_errors_name_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("profiles")).unwrap();
    std::fs::write(
        dir.path().join("profiles/p.yaml"),
        "dataset: {kind: random, input_len: 10, output_len: 5}\nnum_prompts: 100\nwarmup: 10s\nmatrix: {concurrency: [1, 2]}\n",
    )
    .unwrap();
    let task = dir.path().join("t.yaml");
    std::fs::write(&task, "name: t\nmodel: m\nbenchmark:\n  profile: profiles/p.yaml\n  duration: 1m\n  matrix: {concurrency: [7]}\n").unwrap();
    let plan = plan::build(&spec::load(&task).unwrap(), &PlanContext::new()).unwrap();
    let points = &plan.deployments[0].points;
    assert_eq!(points.len(), 1);
    let shape = &points[0].load.shape;
    assert_eq!(shape.max_concurrency, Some(7));
    assert_eq!(
        shape.limit,
        orchestrate::load::Limit::Duration(std::time::Duration::from_secs(60))
    );
    assert_eq!(shape.warmup, std::time::Duration::from_secs(10));

    std::fs::write(dir.path().join("profiles/p.yaml"), "dataset: {kind: random, input_len: 10, output_len: 5}\nnum_prompts: 100\nwarmup: 10 seconds\n").unwrap();
    std::fs::write(
        &task,
        "name: t\nmodel: m\nbenchmark:\n  profile: profiles/p.yaml\n",
    )
    .unwrap();
    let err = plan::build(&spec::load(&task).unwrap(), &PlanContext::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("profiles/p.yaml:3:9: `warmup`"), "{err}");
}

#[test]
fn readiness_defaults_and_overrides() {
    let base = "name: r\nmodel: m\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n";
    let plan = plan_str(base).unwrap();
    let r = &plan.deployments[0].roles[0].readiness;
    let http = r.http.as_ref().unwrap();
    assert_eq!(
        (http.path.as_str(), http.status, r.interval.as_secs()),
        ("/health", 200, 1)
    );
    assert_eq!(r.timeout.as_secs(), 1800);
    assert!(!r.generate);
    let plan = plan_str(&format!(
        "{base}readiness: {{http: /v1/models, interval: 250ms, timeout: 45m, generate: true}}\n"
    ))
    .unwrap();
    let r = &plan.deployments[0].roles[0].readiness;
    assert_eq!(r.interval.as_millis(), 250);
    assert_eq!(r.timeout.as_secs(), 2700);
    assert!(r.generate);
    assert_eq!(plan.deployments[0].roles[0].instances[0].port, 8000);
    // The interval applies to a TCP probe too.
    let plan = plan_str(&format!(
        "{base}readiness: {{tcp: true, interval: 250ms}}\n"
    ))
    .unwrap();
    let r = &plan.deployments[0].roles[0].readiness;
    assert!(r.http.is_none());
    assert_eq!(r.interval.as_millis(), 250);
}

/// docs/task-file.md documents every field of the task-file types, and every field has a
/// doc comment (STYLE rule 3).
#[test]
fn task_file_doc_covers_every_field() {
    let mut files: Vec<_> = std::fs::read_dir(common::repo().join("src/spec/types"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let types = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let doc = std::fs::read_to_string(common::repo().join("docs/task-file.md")).unwrap();
    let lines: Vec<&str> = types.lines().collect();
    let mut checked = 0;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix("pub ") else {
            continue;
        };
        let Some((field, _)) = rest.split_once(':') else {
            continue;
        };
        if field.contains(' ') || !line.starts_with("    pub ") {
            continue;
        }
        // The YAML name: a `rename` on the attribute lines above wins.
        let mut j = i;
        let mut yaml_name = field.to_string();
        let mut documented = false;
        let mut not_a_key = false;
        while j > 0 {
            j -= 1;
            let above = lines[j].trim_start();
            // `#[serde(skip)]`: set while planning, never read from the file.
            not_a_key |= above == "#[serde(skip)]";
            if let Some(r) = above.split("rename = \"").nth(1) {
                yaml_name = r.split('"').next().unwrap().to_string();
            } else if above.starts_with("///") {
                documented = true;
            } else if !above.starts_with("#[") {
                break;
            }
        }
        if ["axes", "include", "exclude", "name", "values"].contains(&field)
            && lines[..i]
                .iter()
                .rev()
                .find(|l| l.starts_with("pub struct"))
                .is_some_and(|l| l.contains("AxisSpec") || l.contains("MatrixSpec"))
        {
            assert!(doc.contains("`include`") && doc.contains("`exclude`"));
            continue;
        }
        assert!(
            documented,
            "field `{field}` (line {}) has no doc comment",
            i + 1
        );
        if not_a_key {
            continue;
        }
        assert!(
            doc.contains(&format!("`{yaml_name}`")) || doc.contains(&format!(".{yaml_name}`")),
            "docs/task-file.md does not document `{yaml_name}`"
        );
        checked += 1;
    }
    assert!(checked > 40, "only {checked} fields found");
}

#[test]
fn roles_start_in_dependency_order_and_see_each_other() {
    let hosts: BTreeMap<String, HostFacts> = [
        (
            "a".to_string(),
            HostFacts {
                address: "10.0.0.1".into(),
                gpus: Some(8),
                gpu_name: None,
            },
        ),
        (
            "b".to_string(),
            HostFacts {
                address: "10.0.0.2".into(),
                gpus: Some(8),
                gpu_name: None,
            },
        ),
    ]
    .into();
    let plan = plan_str_with(
        r#"
name: pd
model: m
env: {SHARED: "1"}
roles:
  router:
    port: 8000
    depends_on: [prefill, decode]
    env: {SHARED: "2"}
    commands:
      - "lb {% for u in roles.prefill.urls %}--prefill {{ u }} {% endfor %}--decode {{ roles.decode.urls[0] }} --port {{ port }}"
  prefill:
    hosts: [a, b]
    nodes: 2
    port: 30000
    commands: ["serve --prefill --rank {{ node_rank }}/{{ nnodes }} --master {{ master_addr }}"]
  decode:
    hosts: [b]
    port: 30001
    commands: ["serve --decode"]
benchmark:
  dataset: {kind: random, input_len: 8, output_len: 8}
  num_prompts: 10
"#,
        PlanContext::new().with_hosts(hosts),
    )
    .unwrap();
    let d = &plan.deployments[0];
    let order: Vec<&str> = d.roles.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(order, ["prefill", "decode", "router"]);
    assert_eq!(d.entry_role, "router");
    assert_eq!(
        d.roles[0].instances[1].commands[0],
        "serve --prefill --rank 1/2 --master 10.0.0.1"
    );
    let router = &d.roles[2].instances[0];
    assert_eq!(
        router.commands[0],
        "lb --prefill http://10.0.0.1:30000 --prefill http://10.0.0.2:30000 --decode http://10.0.0.2:30001 --port 8000"
    );
    let shared: Vec<&str> = router
        .env
        .iter()
        .filter(|e| e.name == "SHARED")
        .map(|e| e.value.expose())
        .collect();
    assert_eq!(shared, ["2"]);

    let err = plan_str("name: pd\nmodel: m\ncommands: [x]\nroles:\n  a: {port: 1, commands: [y]}\nbenchmark:\n  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 10\n").unwrap_err();
    assert!(
        err.contains("inline.yaml:3:12: `commands` is set both at the top level and by `roles`"),
        "{err}"
    );
    let err = plan_str("name: pd\nmodel: m\nroles:\n  a: {port: 1, replicas: 2, commands: [y]}\nbenchmark:\n  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 10\n").unwrap_err();
    assert!(
        err.contains("two instances of role `a` would listen on port 1"),
        "{err}"
    );
}

#[test]
fn startup_order_and_readiness_ray_name_their_place() {
    let base = "name: g\nmodel: m\nbenchmark:\n  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 1\n";
    let role = |keys: &str| {
        format!("{base}roles:\n  server:\n    port: auto\n    nodes: 2\n    commands: [x]\n{keys}")
    };
    let err = plan_str(&role("    startup_order: leader-first\n")).unwrap_err();
    assert!(
        err.contains("inline.yaml:11:20: unknown value `leader-first`")
            && err.contains("did you mean `master-first`?"),
        "{err}"
    );
    let err = plan_str(&role("    readiness: {ray: {port: 0}}\n")).unwrap_err();
    assert!(
        err.contains("inline.yaml:11:29: `readiness.ray.port` cannot be 0"),
        "{err}"
    );
    let err = plan_str(&role("    readiness: {ray: {nodes: 0}}\n")).unwrap_err();
    assert!(
        err.contains("inline.yaml:11:30: `readiness.ray.nodes` must be at least 1"),
        "{err}"
    );
    let err = plan_str(&format!("startup_order: master-first\n{}", role(""))).unwrap_err();
    assert!(
        err.contains(
            "inline.yaml:1:16: `startup_order` is set both at the top level and by `roles`"
        ),
        "{err}"
    );
    // Defaults: `any`, and `ray.nodes` is the role's `nodes`.
    let p = plan_str(&role(
        "    startup_order: master-first\n    readiness: {ray: {}}\n",
    ))
    .unwrap();
    let r = &p.deployments[0].roles[0];
    assert_eq!(r.startup_order, spec::dstack::StartupOrder::MasterFirst);
    let ray = r.readiness.ray.as_ref().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.yaml");
    std::fs::write(
        &file,
        role("    startup_order: master-first\n    readiness: {ray: {}}\n"),
    )
    .unwrap();
    let out = Command::new(common::bin())
        .arg("plan")
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "ready: after `ray status` on node 0 counts 2 Ray nodes (port 6379), GET /health"
        ) && text.contains("start order: master-first"),
        "{text}"
    );
    assert_eq!(
        (ray.port, ray.nodes, ray.command.as_str()),
        (6379, Some(2), "ray")
    );
    let p = plan_str(&role("")).unwrap();
    assert_eq!(
        p.deployments[0].roles[0].startup_order,
        spec::dstack::StartupOrder::Any
    );
}

/// Every complete task example in docs/task-file.md plans (with the hosts it names).
#[test]
fn task_file_doc_examples_plan() {
    let doc = std::fs::read_to_string(common::repo().join("docs/task-file.md")).unwrap();
    let hosts: BTreeMap<String, HostFacts> = ["mi300-a", "mi300-b", "mi300-c"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                n.to_string(),
                HostFacts {
                    address: format!("10.0.0.{}", i + 1),
                    gpus: Some(8),
                    gpu_name: Some("MI300X".into()),
                },
            )
        })
        .collect();
    let mut planned = 0;
    for block in doc.split("```yaml\n").skip(1) {
        let yaml = block.split("```").next().unwrap();
        if !(yaml.contains("\nname: ") || yaml.starts_with("name: "))
            || !yaml.contains("benchmark:")
        {
            continue;
        }
        // The example's secret must resolve; PATH is set wherever tests run.
        let yaml = yaml.replace("secrets.HF_TOKEN", "secrets.PATH");
        let plan = plan_str_with(&yaml, PlanContext::new().with_hosts(hosts.clone()));
        assert!(
            plan.is_ok(),
            "doc example does not plan:\n{yaml}\n{}",
            plan.unwrap_err()
        );
        planned += 1;
    }
    assert!(planned >= 2, "only {planned} examples planned");
}

#[test]
fn auto_ports_are_distinct_within_a_plan() {
    let plan = plan_str("name: p\nmodel: m\nroles:\n  a: {port: auto, replicas: 3, commands: [\"serve --port {{ port }}\"]}\n  b: {port: auto, commands: [y]}\nbenchmark:\n  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 10\n").unwrap();
    assert!(plan.port_auto);
    let mut ports: Vec<u16> = plan.deployments[0]
        .roles
        .iter()
        .flat_map(|r| r.instances.iter().map(|i| i.port))
        .collect();
    assert_eq!(
        plan.deployments[0].roles[0].instances[2].commands[0],
        format!("serve --port {}", ports[2])
    );
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 4);
}

#[test]
fn plan_and_validate_document_their_exit_codes() {
    for verb in ["plan", "validate"] {
        let out = Command::new(common::bin())
            .args([verb, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains("Exit codes:") && help.contains("2  bad input"),
            "{verb} --help:\n{help}"
        );
    }
    let out = Command::new(common::bin())
        .current_dir(common::repo())
        .args(["plan", "tests/fixtures/spec/both_limits.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn container_wiring_reaches_every_role_and_bad_values_are_located() {
    let yaml = "name: c\nmodel: m\nimage: img:1\ncommands: [serve]\ncontainer: {network: host, ipc: host, gpu_ids: [\"0\", \"3\"]}\nbenchmark:\n  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 1\n";
    let plan = plan_str(yaml).unwrap();
    let role = &plan.deployments[0].roles[0];
    assert_eq!(role.provider, ProviderKind::Docker);
    assert_eq!(role.container.network, orchestrate::deploy::Network::Host);
    assert_eq!(role.container.ipc, orchestrate::deploy::Ipc::Host);
    assert_eq!(
        role.container.gpu_ids,
        vec!["0".to_string(), "3".to_string()]
    );
    let default = plan_str(&yaml.replace(
        "container: {network: host, ipc: host, gpu_ids: [\"0\", \"3\"]}\n",
        "",
    ))
    .unwrap();
    assert_eq!(
        default.deployments[0].roles[0].container,
        orchestrate::deploy::ContainerOptions::default()
    );
    let err = plan_str(&yaml.replace("network: host", "network: hots")).unwrap_err();
    assert!(err.contains("inline.yaml:5:"), "{err}");
}

#[test]
fn a_task_file_over_8_mib_is_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.yaml");
    let mut text = String::from("name: huge\nmodel: m\ncommands: [vllm serve m]\n");
    text.push_str(&"# padding\n".repeat(900_000));
    std::fs::write(&path, text).unwrap();
    let err = spec::load(&path).unwrap_err().to_string();
    assert!(err.contains("larger than 8 MiB"), "{err}");
}

#[test]
fn twenty_thousand_env_entries_validate() {
    let mut yaml = String::from("name: many-env\nmodel: m\ncommands:\n  - vllm serve m\nenv:\n");
    for i in 0..20_000 {
        yaml.push_str(&format!("  - VAR_{i}=value{i}\n"));
    }
    yaml.push_str(
        "benchmark:\n  dataset: {kind: random, input_len: 8, output_len: 8}\n  num_prompts: 10\n",
    );
    let plan = plan_str(&yaml).unwrap();
    assert_eq!(plan.task, "many-env");
}

#[test]
fn a_file_over_the_yaml_node_budget_says_so_in_plain_words() {
    let mut yaml = String::from("name: nodes\nmodel: m\ncommands:\n  - vllm serve m\nenv:\n");
    for i in 0..260_000 {
        yaml.push_str(&format!("  V{i}: {i}\n"));
    }
    let err = plan_str(&yaml).unwrap_err();
    assert!(err.contains("too many nodes"), "{err}");
    assert!(!err.contains("budget breached"), "{err}");
}

/// Hosts `n0`..`n3` (8 x H200 each) and `r0` (no GPUs), as tests/fixtures/topology/hosts.yaml.
pub(crate) fn gang_hosts() -> BTreeMap<String, HostFacts> {
    let mut hosts: BTreeMap<String, HostFacts> = (0..4)
        .map(|i| {
            (
                format!("n{i}"),
                HostFacts {
                    address: format!("10.0.0.1{i}"),
                    gpus: Some(8),
                    gpu_name: Some("H200".into()),
                },
            )
        })
        .collect();
    hosts.insert(
        "r0".into(),
        HostFacts {
            address: "10.0.0.20".into(),
            gpus: None,
            gpu_name: None,
        },
    );
    hosts
}

pub(crate) fn env_of(i: &plan::InstancePlan) -> BTreeMap<String, String> {
    i.env
        .iter()
        .map(|e| (e.name.clone(), e.value.expose().to_string()))
        .collect()
}

#[test]
fn a_two_node_two_replica_role_renders_ranks_leaders_and_dstack_env() {
    let text =
        std::fs::read_to_string(common::repo().join("tests/fixtures/topology/gang.yaml")).unwrap();
    let plan = plan_str_with(&text, PlanContext::new().with_hosts(gang_hosts())).unwrap();
    let d = &plan.deployments[0];
    let worker = &d.roles[0];
    let expected = [
        // (host address, replica, node_rank, master)
        ("10.0.0.10", 0, 0, "10.0.0.10"),
        ("10.0.0.11", 0, 1, "10.0.0.10"),
        ("10.0.0.12", 1, 0, "10.0.0.12"),
        ("10.0.0.13", 1, 1, "10.0.0.12"),
    ];
    assert_eq!(worker.instances.len(), 4);
    for (i, (addr, replica, rank, master)) in worker.instances.iter().zip(expected) {
        assert_eq!(i.host.address(), addr);
        assert_eq!((i.replica, i.node_rank), (replica, rank));
        assert_eq!(
            i.commands[0],
            format!(
                "python3 -m sglang.launch_server --model-path m --tp 16 --dist-init-addr {master}:5000 --nnodes 2 --node-rank {rank} --port 30000  # replica {replica}"
            )
        );
        let env = env_of(i);
        assert_eq!(env["DSTACK_NODES_NUM"], "2");
        assert_eq!(env["DSTACK_NODE_RANK"], rank.to_string());
        assert_eq!(env["DSTACK_MASTER_NODE_IP"], master);
        let second = if replica == 0 {
            "10.0.0.11"
        } else {
            "10.0.0.13"
        };
        assert_eq!(env["DSTACK_NODES_IPS"], format!("{master}\n{second}"));
        assert_eq!(env["DSTACK_GPUS_PER_NODE"], "8");
        assert_eq!(env["DSTACK_GPUS_NUM"], "16");
        assert_eq!(env["DSTACK_RUN_NAME"], "gang");
        assert_eq!(
            i.name("worker"),
            format!("worker-r{replica}-n{rank}"),
            "the log file's name"
        );
    }
    let router = &d.roles[1];
    assert_eq!(
        router.instances[0].commands[0],
        "python -m sglang_router.launch_router --worker-urls http://10.0.0.10:30000 http://10.0.0.12:30000 --port 8000  # 4 endpoints, gpus 0"
    );
    // The router takes no GPUs; the workers take the task's.
    assert!(router.resources.gpu.as_ref().is_none_or(|g| g.count == 0));
    assert_eq!(env_of(&router.instances[0])["DSTACK_GPUS_NUM"], "0");
    assert_eq!(worker.resources.gpu.as_ref().unwrap().count, 8);

    // `plan` prints every process's host, argv and env (the secret redacted).
    let out = Command::new(common::bin())
        .current_dir(common::repo())
        .env("ORCHESTRATE_HOSTS", "tests/fixtures/topology/hosts.yaml")
        .args(["plan", "tests/fixtures/topology/gang.yaml"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("HF_TOKEN=*** (secret PATH)"), "{stdout}");
    insta::with_settings!({filters => vec![(r"sha256 [0-9a-f]{64}", "sha256 [hash]")]}, {
        insta::assert_snapshot!("plan-gang", stdout);
    });
}

#[test]
fn headless_ranks_get_the_alive_probe() {
    let text = std::fs::read_to_string(common::repo().join("tests/fixtures/topology/gang.yaml"))
        .unwrap()
        .replace(
            "  worker:\n",
            "  worker:\n    readiness: {http: /v1/models, generate: true}\n",
        );
    let plan = plan_str_with(&text, PlanContext::new().with_hosts(gang_hosts())).unwrap();
    let worker = &plan.deployments[0].roles[0];
    for i in &worker.instances {
        let r = worker.readiness_of(i);
        if i.node_rank == 0 {
            assert_eq!(i.probe, plan::Probe::Role);
            assert!(!r.alive_only && r.generate);
            assert_eq!(r.http.as_ref().unwrap().path, "/v1/models");
        } else {
            assert_eq!(i.probe, plan::Probe::Alive);
            assert!(r.alive_only && !r.generate, "{r:?}");
        }
    }
    // A single-node role probes every replica.
    let router = &plan.deployments[0].roles[1];
    assert!(
        router
            .instances
            .iter()
            .all(|i| i.probe == plan::Probe::Role)
    );
}

#[test]
fn too_few_hosts_for_a_gang_is_an_error_at_nodes() {
    let err = plan_str_with(
        "name: g\nmodel: m\nroles:\n  w:\n    hosts: [n0, n1, n2]\n    replicas: 2\n    nodes: 2\n    port: 1\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n",
        PlanContext::new().with_hosts(gang_hosts()),
    )
    .unwrap_err();
    assert!(
        err.contains("inline.yaml:7:12: role `w` needs 4 hosts (2 replicas x 2 nodes, one node per host), but its `hosts` give 3"),
        "{err}"
    );
    assert!(
        err.contains("add hosts to `hosts`, or lower `replicas` or `nodes`"),
        "{err}"
    );
    let err = plan_str("name: g\nmodel: m\nnodes: 0\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n").unwrap_err();
    assert!(
        err.contains("inline.yaml:3:8: role `server` needs at least one node"),
        "{err}"
    );
    let err = plan_str("name: g\nmodel: m\nnodes: 4000000000\nreplicas: 4000000000\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n").unwrap_err();
    assert!(
        err.contains("inline.yaml:3:8: role `server` would have 16000000000000000000 processes (4000000000 replicas x 4000000000 nodes), more than 10000"),
        "{err}"
    );
    // `nodes` of a plain task and `roles` do not mix.
    let err = plan_str("name: g\nmodel: m\nnodes: 2\nroles:\n  a: {port: 1}\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n").unwrap_err();
    assert!(
        err.contains("inline.yaml:3:8: `nodes` is set both at the top level and by `roles`"),
        "{err}"
    );
}

#[test]
fn a_dstack_task_with_nodes_is_one_role_with_one_multi_node_replica() {
    let yaml = "type: task\nname: dist\nimage: vllm/vllm-openai:latest\nnodes: 2\nhosts: [n0, n1]\nresources:\n  gpu: 8:H200\nenv:\n  - MODEL_ID=m\ncommands:\n  - vllm serve $MODEL_ID -tp $DSTACK_GPUS_NUM --nnodes $DSTACK_NODES_NUM --node-rank $DSTACK_NODE_RANK --master-addr $DSTACK_MASTER_NODE_IP\nmodel: m\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n";
    let plan = plan_str_with(yaml, PlanContext::new().with_hosts(gang_hosts())).unwrap();
    let d = &plan.deployments[0];
    assert_eq!(d.roles.len(), 1);
    let server = &d.roles[0];
    assert_eq!(server.name, "server");
    let ranks: Vec<(usize, usize, &str)> = server
        .instances
        .iter()
        .map(|i| (i.replica, i.node_rank, i.host.address()))
        .collect();
    assert_eq!(ranks, [(0, 0, "10.0.0.10"), (0, 1, "10.0.0.11")]);
    let env = env_of(&server.instances[1]);
    assert_eq!(
        (
            env["DSTACK_GPUS_NUM"].as_str(),
            env["DSTACK_NODES_NUM"].as_str(),
            env["DSTACK_NODE_RANK"].as_str(),
            env["DSTACK_MASTER_NODE_IP"].as_str()
        ),
        ("16", "2", "1", "10.0.0.10")
    );
    // dstack's `replicas` next to `nodes`: two gangs on four hosts, in order.
    let plan = plan_str_with(
        &yaml.replace("hosts: [n0, n1]", "hosts: [n0, n1, n2, n3]\nreplicas: 2"),
        PlanContext::new().with_hosts(gang_hosts()),
    )
    .unwrap();
    let masters: Vec<String> = plan.deployments[0].roles[0]
        .instances
        .iter()
        .map(|i| env_of(i)["DSTACK_MASTER_NODE_IP"].clone())
        .collect();
    assert_eq!(
        masters,
        ["10.0.0.10", "10.0.0.10", "10.0.0.12", "10.0.0.12"]
    );
    // Without `replicas`, the hosts make as many gangs as they can.
    let plan = plan_str_with(
        &yaml.replace("hosts: [n0, n1]", "hosts: [n0, n1, n2, n3]"),
        PlanContext::new().with_hosts(gang_hosts()),
    )
    .unwrap();
    assert_eq!(plan.deployments[0].roles[0].instances[3].replica, 1);
    // The file validates as it is.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dist.dstack.yml"), yaml).unwrap();
    std::fs::write(
        dir.path().join("hosts.yaml"),
        "hosts:\n  n0: {address: 10.0.0.10}\n  n1: {address: 10.0.0.11}\n",
    )
    .unwrap();
    let out = Command::new(common::bin())
        .current_dir(dir.path())
        .args(["validate", "dist.dstack.yml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const TWO_DEPLOYMENTS: &str = r#"
name: two
model: m
env: {SHARED: "1"}
deployments:
  dynamo:
    backend: dynamo
    image: dynamo:vllm
    roles:
      decode:
        nodes: 2
        port: auto
        commands: ["decode {{ node_rank }}/{{ nnodes }} tp {{ tp }} of {{ deployment }}"]
      frontend:
        port: 8000
        depends_on: [decode]
        resources: {gpu: 0}
        commands: ["frontend {{ roles.decode.leaders[0] }}"]
  vllm:
    backend: vllm
    commands: ["vllm serve m --port {{ port }}"]
    port: 8001
benchmark:
  dataset: {kind: random, input_len: 8, output_len: 8}
  num_prompts: "{{ concurrency * 2 }}"
  matrix:
    concurrency: [1, 8]
    tp: [8, 16]
"#;

#[test]
fn named_deployments_plan_each_under_one_benchmark() {
    let plan = plan_str(TWO_DEPLOYMENTS).unwrap();
    let summary: Vec<(String, Option<String>, String, usize)> = plan
        .deployments
        .iter()
        .map(|d| {
            (
                d.id.clone(),
                d.name.clone(),
                serde_json::to_value(d.backend)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string(),
                d.points.len(),
            )
        })
        .collect();
    // `tp` is read by dynamo's commands only: two dynamo deployments, and for vllm a load
    // axis (its points share one deployment).
    assert_eq!(
        summary,
        [
            ("d1".into(), Some("dynamo".into()), "dynamo".into(), 2),
            ("d2".into(), Some("dynamo".into()), "dynamo".into(), 2),
            ("d3".into(), Some("vllm".into()), "vllm".into(), 4),
        ]
    );
    let d1 = &plan.deployments[0];
    assert_eq!(d1.axes["deployment"], "dynamo");
    assert_eq!(d1.roles[0].image.as_deref(), Some("dynamo:vllm"));
    assert_eq!(
        d1.roles[0].instances[1].commands[0],
        "decode 1/2 tp 8 of dynamo"
    );
    assert!(
        d1.roles[1]
            .resources
            .gpu
            .as_ref()
            .is_none_or(|g| g.count == 0)
    );
    let ids: Vec<&str> = plan.deployments[2]
        .points
        .iter()
        .map(|p| p.id.as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "deployment=vllm,concurrency=1,tp=8",
            "deployment=vllm,concurrency=1,tp=16",
            "deployment=vllm,concurrency=8,tp=8",
            "deployment=vllm,concurrency=8,tp=16",
        ]
    );
    assert_eq!(plan.deployments[2].points[0].axes["deployment"], "vllm");
    assert_eq!(plan.deployments[2].roles[0].provider, ProviderKind::Local);
    // One benchmark: the same load at the same point in both deployments.
    assert_eq!(
        plan.deployments[0].points[1].load.shape.limit,
        orchestrate::load::Limit::Requests(16)
    );
    assert_eq!(
        plan.deployments[2].points[2].load.shape.limit,
        orchestrate::load::Limit::Requests(16)
    );
    assert!(plan.resolved["deployments"]["d3"]["roles"].is_array());

    // The `deployment` axis picks and orders them.
    let pick = |axis: &str| {
        TWO_DEPLOYMENTS.replace("    tp: [8, 16]\n", &format!("    deployment: {axis}\n"))
    };
    let plan = plan_str(&pick("[vllm, dynamo]").replace("{{ tp }}", "8")).unwrap();
    let names: Vec<Option<&str>> = plan.deployments.iter().map(|d| d.name.as_deref()).collect();
    assert_eq!(names, [Some("vllm"), Some("dynamo")]);
    let plan = plan_str(&pick("[vllm]")).unwrap();
    assert_eq!(plan.deployments.len(), 1);
    assert_eq!(plan.deployments[0].name.as_deref(), Some("vllm"));
    let err = plan_str(&pick("[vlm]")).unwrap_err();
    assert!(
        err.contains(
            "inline.yaml:28:5: `deployment` value \"vlm\" is not one of the named `deployments`"
        ),
        "{err}"
    );
    assert!(err.contains("did you mean `vllm`?"), "{err}");
    // An axis no deployment reads is still an error.
    let err = plan_str(
        &TWO_DEPLOYMENTS.replace("    tp: [8, 16]\n", "    tp: [8, 16]\n    zz: [1, 2]\n"),
    )
    .unwrap_err();
    assert!(
        err.contains("inline.yaml:29:5: axis `zz` is not used by any field of any deployment"),
        "{err}"
    );
    // Without `deployments`, the axis is an error.
    let err = plan_str("name: g\nmodel: m\nbenchmark:\n  dataset: {kind: random, input_len: 1, output_len: 1}\n  num_prompts: 1\n  matrix: {deployment: [a]}\n").unwrap_err();
    assert!(
        err.contains("inline.yaml:6:12: axis `deployment` picks named deployments"),
        "{err}"
    );
}

#[test]
fn mooncake_dataset_keys_resolve_and_bad_ones_name_their_place() {
    let task = |dataset: &str| {
        format!(
            "name: trace\nmodel: m\nimage: img\ncommands: [\"serve\"]\nbenchmark:\n  dataset: {dataset}\n  num_prompts: 20\n"
        )
    };
    let path = "tests/fixtures/traces/mooncake-sample.jsonl";
    let plan = plan_str(&task(&format!(
        "{{kind: mooncake, path: {path}, block_size: 256, speedup: 2, start: 1s, duration: 2s}}"
    )))
    .unwrap();
    match &plan.deployments[0].points[0].load.dataset {
        DatasetSpec::Mooncake { path: p, replay } => {
            assert!(p.ends_with(path), "{}", p.display());
            assert_eq!(replay.block_size, 256);
            assert_eq!(replay.speedup, 2.0);
            assert_eq!(replay.start, std::time::Duration::from_secs(1));
            assert_eq!(replay.duration, Some(std::time::Duration::from_secs(2)));
        }
        other => panic!("not a mooncake dataset: {other:?}"),
    }
    let plain = plan_str(&task(&format!("{{kind: mooncake, path: {path}}}"))).unwrap();
    match &plain.deployments[0].points[0].load.dataset {
        DatasetSpec::Mooncake { replay, .. } => {
            assert_eq!((replay.block_size, replay.speedup), (512, 1.0));
            assert_eq!(
                (replay.start, replay.duration),
                (std::time::Duration::ZERO, None)
            );
        }
        other => panic!("not a mooncake dataset: {other:?}"),
    }
    let bad = [
        (
            format!("{{kind: mooncake, path: {path}, speedup: 0}}"),
            "`speedup`",
        ),
        (
            format!("{{kind: mooncake, path: {path}, block_size: 0}}"),
            "`block_size`",
        ),
        (
            format!("{{kind: mooncake, path: {path}, start: soon}}"),
            "`start`",
        ),
        ("{kind: mooncake}".to_string(), "needs `path`"),
        (
            "{kind: random, input_len: 10, output_len: 2, speedup: 2}".to_string(),
            "`speedup` does not apply to the random dataset",
        ),
    ];
    for (dataset, want) in bad {
        let err = plan_str(&task(&dataset)).unwrap_err();
        assert!(err.contains(want), "{dataset}: {err}");
        assert!(err.contains("inline.yaml"), "{dataset}: {err}");
    }
}

#[test]
fn conversation_dataset_keys_resolve_and_bad_ones_name_their_place() {
    let task = |endpoint: &str, dataset: &str| {
        format!(
            "name: conv\nmodel: m\nimage: img\ncommands: [\"serve\"]\nbenchmark:\n  endpoint: {endpoint}\n  dataset: {dataset}\n  num_prompts: 20\n"
        )
    };
    let plan = plan_str(&task(
        "chat",
        "{kind: conversation, num_turns: {distribution: uniform, min: 4, max: 8}, input_len: 30, output_len: 5, system_prompt_len: 100, think_time: 250ms}",
    ))
    .unwrap();
    match &plan.deployments[0].points[0].load.dataset {
        DatasetSpec::Conversation(c) => {
            assert_eq!(
                c.num_turns,
                Some(orchestrate::dataset::Dist::Uniform { min: 4, max: 8 })
            );
            assert_eq!((c.input_len, c.output_len), (30, Some(5)));
            assert_eq!(c.system_prompt_len, 100);
            assert_eq!(c.think_time, std::time::Duration::from_millis(250));
            assert_eq!(c.path, None);
        }
        other => panic!("not a conversation dataset: {other:?}"),
    }
    let counted = plan_str(&task(
        "chat",
        "{kind: conversation, num_turns: 6, input_len: 30, output_len: 5}",
    ))
    .unwrap();
    match &counted.deployments[0].points[0].load.dataset {
        DatasetSpec::Conversation(c) => {
            assert_eq!(
                c.num_turns,
                Some(orchestrate::dataset::Dist::Constant { value: 6 })
            );
            assert_eq!(c.think_time, std::time::Duration::ZERO);
        }
        other => panic!("not a conversation dataset: {other:?}"),
    }
    // Length distributions stand in for the lengths; a session's own prefix.
    let drawn = plan_str(&task(
        "chat",
        "{kind: conversation, input_dist: {distribution: lognormal, average: 200, max: 800}, output_dist: {distribution: constant, value: 40}, prefix_len: 50}",
    ))
    .unwrap();
    match &drawn.deployments[0].points[0].load.dataset {
        DatasetSpec::Conversation(c) => {
            assert_eq!(
                c.input_dist,
                Some(orchestrate::dataset::Dist::Lognormal {
                    average: 200.0,
                    median_ratio: None,
                    max: Some(800)
                })
            );
            assert_eq!(
                c.output_dist,
                Some(orchestrate::dataset::Dist::Constant { value: 40 })
            );
            assert_eq!(c.prefix_len, 50);
        }
        other => panic!("not a conversation dataset: {other:?}"),
    }
    let bad = [
        (
            "chat",
            "{kind: conversation, input_len: 30, output_len: 5, num_turns: {distribution: uniform, min: 8, max: 2}}",
            "`num_turns`: uniform `min` 8 is above `max` 2",
        ),
        (
            "chat",
            "{kind: conversation, input_len: 30, output_len: 5, num_turns: 0}",
            "`num_turns` must be at least 1",
        ),
        (
            "chat",
            "{kind: conversation, input_len: 30, output_len: 5, think_time: later}",
            "`think_time`",
        ),
        ("chat", "{kind: conversation, output_len: 5}", "input_len"),
        (
            "chat",
            "{kind: conversation, input_len: 3, output_dist: {distribution: zipf, alpha: 0.5}}",
            "`output_dist`: zipf `alpha` 0.5 must be above 1",
        ),
        (
            "chat",
            "{kind: random, input_len: 10, output_len: 2, input_dist: {distribution: constant, value: 3}}",
            "`input_dist` does not apply to the random dataset",
        ),
        (
            "completions",
            "{kind: conversation, input_len: 30, output_len: 5}",
            "add `endpoint: chat`",
        ),
        (
            "chat",
            "{kind: random, input_len: 10, output_len: 2, think_time: 1s}",
            "`think_time` does not apply to the random dataset",
        ),
    ];
    for (endpoint, dataset, want) in bad {
        let err = plan_str(&task(endpoint, dataset)).unwrap_err();
        assert!(err.contains(want), "{dataset}: {err}");
        // file:line:col of the bad value.
        assert!(err.contains("inline.yaml:7:"), "{dataset}: {err}");
    }
}
