//! The "Serving Benchmark Result" text block, in the layout vllm bench serve prints (and the MoAI
//! seed's logs show), with the prefix cache's hit rates and the time to first output token of
//! reasoning models when there are any, conversations' per-turn figures, a second block for the trimmed window and a client
//! health line.

use std::fmt::Write;

use super::stats::percentile_key;
use super::summary::Summary;

/// One `label    value` line of a result block (also the capacity search's).
pub fn result_line(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{:<40}{:<10}", label, value);
}

fn get(s: &serde_json::Map<String, serde_json::Value>, key: &str) -> f64 {
    s.get(key)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(0.0)
}

fn latency_block(
    out: &mut String,
    lat: &serde_json::Map<String, serde_json::Value>,
    percentiles: &[f64],
    reasoning: bool,
) {
    for (name, header, title) in [
        ("ttft", "Time to First Token", "TTFT"),
        ("ttfot", "Time to First Output Token", "TTFOT"),
        ("tpot", "Time per Output Token (excl. 1st token)", "TPOT"),
        ("itl", "Inter-token Latency", "ITL"),
        ("icl", "Inter-chunk Latency", "ICL"),
        ("e2el", "End-to-end Latency", "E2EL"),
    ] {
        // TTFOT differs from TTFT only for reasoning models: shown when some request reasoned.
        if name == "ttfot" && !reasoning {
            continue;
        }
        let _ = writeln!(out, "{:-^50}", header);
        result_line(
            out,
            &format!("Mean {title} (ms):"),
            format!("{:.2}", get(lat, &format!("mean_{name}_ms"))),
        );
        result_line(
            out,
            &format!("Median {title} (ms):"),
            format!("{:.2}", get(lat, &format!("median_{name}_ms"))),
        );
        for p in percentiles {
            let key = percentile_key(*p);
            result_line(
                out,
                &format!("P{} {title} (ms):", &key[1..]),
                format!("{:.2}", get(lat, &format!("{key}_{name}_ms"))),
            );
        }
    }
}

/// The prefix cache's hit rates, when some is known.
fn prefix_block(out: &mut String, s: &Summary) {
    let rates = [
        ("Prefix cache hit rate (client):", s.prefix_cache_hit_rate),
        (
            "Prefix cache hit rate (server):",
            s.server_prefix_cache_hit_rate,
        ),
        (
            "Prefix cache hit rate (ideal):",
            s.ideal_prefix_cache_hit_rate,
        ),
    ];
    if rates.iter().all(|(_, r)| r.is_none()) {
        return;
    }
    let _ = writeln!(out, "{:-^50}", "Prefix Cache");
    for (label, rate) in rates {
        if let Some(r) = rate {
            result_line(out, label, format!("{:.2}%", r * 100.0));
        }
    }
    if let Some(x) = s.prefix_cache_hit_vs_ideal {
        result_line(out, "Achieved / ideal:", format!("{x:.3}"));
    }
}

/// Conversations: sessions, and TTFT and cache hit rate per turn index.
fn sessions_block(out: &mut String, s: &Summary) {
    let Some(c) = &s.sessions else { return };
    let _ = writeln!(out, "{:-^50}", "Conversations");
    result_line(
        out,
        "Sessions (completed):",
        format!("{} ({})", c.sessions, c.completed_sessions),
    );
    result_line(
        out,
        "Mean turns completed:",
        format!("{:.2}", c.mean_turns_completed),
    );
    result_line(out, "Peak concurrent sessions:", c.max_concurrent_sessions);
    result_line(
        out,
        "Mean session duration (ms):",
        format!("{:.2}", get(&c.duration, "mean_session_duration_ms")),
    );
    for t in &c.turns {
        let hit = t
            .prefix_cache_hit_rate
            .map_or(String::new(), |r| format!(", cache {:.1}%", r * 100.0));
        result_line(
            out,
            &format!("Turn {} mean TTFT (ms):", t.turn),
            format!(
                "{:.2} ({} req, {:.0} in{hit})",
                t.mean_ttft_ms, t.completed, t.mean_input_tokens
            ),
        );
    }
}

