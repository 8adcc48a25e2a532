//! Several processes per node over SSH (`procs`): one replica of 2 processes on host `h1`,
//! each a mock server on a port of its own with its own rank, started through its own SSH
//! channel, both probed ready; nothing is left after the run. (GPU pinning is the same
//! environment as for local processes, tested in per_node.rs: the pre-flight here would look
//! for the GPUs with nvidia-smi, which this machine has not.)

use super::fixture::trusted_host;
use super::run::{assert_completed, manifest, run, stderr};
use crate::common::{latest, repo};

#[test]
fn each_process_of_a_remote_node_runs_with_its_own_port_and_rank() {
    let Some((_keys, _sshd, dir, hosts)) = trusted_host("127.0.0.1") else {
        return;
    };
    let mark = super::marker("procs");
    let task = dir.path().join("ssh-procs.yaml");
    std::fs::write(
        &task,
        format!(
            r#"name: ssh-procs
backend: vllm
model: {mark}
hosts: [h1]
procs: 2
port: auto
commands:
  - echo "rank {{{{ rank }}}} of {{{{ world_size }}}} on {{{{ host }}}}"
  - exec {{{{ orchestrate }}}} mock-server --host {{{{ host_address }}}} --port {{{{ port }}}} --model {mark} --preset fixed --itl-ms 2
readiness: {{http: /health, timeout: 20s}}
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 4}}
  tokenizer: {tokenizer}
  ignore_eos: true
  num_prompts: 4
"#,
            tokenizer = repo().join("data/tokenizer/tokenizer.json").display(),
        ),
    )
    .unwrap();
    let out = run(dir.path(), &hosts, &[&task], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = manifest(dir.path(), "ssh-procs");
    assert_completed(&m, 1);
    let run_dir = latest(&dir.path().join("results"), "ssh-procs");
    let instances = &m["deployments"][0]["instances"];
    for proc in 0..2 {
        let log = std::fs::read_to_string(run_dir.join(format!("logs/server-r0-n0-p{proc}.log")))
            .unwrap();
        assert!(log.contains(&format!("rank {proc} of 2 on h1")), "{log}");
        assert!(log.contains("listening on"), "{log}");
        let i = &instances[format!("server-{proc}")];
        assert_eq!(i["host"], "h1", "{i:#}");
        assert!(i["ready_after_s"].is_number(), "{i:#}");
    }
    let ports: Vec<u64> = (0..2)
        .map(|n| {
            m["resolved"]["deployments"]["d1"]["roles"][0]["instances"][n]["port"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_ne!(ports[0], ports[1]);
    assert!(
        super::run::gone_within(&mark, 5),
        "a remote process outlived the run"
    );
}
