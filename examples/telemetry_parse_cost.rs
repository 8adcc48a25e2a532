//! The CPU cost of reading GPU telemetry (issue 26): parses the real H200 nvidia-smi loop
//! recording many times and prints the cost per sample line and, at one line per GPU every
//! 500 ms, the share of one core it takes for 8 GPUs. Run:
//! `cargo run --release --example telemetry_parse_cost`.

use std::time::Instant;

use orchestrate::telemetry::nvidia_smi::{Query, parse_timestamp};

const LOOP: &str = include_str!("../tests/fixtures/telemetry/nvidia-smi-h200-loop-500ms.csv");
const FIELDS: &str = "timestamp,index,uuid,name,pci.bus_id,power.draw,power.draw.instant,power.draw.average,power.limit,enforced.power.limit,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,clocks.sm,clocks.max.sm,clocks_event_reasons.active";

fn main() {
    let query = Query::new(&FIELDS.split(',').collect::<Vec<_>>());
    let origin = parse_timestamp("2026/11/26 14:07:00.000").unwrap_or(0);
    let rounds = 20_000;
    let mut lines = 0usize;
    let mut watts = 0.0;
    let start = Instant::now();
    for _ in 0..rounds {
        let (samples, errors) = query.parse_output(LOOP, "h200", origin);
        lines += samples.len() + errors.len();
        watts += samples.iter().filter_map(|s| s.power_w).sum::<f64>();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let per_line_us = elapsed / lines as f64 * 1e6;
    // 8 GPUs, one line each every 500 ms: 16 lines a second.
    let share_8_gpus = per_line_us * 16.0 / 1e6 * 100.0;
    println!("lines parsed: {lines} in {elapsed:.3} s (checksum {watts:.0} W)");
    println!("parse cost: {per_line_us:.2} us per sample line");
    println!("at 500 ms, 8 GPUs: {share_8_gpus:.5} % of one core");
}
