//! Compares what `orchestrate bench` measured with what the mock server says it sent.
//!
//! `client_accuracy REQUESTS.jsonl TRUTH.jsonl RESULT.json` joins the client's per-request
//! records (`--save-result` writes them next to the result JSON) with the mock's
//! `--ground-truth` log on the `X-Request-Id` header, and prints one line of figures:
//! - TTFT error: client TTFT - true TTFT, where the true TTFT runs from the client's own send
//!   time to the server handing the first chunk to its socket (both clocks are this host's;
//!   the client's run start is in the request id, `orc<unix us, hex>-<index>`). This is the
//!   client's measurement error alone;
//! - TTFT vs server: client TTFT - the server's own TTFT (first chunk - request headers read),
//!   which also holds the time the request took to reach the server and be read (`req read`);
//! - per-gap ITL error (client gap - server gap for the same two chunks), client vs server p99
//!   ITL, peak concurrency both sides, and the client's CPU per token and memory per stream
//!   from the result's self-check. Used by scripts/bench-client.sh.

use std::collections::HashMap;

use serde_json::Value;

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = p / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}

fn lines(path: &str) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn peak(mut edges: Vec<(u64, i64)>) -> i64 {
    edges.sort_unstable();
    let (mut now, mut best) = (0, 0);
    for (_, d) in edges {
        now += d;
        best = best.max(now);
    }
    best
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: client_accuracy REQUESTS.jsonl TRUTH.jsonl RESULT.json");
        std::process::exit(2);
    }
    let client = lines(&args[1]);
    let truth = lines(&args[2]);
    let result: Value = serde_json::from_str(&std::fs::read_to_string(&args[3]).expect("result"))
        .expect("result JSON");
    let by_id: HashMap<u64, &Value> = truth
        .iter()
        .filter_map(|t| {
            let id = t["x_request_id"].as_str()?;
            Some((id.rsplit('-').next()?.parse().ok()?, t))
        })
        .collect();
    let (mut ttft_err, mut itl_err, mut itl_client, mut itl_truth) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut ttft_vs_server, mut request_read) = (Vec::new(), Vec::new());
    // The client's run start (Unix us), from the request ids.
    let run_start_us = truth.iter().find_map(|t| {
        let id = t["x_request_id"].as_str()?;
        let tag = id.strip_prefix("orc")?.split('-').next()?;
        u64::from_str_radix(tag, 16).ok()
    });
    let mut joined = 0;
    for r in &client {
        if r["outcome"]["status"] != "completed" {
            continue;
        }
        let Some(t) = r["index"].as_u64().and_then(|i| by_id.get(&i)) else {
            continue;
        };
        let cc: Vec<f64> = r["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c[0].as_f64().unwrap() / 1e3)
            .collect();
        let arrival = t["arrival_ns"].as_u64().unwrap() as f64;
        let tc: Vec<f64> = t["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c[0].as_u64().unwrap() as f64 - arrival) / 1e6)
            .collect();
        if cc.is_empty() || cc.len() != tc.len() {
            continue;
        }
        joined += 1;
        ttft_vs_server.push(cc[0] - tc[0]);
        if let (Some(start), Some(sent)) = (run_start_us, r["sent_us"].as_u64()) {
            // Both in ms since the client sent the request.
            let sent_ns = (start + sent) as f64 * 1e3;
            let first_send = t["chunks"][0][0].as_u64().unwrap() as f64;
            ttft_err.push(cc[0] - (first_send - sent_ns) / 1e6);
            request_read.push((arrival - sent_ns) / 1e6);
        }
        for i in 1..cc.len() {
            let (a, b) = (cc[i] - cc[i - 1], tc[i] - tc[i - 1]);
            itl_err.push(a - b);
            itl_client.push(a);
            itl_truth.push(b);
        }
    }
    let truth_peak = peak(
        truth
            .iter()
            .filter_map(|t| Some((t["arrival_ns"].as_u64()?, t["end_ns"].as_u64()?)))
            .flat_map(|(a, e)| [(a, 1), (e, -1)])
            .collect(),
    );
    let check = &result["self_check"];
    let mut abs_itl: Vec<f64> = itl_err.iter().map(|x: &f64| x.abs()).collect();
    println!(
        "requests {} joined {} | TTFT err ms median {:.3} p99 {:.3} | TTFT vs server ms median {:.3} p99 {:.3}, req read median {:.3} p99 {:.3} | ITL err ms median {:.3} p99 |err| {:.3} | p99 ITL client {:.3} truth {:.3} | peak conc client {} truth {} | out tok/s {:.0} | cpu us/token {:.2} busy {:.0}% | peak RSS {} MiB, {:.1} KiB/stream | client_limited {}",
        client.len(),
        joined,
        pct(&mut ttft_err.clone(), 50.0),
        pct(&mut ttft_err, 99.0),
        pct(&mut ttft_vs_server.clone(), 50.0),
        pct(&mut ttft_vs_server, 99.0),
        pct(&mut request_read.clone(), 50.0),
        pct(&mut request_read, 99.0),
        pct(&mut itl_err, 50.0),
        pct(&mut abs_itl, 99.0),
        pct(&mut itl_client, 99.0),
        pct(&mut itl_truth, 99.0),
        result["max_concurrent_requests"],
        truth_peak,
        result["output_throughput"].as_f64().unwrap_or(0.0),
        check["cpu_us_per_output_token"].as_f64().unwrap_or(0.0),
        check["cpu_busy_fraction"].as_f64().unwrap_or(0.0) * 100.0,
        check["peak_rss_kib"].as_u64().unwrap_or(0) / 1024,
        check["kib_per_stream"].as_f64().unwrap_or(0.0),
        result["client_limited"],
    );
}
