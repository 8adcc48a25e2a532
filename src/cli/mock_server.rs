//! `orchestrate mock-server`: flags -> `MockConfig`, bind, print `listening on http://ADDR`
//! to stderr, serve until SIGINT/SIGTERM (exit 0) or the configured crash (exit 1).
//! `--simulate ISL:OSL` prints the preset's predicted table instead of serving.
//! `--disaggregation prefill` also binds the bootstrap port (`bootstrap on http://ADDR`);
//! `--nnodes N` makes rank 0 a gang master (`gang master on ADDR`) and ranks > 0 headless
//! members that serve no HTTP (exit 1 when the gang breaks).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use orchestrate_mock::{
    self as mock, ClosedLoop, Curve, GangConfig, MockConfig, MockError, Preset, Role, Sockets,
    TokenCounter,
};

use super::{Exit, Failure, Outcome};
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
    /// Prefill/decode disaggregation role: none, prefill or decode (SGLang's
    /// --disaggregation-mode).
    #[arg(long, visible_alias = "disaggregation-mode", default_value = "none")]
    pub disaggregation: String,
    /// Prefill: port of the bootstrap server decode workers fetch KV from (SGLang's bootstrap
    /// port, vLLM's NIXL side channel); 0 picks a free one.
    #[arg(long, default_value_t = 8998)]
    pub disaggregation_bootstrap_port: u16,
    /// Decode: KV transfer time per prompt token, in ms (divided by --speed).
    #[arg(long, default_value_t = 0.01, value_name = "MS")]
    pub kv_transfer_ms_per_token: f64,
    /// Decode: how long to wait for a request's prefill before failing it.
    #[arg(long, default_value = "300s", value_name = "DUR")]
    pub kv_wait_timeout: String,
    /// Prefix cache capacity in tokens (LRU over whole blocks); 0 keeps no cache and reports
    /// no `cached_tokens`.
    #[arg(long, default_value_t = 0, value_name = "TOKENS")]
    pub prefix_cache_tokens: u64,
    /// Tokens per prefix cache block (vLLM's --block-size).
    #[arg(long, default_value_t = 16, value_name = "TOKENS")]
    pub block_size: u32,
    /// Chat answers begin with this many reasoning tokens, streamed as
    /// `delta.reasoning_content` and counted in `completion_tokens_details.reasoning_tokens`.
    #[arg(long, default_value_t = 0, value_name = "TOKENS")]
    pub reasoning_tokens: u32,
    /// Processes (nodes) this model instance spans; rank 0 serves HTTP.
    #[arg(long, default_value_t = 1)]
    pub nnodes: u32,
    /// This process's rank in the instance.
    #[arg(long, default_value_t = 0)]
    pub node_rank: u32,
    /// Rank 0's address, HOST or HOST:PORT (vLLM's --master-addr).
    #[arg(long, value_name = "HOST[:PORT]", conflicts_with = "dist_init_addr")]
    pub master_addr: Option<String>,
    /// Rank 0's gang port when --master-addr has none (vLLM's default 29501).
    #[arg(long, default_value_t = 29501)]
    pub master_port: u16,
    /// Rank 0's HOST:PORT (SGLang's name for --master-addr).
    #[arg(long, value_name = "HOST:PORT")]
    pub dist_init_addr: Option<String>,
    /// Accepted on ranks > 0 (vLLM's name): they never serve HTTP.
    #[arg(long)]
    pub headless: bool,
}

pub(super) fn run(args: Args) -> Outcome {
    let config = config(&args).map_err(Failure::bad_input)?;
    if let Some(lengths) = &args.simulate {
        return simulate_table(&config, lengths);
    }
    let gang = gang(&args).map_err(Failure::bad_input)?;
    resolve(&args.host, args.port).map_err(Failure::bad_input)?;
    let rt = super::runtime()?;
    rt.block_on(async move {
        let shutdown = Shutdown::new();
        shutdown.listen_for_signals();
        if let Some(g) = gang.as_ref().filter(|g| g.node_rank > 0) {
            return headless(g, &shutdown).await;
        }
        let sockets = bind(&args, &config, gang.as_ref()).await?;
        finish(mock::serve_on(config, sockets, shutdown.token()).await)
    })
}

/// How a serving mock server ended, as an exit code.
fn finish(result: Result<(), MockError>) -> Outcome {
    match result {
        Ok(()) => Ok(Exit::Ok),
        Err(e @ (MockError::Crashed { .. } | MockError::RankLost { .. })) => {
            say(&format!("mock server: {e}"));
            Ok(Exit::RunFailed)
        }
        Err(e @ MockError::Config(_)) => Err(Failure::bad_input(e)),
        Err(e) => Err(Failure::run_failed(
            anyhow::Error::new(e).context("mock server failed"),
        )),
    }
}