/// The text block for one summary.
pub fn render_text(s: &Summary, percentiles: &[f64], client_limited: Option<&[String]>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:=^50}", " Serving Benchmark Result ");
    result_line(&mut out, "Successful requests:", s.completed);
    result_line(&mut out, "Failed requests:", s.failed);
    result_line(
        &mut out,
        "Benchmark duration (s):",
        format!("{:.2}", s.duration),
    );
    result_line(&mut out, "Total input tokens:", s.total_input_tokens);
    result_line(&mut out, "Total generated tokens:", s.total_output_tokens);
    result_line(
        &mut out,
        "Request throughput (req/s):",
        format!("{:.2}", s.request_throughput),
    );
    if let Some(g) = s.request_goodput {
        result_line(&mut out, "Request goodput (req/s):", format!("{g:.2}"));
    }
    result_line(
        &mut out,
        "Output token throughput (tok/s):",
        format!("{:.2}", s.output_throughput),
    );
    result_line(
        &mut out,
        "Peak output token throughput (tok/s):",
        format!("{:.2}", s.max_output_tokens_per_s),
    );
    result_line(
        &mut out,
        "Peak concurrent requests:",
        s.max_concurrent_requests,
    );
    result_line(
        &mut out,
        "Total Token throughput (tok/s):",
        format!("{:.2}", s.total_token_throughput),
    );
    result_line(
        &mut out,
        "Mean tokens per chunk:",
        format!("{:.2}", s.mean_tokens_per_chunk),
    );
    if s.reasoning_requests > 0 {
        result_line(&mut out, "Requests that reasoned:", s.reasoning_requests);
        if let Some(n) = s.total_reasoning_tokens {
            result_line(&mut out, "Total reasoning tokens:", n);
        }
    }
    prefix_block(&mut out, s);
    sessions_block(&mut out, s);
    let reasoning = s.reasoning_requests > 0;
    latency_block(&mut out, &s.latency, percentiles, reasoning);
    if let Some(t) = &s.trimmed {
        let _ = writeln!(
            out,
            "{:=^50}",
            format!(
                " After warmup {}s, before cooldown {}s ",
                t.warmup_s, t.cooldown_s
            )
        );
        result_line(
            &mut out,
            "Window (s):",
            format!("{:.2}-{:.2}", t.window_start_s, t.window_end_s),
        );
        result_line(
            &mut out,
            "Requests started / completed:",
            format!("{} / {}", t.requests_started, t.requests_completed),
        );
        result_line(&mut out, "Output tokens in window:", t.output_tokens);
        result_line(
            &mut out,
            "Output token throughput (tok/s):",
            format!("{:.2}", t.output_throughput),
        );
        latency_block(&mut out, &t.latency, percentiles, reasoning);
    }
    if s.failed > 0 {
        let _ = writeln!(out, "{:-^50}", "Failures");
        for (reason, n) in &s.errors {
            let _ = writeln!(out, "{n:>8}  {reason}");
        }
    }
    if let Some(reasons) = client_limited
        && !reasons.is_empty()
    {
        let _ = writeln!(out, "{:-^50}", "CLIENT-LIMITED: figures may be wrong");
        for r in reasons {
            let _ = writeln!(out, "  {r}");
        }
    }
    let _ = writeln!(out, "{}", "=".repeat(50));
    out
}

/// The server's own figures for the window (from its /metrics), beside the client's.
pub fn render_server(w: &crate::client::ServerWindow) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:-^50}",
        format!(" Server /metrics {:.1}s-{:.1}s ", w.from_s, w.to_s)
    );
    result_line(
        &mut out,
        "Server output throughput (tok/s):",
        format!("{:.2}", w.output_throughput),
    );
    for (name, h) in [("TTFT", &w.ttft), ("ITL", &w.itl), ("E2EL", &w.e2el)] {
        if let Some(h) = h {
            result_line(
                &mut out,
                &format!("Server {name} mean/median/P99 (ms):"),
                format!("{:.2} / {:.2} / {:.2}", h.mean_ms, h.median_ms, h.p99_ms),
            );
        }
    }
    out
}
