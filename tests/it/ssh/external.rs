//! `benchmark.external` on a remote host: the command runs next to the server over SSH
//! (`where: host`), through the same reach wrapper `run --hosts` puts around every remote
//! instance, and its output is parsed per point.

use super::fixture::trusted_host;
use super::run::{assert_completed, gone, manifest, run, stderr};
use crate::common::{json, latest, repo};

#[test]
fn an_external_command_runs_on_the_servers_remote_host() {
    let Some((_keys, sshd, dir, hosts)) = trusted_host("127.0.0.1") else {
        return;
    };
    let mark = super::marker("ext");
    // The command proves where it ran: it prints the remote shell's SSH_CONNECTION port.
    let task = dir.path().join("remote-ext.yaml");
    std::fs::write(
        &task,
        format!(
            r#"name: remote-ext
backend: vllm
model: {mark}
port: auto
hosts: [h1]
commands:
  - "{{{{ orchestrate }}}} mock-server --host {{{{ host_address }}}} --port {{{{ port }}}} --model {mark} --preset fixed --itl-ms 5"
readiness: {{http: /health, timeout: 20s}}
benchmark:
  tokenizer: {tokenizer}
  external:
    command: >-
      echo "ssh port ${{SSH_CONNECTION##* }}";
      echo "Throughput: {{{{ batch_size }}}}.00 requests/s, 300.00 total tokens/s, 200.00 output tokens/s"
    where: host
    preset: vllm-throughput
  matrix:
    batch_size: [3, 5]
"#,
            tokenizer = repo().join("data/tokenizer/tokenizer.json").display(),
        ),
    )
    .unwrap();
    let out = run(dir.path(), &hosts, &[&task], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = manifest(dir.path(), "remote-ext");
    assert_completed(&m, 2);
    let run_dir = latest(&dir.path().join("results"), "remote-ext");
    for (batch, rps) in [(3, 3.0), (5, 5.0)] {
        let point = run_dir.join(format!("points/batch_size={batch}"));
        let summary = json(&point.join("summary.json"));
        assert_eq!(summary["request_throughput"], rps, "{summary:#}");
        let log = std::fs::read_to_string(point.join("external.log")).unwrap();
        assert!(
            log.contains(&format!("ssh port {}", sshd.port)),
            "the command ran over SSH on h1: {log}"
        );
    }
    assert!(gone(&mark), "a remote process outlived the run");
}