fn resolve(host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    format!("{host}:{port}")
        .parse()
        .ok()
        .or_else(|| {
            std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
                .ok()
                .and_then(|mut a| a.next())
        })
        .ok_or_else(|| anyhow::anyhow!("--host `{host}` is not an address or resolvable host name"))
}

/// Bind the HTTP listener, and the bootstrap and gang listeners the flags ask for; print
/// where each listens.
async fn bind(
    args: &Args,
    config: &MockConfig,
    gang: Option<&GangConfig>,
) -> anyhow::Result<Sockets> {
    let listen = |addr: SocketAddr, what: &'static str| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("failed to listen on {addr} ({what})"))
    };
    let addr = resolve(&args.host, args.port)?;
    let http = listen(addr, "--port").await?;
    say(&format!("listening on http://{}", http.local_addr()?));
    let bootstrap = if config.disaggregation.role == Role::Prefill {
        let at = SocketAddr::new(addr.ip(), args.disaggregation_bootstrap_port);
        let l = listen(at, "--disaggregation-bootstrap-port").await?;
        say(&format!("bootstrap on http://{}", l.local_addr()?));
        Some(l)
    } else {
        None
    };
    let gang = match gang {
        Some(g) => {
            // Every interface, as torch's TCPStore does: other hosts dial the master address.
            let port = g
                .master
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok());
            let at = SocketAddr::from(([0, 0, 0, 0], port.unwrap_or(args.master_port)));
            let l = listen(at, "--master-addr").await?;
            say(&format!(
                "gang master on {} (waiting for {} more ranks)",
                l.local_addr()?,
                g.nnodes - 1
            ));
            Some((l, g.nnodes))
        }
        None => None,
    };
    Ok(Sockets {
        http,
        bootstrap,
        gang,
    })
}

/// A rank > 0: join rank 0 and hold the link; no HTTP.
async fn headless(g: &GangConfig, shutdown: &Shutdown) -> Outcome {
    let joined = || {
        say(&format!(
            "rank {} of {} joined rank 0 at {} (headless: no HTTP)",
            g.node_rank, g.nnodes, g.master
        ));
    };
    match mock::join_gang(g, shutdown.token(), joined).await {
        Ok(()) => Ok(Exit::Ok),
        Err(e @ MockError::MasterLost { .. }) => {
            say(&format!("mock server: {e}"));
            Ok(Exit::RunFailed)
        }
        Err(e) => Err(Failure::bad_input(e)),
    }
}

/// The gang flags, checked: `None` for a single-node instance.
fn gang(args: &Args) -> anyhow::Result<Option<GangConfig>> {
    anyhow::ensure!(args.nnodes >= 1, "--nnodes must be at least 1");
    anyhow::ensure!(
        args.node_rank < args.nnodes,
        "--node-rank {} must be below --nnodes {}",
        args.node_rank,
        args.nnodes
    );
    if args.nnodes == 1 {
        anyhow::ensure!(!args.headless, "--headless needs --nnodes 2 or more");
        return Ok(None);
    }
    anyhow::ensure!(
        !(args.headless && args.node_rank == 0),
        "--headless is for ranks > 0; rank 0 serves the HTTP API"
    );
    let given = args.master_addr.as_ref().or(args.dist_init_addr.as_ref());
    let Some(addr) = given else {
        anyhow::bail!(
            "--nnodes {} needs --master-addr HOST[:PORT] (or --dist-init-addr HOST:PORT): \
             rank 0's address",
            args.nnodes
        );
    };
    let has_port = addr
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && !h.ends_with(':') && p.parse::<u16>().is_ok());
    let master = if has_port {
        addr.clone()
    } else {
        format!("{addr}:{}", args.master_port)
    };
    Ok(Some(GangConfig {
        nnodes: args.nnodes,
        node_rank: args.node_rank,
        master,
        join_timeout: std::time::Duration::from_secs(300),
    }))
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
    c.disaggregation.role = args
        .disaggregation
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--disaggregation: {e}"))?;
    c.disaggregation.kv_transfer_ms_per_token = args.kv_transfer_ms_per_token;
    c.prefix_cache.capacity_tokens = args.prefix_cache_tokens;
    c.prefix_cache.block_tokens = args.block_size;
    c.reasoning_tokens = args.reasoning_tokens;
    c.disaggregation.kv_wait_timeout =
        parse_duration(&args.kv_wait_timeout).context("--kv-wait-timeout")?;
    c.disaggregation.side_channel_host = std::env::var("VLLM_NIXL_SIDE_CHANNEL_HOST")
        .ok()
        .filter(|h| !h.is_empty());
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
