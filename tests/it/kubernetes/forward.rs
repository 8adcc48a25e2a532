//! Reaching pods through the API server (`client.reach: tunnel` on a Kubernetes cluster): the
//! pod's readiness probe and every request of the load go through a local port-forward (one
//! WebSocket stream per connection), while other pods would still get the pod's IP. And the
//! bench comparing that with reaching the pod directly (ignored: run by hand, prints figures;
//! docs/kubernetes.md records them):
//!
//! `cargo test --test it kubernetes_streams_direct_against_port_forward -- --ignored --nocapture`
//! (`K8S_STREAMS`, default 10000: concurrent streams, one request each).

use std::time::Instant;

use super::{cluster, run, work_with};
use crate::common::{json, latest};

#[test]
fn kubernetes_pod_reached_through_port_forwarding_serves_the_load() {
    let Some((c, _turn)) = cluster() else { return };
    let name = "k8s-forward";
    let (work, task, hosts) = work_with(
        c,
        name,
        "client: {reach: tunnel}\n",
        "",
        "  dataset: {kind: random, input_len: 16, output_len: 8}\n  num_prompts: 6\n  concurrency: 3\n",
    );
    let results = work.path().join("results");
    let out = run(&task, &hosts, &results, &work.path().join("state"));
    assert!(out.status.success(), "{}", super::stderr(&out));
    let run_dir = latest(&results, name);
    let m = json(&run_dir.join("manifest.json"));
    assert_eq!(m["status"], "completed", "{m:#}");
    let server = &m["deployments"][0]["instances"]["server-0"];
    let reach = &server["reach"];
    assert_eq!(reach["mode"], "port_forward", "{server:#}");
    let local = reach["local"].as_str().unwrap();
    assert!(local.starts_with("127.0.0.1:"), "{reach}");
    assert_ne!(
        local.rsplit(':').next(),
        server["pod"]["port"]
            .as_u64()
            .map(|p| p.to_string())
            .as_deref(),
        "a port of this machine of its own, not the pod's"
    );
    let point = m["points"][0]["id"].as_str().unwrap();
    let s = json(&run_dir.join("points").join(point).join("summary.json"));
    assert_eq!(
        (s["completed"].as_u64(), s["failed"].as_u64()),
        (Some(6), Some(0)),
        "{s:#}"
    );
    c.assert_clean(name, "teardown left objects");
}

/// One point of `streams` concurrent streams (one request each, 32 tokens out) against one
/// mock pod, reached as `reach` says; the point's summary and the run's wall time.
fn streams_point(
    c: &super::Cluster,
    reach: &str,
    streams: u64,
) -> (serde_json::Value, std::time::Duration) {
    let name = format!("k8s-streams-{}", reach.replace('_', "-"));
    let load = format!(
        "  dataset: {{kind: random, input_len: 16, output_len: 32}}\n  num_prompts: {streams}\n  concurrency: {streams}\n  request_timeout: 300s\n"
    );
    let (work, task, hosts) = work_with(
        c,
        &name,
        &format!("client: {{reach: {reach}}}\n"),
        "",
        &load,
    );
    let results = work.path().join("results");
    let started = Instant::now();
    let out = run(&task, &hosts, &results, &work.path().join("state"));
    let wall = started.elapsed();
    let run_dir = latest(&results, &name);
    let m = json(&run_dir.join("manifest.json"));
    assert!(
        m["points"][0]["id"].is_string(),
        "{}\n{m:#}",
        super::stderr(&out)
    );
    let point = m["points"][0]["id"].as_str().unwrap();
    let s = json(&run_dir.join("points").join(point).join("summary.json"));
    (s, wall)
}

#[test]
#[ignore = "benchmark: prints figures"]
fn kubernetes_streams_direct_against_port_forward() {
    let Some((c, _turn)) = cluster() else { return };
    let streams: u64 = std::env::var("K8S_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    println!(
        "{streams} concurrent streams, one request each (16 in, 32 out), one mock pod (--speed 50)"
    );
    println!(
        "reach         completed  failed  duration_s  req/s    ttft_p50_ms  ttft_p99_ms  run_wall_s"
    );
    for reach in ["direct", "tunnel"] {
        let (s, wall) = streams_point(c, reach, streams);
        println!(
            "{:<13} {:>9}  {:>6}  {:>10.2}  {:>7.1}  {:>11.1}  {:>11.1}  {:>10.1}",
            if reach == "tunnel" {
                "port_forward"
            } else {
                reach
            },
            s["completed"],
            s["failed"],
            s["duration"].as_f64().unwrap_or(f64::NAN),
            s["request_throughput"].as_f64().unwrap_or(f64::NAN),
            s["median_ttft_ms"].as_f64().unwrap_or(f64::NAN),
            s["p99_ttft_ms"].as_f64().unwrap_or(f64::NAN),
            wall.as_secs_f64(),
        );
        if let Some(errors) = s.get("errors") {
            println!("  errors: {errors}");
        }
    }
}
