//! `orchestrate mock-server`: flags -> `MockConfig`, bind, print `listening on http://ADDR`
//! to stderr, serve until SIGINT/SIGTERM (exit 0) or the configured crash (exit 1).
//! `--simulate ISL:OSL` prints the preset's predicted table instead of serving.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;

use super::{Exit, Failure, Outcome};
use crate::mock::{self, ClosedLoop, Curve, MockConfig, MockError, Preset, TokenCounter};
use crate::shutdown::Shutdown;
use crate::units::parse_duration;

/// Arguments of `orchestrate mock-server`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Presets:
  h20-vllm-tp16  vLLM TP16 on 2 x 8 H20 (DeepSeek-R1): TPOT ~30 ms at 1 stream -> ~87 ms at 128,
                 TTFT ~160 ms for 1,000 prompt tokens; max batch 256, 4096 batched tokens
  fixed          every step 20 ms whatever the batch, no prefill cost, no batch limit

Step time (ms) = decode(sequences in the step) + prefill(prompt tokens in the step), / --speed.
Curves are x:ms points, linearly interpolated: --decode-ms 1:30,128:80. See docs/mock-server.md.")]
pub struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one; the line on stderr tells which).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Latency preset: h20-vllm-tp16 or fixed.
    #[arg(long, default_value = "h20-vllm-tp16")]
    pub preset: String,
    /// Served model name (/v1/models); requests naming another model get 404.
    #[arg(long, default_value = "mock-model")]
    pub model: String,
    /// Divide every modelled time by this factor (2 = twice as fast).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Step time by batch size, as x:ms points (overrides the preset).
    #[arg(long, value_name = "CURVE")]
    pub decode_ms: Option<String>,
    /// Constant step time whatever the batch (shorthand for --decode-ms MS).
    #[arg(long, value_name = "MS", conflicts_with = "decode_ms")]
    pub itl_ms: Option<f64>,
    /// Extra step time by prompt tokens prefilled in the step, as x:ms points.
    #[arg(long, value_name = "CURVE")]
    pub prefill_ms: Option<String>,
    /// Most sequences running at once (vLLM --max-num-seqs); more wait.
    #[arg(long)]
    pub max_batch: Option<u32>,
    /// Token budget per step (vLLM --max-num-batched-tokens).
    #[arg(long)]
    pub max_num_batched_tokens: Option<u32>,
    /// Longest prompt + max_tokens accepted.
    #[arg(long)]
    pub max_model_len: Option<u32>,
    /// Output tokens per SSE chunk (the first token always goes alone).
    #[arg(long, default_value_t = 1)]
    pub tokens_per_chunk: u32,
    /// /health answers 503 (and requests 503) for this long after start: "30s", "500ms".
    #[arg(long, default_value = "0s")]
    pub startup_delay: String,
    /// Fraction of generation requests answered with HTTP 500 (seeded).
    #[arg(long, default_value_t = 0.0)]
    pub error_rate: f64,
    /// Serve N generation requests, then exit with code 1 when the next one arrives.
    #[arg(long, value_name = "N")]
    pub crash_after: Option<u64>,
    /// Write a JSON line per request with the send time of every chunk to this file.
    #[arg(long, value_name = "PATH")]
    pub ground_truth: Option<PathBuf>,
    /// Count prompt tokens with this HF tokenizer.json (default: whitespace-separated words).
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
    /// Seed for error injection, output lengths without ignore_eos, and the text.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print the latency model's predicted table for closed-loop load at ISL:OSL (vLLM
    /// bench serve --max-concurrency 1..128, ignore_eos) to stdout and exit.
    #[arg(long, value_name = "ISL:OSL")]
    pub simulate: Option<String>,
}

