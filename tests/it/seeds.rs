//! The rest of seed 002 (seeds/dstack-sglang-vllm-trtllm-h200-mi300x.md) as task files: the
//! SGLang prefix-cached runs, the offline throughput sweeps (SGLang and vLLM on MI300X,
//! SGLang and TensorRT-LLM on H200, the TensorRT-LLM engine build as a pre-step role), and
//! the output-length variants of every engine and GPU. Each test checks that `plan` renders the seed's exact launch, build and
//! benchmark flags, and the study's sweep.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use orchestrate::dataset::DatasetSpec;
use orchestrate::load::Limit;
use orchestrate::plan::{self, Plan, PlanContext, ProviderKind};
use orchestrate::spec;

use crate::common;

fn plan_of(task: &str) -> Plan {
    let path = common::repo().join("tasks").join(format!("{task}.yaml"));
    let task = spec::load(&path).unwrap_or_else(|e| panic!("{task}: {e}"));
    plan::build(&task, &PlanContext::new()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `orchestrate plan tasks/<task>.yaml`, as a user sees it.
fn plan_text(task: &str) -> String {
    let out = Command::new(common::bin())
        .current_dir(common::repo())
        .args(["plan", &format!("tasks/{task}.yaml")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{task}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn env_of(inst: &plan::InstancePlan) -> BTreeMap<&str, &str> {
    inst.env
        .iter()
        .map(|e| (e.name.as_str(), e.value.expose()))
        .collect()
}

/// The server of a one-role task runs exactly `commands` in Docker, and `plan` prints them.
fn assert_server(task: &str, commands: &[&str]) -> Plan {
    let plan = plan_of(task);
    assert_eq!(plan.deployments.len(), 1, "{task}");
    let role = &plan.deployments[0].roles[0];
    assert_eq!(role.provider, ProviderKind::Docker, "{task}");
    assert_eq!(role.instances[0].commands, commands, "{task}");
    let text = plan_text(task);
    for c in commands {
        assert!(text.contains(&format!("$ {c}\n")), "{task}: {c}\n{text}");
    }
    plan
}

const SGLANG_H200: &str = "python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-R1 --tp 8 --trust-remote-code --enable-dp-attention";
const SGLANG_MI300: &str =
    "python3 -m sglang.launch_server --model-path $MODEL_ID --tp 8 --trust-remote-code";

/// The seed's prefix-cached run: `--dataset-name generated-shared-prefix --gsp-num-groups 10
/// --gsp-prompts-per-group 50 --gsp-system-prompt-len 2000 --gsp-question-len 1200
/// --gsp-output-len 800 --num-prompts 500 --max-concurrency 128`.
fn assert_prefix_cached(task: &str, plan: &Plan) {
    let points = &plan.deployments[0].points;
    assert_eq!(points.len(), 1, "{task}");
    let load = &points[0].load;
    assert_eq!(
        load.dataset,
        DatasetSpec::SharedPrefix {
            num_groups: 10,
            prompts_per_group: 50,
            system_prompt_len: 2000,
            question_len: 1200,
            output_len: 800,
        },
        "{task}"
    );
    assert_eq!(load.shape.limit, Limit::Requests(500), "{task}");
    assert_eq!(load.shape.max_concurrency, Some(128), "{task}");
    assert!(load.ignore_eos, "{task}");
    let text = plan_text(task);
    assert!(
        text.contains("shared_prefix 10 groups x 50, prefix 2000 + question 1200 in / 800 out, 500 requests, concurrency 128"),
        "{task}: {text}"
    );
}

#[test]
fn sglang_prefix_cached_runs_render_the_seed_flags() {
    let plan = assert_server("sglang-h200-prefix", &[SGLANG_H200]);
    assert_prefix_cached("sglang-h200-prefix", &plan);
    let plan = assert_server("sglang-mi300-prefix", &[SGLANG_MI300]);
    assert_prefix_cached("sglang-mi300-prefix", &plan);
    let env = env_of(&plan.deployments[0].roles[0].instances[0]);
    assert_eq!(env["MODEL_ID"], "deepseek-ai/DeepSeek-R1");
    assert_eq!(env["HSA_NO_SCRATCH_RECLAIM"], "1");
}

#[test]
fn output_length_sweeps_render_the_seed_flags() {
    for (task, commands, image) in [
        (
            "sglang-mi300-output-length",
            &[SGLANG_MI300][..],
            "rocm/sglang-staging:20250212",
        ),
        (
            "vllm-mi300-output-length",
            &[
                "vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 8 --trust-remote-code --max-model-len 32768",
            ][..],
            "rocm/vllm-dev:vllm-ds3-staging-0217",
        ),
        (
            "vllm-h200-output-length",
            &[
                "pip uninstall -y vllm",
                "pip install vllm --pre --extra-index-url https://wheels.vllm.ai/nightly",
                "vllm serve deepseek-ai/DeepSeek-R1 --trust-remote-code --tensor-parallel-size 8",
            ][..],
            "vllm/vllm-openai:v0.7.3",
        ),
        (
            "trtllm-h200-output-length",
            &[
                "git lfs install",
                "git clone https://huggingface.co/deepseek-ai/DeepSeek-R1 deepseek",
                "trtllm-serve --backend pytorch --max_batch_size $MAX_BATCH_SIZE --max_num_tokens $MAX_NUM_TOKENS --max_seq_len $MAX_SEQ_LENGTH --tp_size $DSTACK_GPUS_NUM --ep_size 4 --pp_size 1 deepseek",
            ][..],
            "tensorrt-llm:9b931c0f6305",
        ),
    ] {
        let plan = assert_server(task, commands);
        let role = &plan.deployments[0].roles[0];
        assert_eq!(role.image.as_deref(), Some(image), "{task}");
        // The study: 3200 in, concurrency 128, output 1600/3200/6400, 500 prompts.
        let lengths: Vec<(u32, u32, Option<u32>)> = plan.deployments[0]
            .points
            .iter()
            .map(|p| match p.load.dataset {
                DatasetSpec::Random {
                    input_len,
                    output_len,
                    ..
                } => (input_len, output_len, p.load.shape.max_concurrency),
                ref other => panic!("{task}: {other:?}"),
            })
            .collect();
        assert_eq!(
            lengths,
            [1600, 3200, 6400].map(|o| (3200, o, Some(128))),
            "{task}"
        );
        for p in &plan.deployments[0].points {
            assert_eq!(p.load.shape.limit, Limit::Requests(500), "{task}");
        }
    }
}

/// The study's offline points: (num_prompts, output_len).
const OFFLINE_POINTS: &[(u32, u32)] = &[
    (32, 800),
    (64, 800),
    (128, 800),
    (256, 800),
    (512, 800),
    (1024, 800),
    (256, 1600),
    (512, 1600),
    (1024, 1600),
    (256, 3200),
    (512, 3200),
    (1024, 3200),
];

/// Every point runs `command(num_prompts, output_len)` in the entry role's container.
fn assert_offline(task: &str, plan: &Plan, command: impl Fn(u32, u32) -> String) {
    assert_eq!(
        plan.deployments.len(),
        1,
        "{task}: one deployment for the sweep"
    );
    let points = &plan.deployments[0].points;
    let got: Vec<(u32, u32)> = points
        .iter()
        .map(|p| {
            let n = p.axes["num_prompts"].as_u64().unwrap() as u32;
            let o = p.axes["output_len"].as_u64().unwrap() as u32;
            (n, o)
        })
        .collect();
    assert_eq!(got, OFFLINE_POINTS, "{task}");
    let text = plan_text(task);
    for (p, (n, o)) in points.iter().zip(OFFLINE_POINTS) {
        let ext = p.external.as_ref().expect("an external command");
        let want = command(*n, *o);
        assert_eq!(ext.command, want, "{task} {}", p.id);
        assert_eq!(
            ext.result_file.as_deref(),
            Some(format!("/tmp/throughput-{n}-{o}.json").as_str()),
            "{task}"
        );
        assert_eq!(ext.role, plan.deployments[0].entry_role, "{task}");
        assert!(text.contains(&want), "{task}: {want}\n{text}");
    }
}

#[test]
fn offline_sweeps_render_the_seed_benchmark_flags() {
    for (task, backend, port) in [
        ("sglang-h200-offline", "sglang", 30000),
        ("sglang-mi300-offline", "sglang", 30000),
        ("vllm-mi300-offline", "vllm", 8000),
    ] {
        let plan = assert_server(
            task,
            &[
                "git clone --depth 1 https://github.com/dstackai/benchmarks /workspace/benchmarks",
                &format!("exec python3 -m http.server {port}"),
            ],
        );
        assert_offline(task, &plan, |n, o| {
            format!(
                "cd /workspace/benchmarks/Deepseek-R1 && python benchmark_throughput.py --backend {backend} \
                 --model deepseek-ai/DeepSeek-R1 --input-len=3200 --output-len={o} \
                 --tensor-parallel-size=8 --max-model-len=32768 --num-prompts={n} \
                 --output-json /tmp/throughput-{n}-{o}.json"
            )
        });
    }
}

/// The seed's `build-deepseek-r1-engine` task: its env and commands, unchanged.
const BUILD_ENV: &[(&str, &str)] = &[
    (
        "MODEL_REPO",
        "https://huggingface.co/deepseek-ai/DeepSeek-R1",
    ),
    ("MAX_SEQ_LEN", "128000"),
    ("MAX_INPUT_LEN", "64000"),
    ("MAX_NUM_TOKENS", "16384"),
    ("MAX_BATCH_SIZE", "2048"),
    ("MODEL_DOWNLOAD_DIR", "/root/.cache/DeepSeek-R1"),
    ("ENGINE_DIR", "/Deepseek-R1-Engine"),
    ("TOKENIZER_DIR", "/root/.cache/DeepSeek-R1"),
    ("MODEL_FOLDER", "/triton_model_repo"),
    (
        "CHECK_POINT_DIR",
        "/workflow/TensorRT-LLM/examples/deepseek_v3/deepseek-ckpt",
    ),
    ("TRITON_MAX_BATCH_SIZE", "1"),
    ("INSTANCE_COUNT", "1"),
    ("MAX_QUEUE_DELAY_MS", "0"),
    ("MAX_QUEUE_SIZE", "0"),
    (
        "FILL_TEMPLATE_SCRIPT",
        "/tensorrtllm_backend/tools/fill_template.py",
    ),
    ("DECOUPLED_MODE", "true"),
];

#[test]
fn trtllm_offline_builds_the_engine_first_then_runs_the_seed_benchmark() {
    let task = "trtllm-h200-offline";
    let plan = plan_of(task);
    let dep = &plan.deployments[0];
    let names: Vec<&str> = dep.roles.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["build", "bench"], "the build role starts first");
    assert_eq!(dep.entry_role, "bench");
    let build = &dep.roles[0];
    assert_eq!(build.image.as_deref(), Some("tensorrt-llm:deepseek"));
    let seed_build = [
        "git clone --branch deepseek --single-branch https://github.com/NVIDIA/TensorRT-LLM.git",
        "git clone \"$MODEL_REPO\" \"$MODEL_DOWNLOAD_DIR\"",
        "cd TensorRT-LLM/examples/deepseek_v3",
        "python3 convert_checkpoint.py --model_dir $TOKENIZER_DIR --output_dir $CHECK_POINT_DIR --dtype bfloat16 --tp_size $DSTACK_GPUS_NUM",
        "trtllm-build --checkpoint_dir $CHECK_POINT_DIR --gemm_plugin bfloat16 --output_dir $ENGINE_DIR --max_seq_len $MAX_SEQ_LEN --max_input_len $MAX_INPUT_LEN --max_batch_size $MAX_BATCH_SIZE --gpt_attention_plugin bfloat16 --use_paged_context_fmha enable",
    ];
    let inst = &build.instances[0];
    assert_eq!(inst.commands[..seed_build.len()], seed_build);
    // Ready (TCP) only once the last build command has finished.
    assert_eq!(
        inst.commands[seed_build.len()..],
        [format!("exec python3 -m http.server {}", inst.port)]
    );
    assert!(build.readiness.http.is_none());
    let env = env_of(inst);
    for (k, v) in BUILD_ENV {
        assert_eq!(env.get(k), Some(v), "build env {k}");
    }
    assert_eq!(env["DSTACK_GPUS_NUM"], "8");
    // Engine and model reach the benchmark container through the same volumes.
    let bench = &dep.roles[1];
    assert_eq!(bench.volumes, build.volumes);
    let targets: Vec<&str> = bench.volumes.iter().map(|v| v.container.as_str()).collect();
    assert_eq!(targets, ["/root/.cache", "/Deepseek-R1-Engine"]);
    let text = plan_text(task);
    for c in seed_build {
        assert!(text.contains(&format!("$ {c}\n")), "{c}\n{text}");
    }
    assert_offline(task, &plan, |n, o| {
        format!(
            "cd /workspace/benchmarks/Deepseek-R1 && python benchmark_throughput_trt.py \
             --model /Deepseek-R1-Engine --tokenizer /root/.cache/DeepSeek-R1 \
             --input-len=3200 --output-len={o} --tensor-parallel-size=8 \
             --max-model-len=32768 --num-prompts={n} \
             --output-json /tmp/throughput-{n}-{o}.json"
        )
    });
    // The script's JSON has no output rate: it is read from its stdout line.
    let ext = dep.points[0].external.as_ref().unwrap();
    let rule = serde_json::to_value(&ext.metrics).unwrap();
    assert!(
        rule.to_string()
            .contains("Output tokens: ([0-9.]+) tokens/s"),
        "{rule}"
    );
}

#[test]
fn every_seed_002_task_file_is_present() {
    // Online, output length, prefix cached and offline, per engine and GPU, as the study ran
    // them (vLLM had no prefix caching on MI300X; TensorRT-LLM ran on H200 only and has no
    // prefix-cached run).
    for task in [
        "sglang-h200",
        "sglang-h200-output-length",
        "sglang-h200-prefix",
        "sglang-h200-offline",
        "sglang-mi300",
        "sglang-mi300-output-length",
        "sglang-mi300-prefix",
        "sglang-mi300-offline",
        "vllm-h200",
        "vllm-h200-output-length",
        "vllm-h200-prefix",
        "vllm-h200-offline",
        "vllm-mi300",
        "vllm-mi300-output-length",
        "vllm-mi300-offline",
        "trtllm-h200",
        "trtllm-h200-output-length",
        "trtllm-h200-offline",
    ] {
        assert!(
            Path::new(&common::repo().join(format!("tasks/{task}.yaml"))).is_file(),
            "{task}"
        );
        plan_of(task);
    }
}