pub fn run(args: Args) -> Outcome {
    let config = config(&args).map_err(Failure::bad_input)?;
    if let Some(lengths) = &args.simulate {
        return simulate_table(&config, lengths);
    }
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .or_else(|_| {
            std::net::ToSocketAddrs::to_socket_addrs(&(args.host.as_str(), args.port))
                .ok()
                .and_then(|mut a| a.next())
                .ok_or(())
        })
        .map_err(|()| {
            Failure::bad_input(anyhow::anyhow!(
                "--host `{}` is not an address or resolvable host name",
                args.host
            ))
        })?;
    let rt = super::runtime()?;
    rt.block_on(async move {
        let shutdown = Shutdown::new();
        shutdown.listen_for_signals();
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("failed to listen on {addr}"))?;
        let local = listener
            .local_addr()
            .context("failed to read the bound address")?;
        say(&format!("listening on http://{local}"));
        match mock::serve(config, listener, shutdown.token()).await {
            Ok(()) => Ok(Exit::Ok),
            Err(e @ MockError::Crashed { .. }) => {
                say(&format!("mock server: {e}"));
                Ok(Exit::RunFailed)
            }
            Err(e @ MockError::Config(_)) => Err(Failure::bad_input(e)),
            Err(e) => Err(Failure::run_failed(
                anyhow::Error::new(e).context("mock server failed"),
            )),
        }
    })
}

/// One line to stderr; a closed stderr is not worth a panic.
fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn config(args: &Args) -> anyhow::Result<MockConfig> {
    let preset: Preset = args.preset.parse().context("--preset")?;
    let mut c = MockConfig::new(preset);
    c.model.clone_from(&args.model);
    c.speed = args.speed;
    if let Some(curve) = &args.decode_ms {
        c.latency.decode = curve.parse().context("--decode-ms")?;
    }
    if let Some(ms) = args.itl_ms {
        anyhow::ensure!(
            ms.is_finite() && ms >= 0.0,
            "--itl-ms {ms} must be a number of ms >= 0"
        );
        c.latency.decode = Curve::constant(ms);
    }
    if let Some(curve) = &args.prefill_ms {
        c.latency.prefill = curve.parse().context("--prefill-ms")?;
    }
    if let Some(n) = args.max_batch {
        c.latency.max_batch = n;
    }
    if let Some(n) = args.max_num_batched_tokens {
        c.latency.max_num_batched_tokens = n;
    }
    if let Some(n) = args.max_model_len {
        c.max_model_len = n;
    }
    c.tokens_per_chunk = args.tokens_per_chunk;
    c.startup_delay = parse_duration(&args.startup_delay).context("--startup-delay")?;
    c.error_rate = args.error_rate;
    c.crash_after = args.crash_after;
    c.ground_truth.clone_from(&args.ground_truth);
    if let Some(path) = &args.tokenizer {
        c.tokenizer = TokenCounter::from_file(path).context("--tokenizer")?;
    }
    c.seed = args.seed;
    c.validate()?;
    Ok(c)
}

fn simulate_table(config: &MockConfig, lengths: &str) -> Outcome {
    let parsed = lengths
        .split_once(':')
        .and_then(|(i, o)| Some((i.trim().parse::<u32>().ok()?, o.trim().parse::<u32>().ok()?)))
        .filter(|&(_, o)| o >= 1);
    let Some((isl, osl)) = parsed else {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "--simulate `{lengths}` must be ISL:OSL token counts, like 1000:1000"
        )));
    };
    println!("| Concurrency | Output tok/s | Mean TTFT (ms) | Mean TPOT (ms) | Mean E2EL (ms) |");
    println!("|---:|---:|---:|---:|---:|");
    for c in [1u32, 2, 4, 8, 16, 32, 64, 128] {
        let s = mock::simulate(
            &config.latency,
            ClosedLoop {
                concurrency: c,
                requests: c * 4,
                input_tokens: isl,
                output_tokens: osl,
            },
        );
        let k = config.speed;
        println!(
            "| {c} | {:.1} | {:.1} | {:.2} | {:.0} |",
            s.output_throughput * k,
            s.mean_ttft_ms / k,
            s.mean_tpot_ms / k,
            s.mean_e2el_ms / k
        );
    }
    Ok(Exit::Ok)
}
