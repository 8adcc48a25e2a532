//! `orchestrate bench`: a drop-in for `vllm bench serve` against a running endpoint: the same
//! flag names and meanings, plus the MoAI fork's and SGLang's dataset flags, duration-bound
//! runs, per-request timeouts and the client self-check. Prints the "Serving Benchmark Result"
//! block on stdout; with `--save-result` writes the result JSON and streams one JSON line per
//! request next to it as requests finish.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use serde_json::{Value, json};

use super::{Exit, Failure, Outcome};
use crate::client::{
    self, Backend, ClientConfig, Endpoint, Limit, LoadShape, Observer, OutputCheck, Progress,
    RampStrategy, RampUp, Rate, RequestRecord,
};
use crate::dataset::{self, DatasetSpec, Tokenizer, TokenizerSource};
use crate::metrics::{
    ResultHeader, Slo, SloMetric, SummaryOptions, render_server, render_text, result_json,
    rps_change_events, summarize,
};
use crate::units::parse_duration;

/// Dataset names (vLLM's and SGLang's spellings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DatasetName {
    Random,
    Sharegpt,
    /// Plain-text corpus cut to exact token lengths (Gutenberg-style).
    Text,
    /// SGLang's generated shared-prefix groups.
    #[value(alias = "gsp")]
    GeneratedSharedPrefix,
    /// One JSON object per line with a `prompt`.
    #[value(alias = "custom")]
    Jsonl,
}

/// Arguments of `orchestrate bench` (vllm bench serve's flag names and meanings).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Server dialect: how ignore_eos and streamed usage are asked for.
    #[arg(long, value_enum, default_value = "vllm")]
    backend: Backend,
    /// Server base URL (overrides --host/--port), e.g. http://127.0.0.1:8000.
    #[arg(long)]
    base_url: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Request path; a path ending in chat/completions uses the chat API.
    #[arg(long, default_value = "/v1/completions")]
    endpoint: String,
    /// Model name (also the tokenizer when --tokenizer is not given).
    #[arg(long)]
    model: String,
    /// Name sent in the `model` field of requests, when it differs from --model.
    #[arg(long)]
    served_model_name: Option<String>,
    /// tokenizer.json (or a directory holding one), or a model id in the local HF cache.
    /// Without one, the server's /tokenize endpoint is used.
    #[arg(long)]
    tokenizer: Option<String>,
    #[arg(long, value_enum, default_value = "random")]
    dataset_name: DatasetName,
    #[arg(long)]
    dataset_path: Option<PathBuf>,
    #[arg(long, default_value_t = 1024)]
    random_input_len: u32,
    #[arg(long, default_value_t = 128)]
    random_output_len: u32,
    /// Lengths vary uniformly in [len*(1-r), len*(1+r)] (vLLM's meaning).
    #[arg(long, default_value_t = 0.0)]
    random_range_ratio: f64,
    #[arg(long, default_value_t = 0)]
    random_prefix_len: u32,
    #[arg(long)]
    sharegpt_input_len: Option<u32>,
    #[arg(long)]
    sharegpt_output_len: Option<u32>,
    #[arg(long, default_value_t = 1024)]
    text_input_len: u32,
    #[arg(long, default_value_t = 128)]
    text_output_len: u32,
    /// Output length for JSONL prompts without their own `output_len`.
    #[arg(long, alias = "custom-output-len")]
    jsonl_output_len: Option<u32>,
    #[arg(long, default_value_t = 64)]
    gsp_num_groups: u32,
    #[arg(long, default_value_t = 16)]
    gsp_prompts_per_group: u32,
    #[arg(long, default_value_t = 2048)]
    gsp_system_prompt_len: u32,
    #[arg(long, default_value_t = 128)]
    gsp_question_len: u32,
    #[arg(long, default_value_t = 256)]
    gsp_output_len: u32,
    #[arg(long, default_value_t = 1000)]
    num_prompts: u64,
    /// At most this many requests in flight.
    #[arg(long)]
    max_concurrency: Option<u32>,
    /// Requests per second, or inf (all at once, bounded by --max-concurrency).
    #[arg(long, default_value = "inf")]
    request_rate: String,
    /// Gamma shape of the gaps: 1 = Poisson, <1 burstier, >1 more regular.
    #[arg(long, default_value_t = 1.0)]
    burstiness: f64,
    #[arg(long, value_enum)]
    ramp_up_strategy: Option<RampStrategy>,
    #[arg(long)]
    ramp_up_start_rps: Option<f64>,
    #[arg(long)]
    ramp_up_end_rps: Option<f64>,
    #[arg(long)]
    ignore_eos: bool,
    /// Metrics printed with percentiles (the JSON always has all): ttft,tpot,itl,icl,e2el.
    #[arg(long, default_value = "ttft,tpot,itl")]
    percentile_metrics: String,
    /// Percentiles, comma-separated.
    #[arg(long, default_value = "99")]
    metric_percentiles: String,
    /// SLOs for goodput, KEY:MS with KEY in ttft, tpot, e2el.
    #[arg(long, num_args = 1..)]
    goodput: Vec<String>,
    #[arg(long)]
    save_result: bool,
    /// Also write per-request lists (vLLM's input_lens, ttfts, itls, ...) into the result JSON.
    #[arg(long)]
    save_detailed: bool,
    #[arg(long, default_value = ".")]
    result_dir: PathBuf,
    #[arg(long)]
    result_filename: Option<String>,
    #[arg(long)]
    label: Option<String>,
    /// KEY=VALUE pairs written as top-level keys of the result JSON.
    #[arg(long, num_args = 1..)]
    metadata: Vec<String>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// No live progress line.
    #[arg(long)]
    disable_tqdm: bool,
    /// JSON object merged into every request body.
    #[arg(long)]
    extra_body: Option<String>,
    /// Excluded from the trimmed figures at the start (token timestamps), e.g. 30s.
    #[arg(long, value_parser = parse_duration)]
    warmup_time: Option<Duration>,
    /// Excluded from the trimmed figures at the end, e.g. 30s.
    #[arg(long, value_parser = parse_duration)]
    cooldown_time: Option<Duration>,
    /// Issue requests for this long instead of --num-prompts (prompts are reused).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// After --duration, how long in-flight requests may finish before they count as incomplete.
    #[arg(long, value_parser = parse_duration)]
    drain_timeout: Option<Duration>,
    /// Per-request deadline for the whole stream, e.g. 10m.
    #[arg(long, value_parser = parse_duration)]
    request_timeout: Option<Duration>,
    /// Per-request deadline for the first token.
    #[arg(long, value_parser = parse_duration)]
    ttft_timeout: Option<Duration>,
    /// Re-tokenize every N-th answer to cross-check the server's usage (0 = never).
    #[arg(long, default_value_t = 0)]
    usage_check_every: u32,
    /// Do not scrape the server's Prometheus /metrics during the run.
    #[arg(long)]
    no_server_metrics: bool,
    /// Bearer token (vLLM reads OPENAI_API_KEY too).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

fn parse_rate(s: &str) -> anyhow::Result<Option<f64>> {
    if s.eq_ignore_ascii_case("inf") {
        return Ok(None);
    }
    let r: f64 = s
        .parse()
        .map_err(|_| anyhow!("--request-rate `{s}` is not a number or inf"))?;
    if !(r.is_finite() && r > 0.0) {
        bail!("--request-rate must be positive, got {s}");
    }
    Ok(Some(r))
}

fn parse_list(flag: &str, s: &str) -> anyhow::Result<Vec<f64>> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<f64>()
                .ok()
                .filter(|p| (0.0..=100.0).contains(p))
                .ok_or_else(|| anyhow!("{flag}: `{x}` is not a percentile between 0 and 100"))
        })
        .collect()
}

fn parse_slos(items: &[String]) -> anyhow::Result<Vec<Slo>> {
    items
        .iter()
        .map(|item| {
            let (k, v) = item
                .split_once(':')
                .ok_or_else(|| anyhow!("--goodput `{item}`: write KEY:MS, like ttft:500"))?;
            let metric = match k {
                "ttft" => SloMetric::Ttft,
                "tpot" => SloMetric::Tpot,
                "e2el" => SloMetric::E2el,
                _ => bail!("--goodput `{item}`: KEY must be ttft, tpot or e2el"),
            };
            let ms: f64 = v
                .parse()
                .map_err(|_| anyhow!("--goodput `{item}`: `{v}` is not a number of ms"))?;
            Ok(Slo { metric, ms })
        })
        .collect()
}

/// Everything resolved from the flags before anything starts.
struct Resolved {
    config: ClientConfig,
    spec: DatasetSpec,
    tokenizer: TokenizerSource,
    percentiles: Vec<f64>,
    slos: Vec<Slo>,
    metadata: Vec<(String, String)>,
    rate: Option<f64>,
}

fn resolve(a: &Args) -> anyhow::Result<Resolved> {
    let base_url = a
        .base_url
        .clone()
        .unwrap_or_else(|| format!("http://{}:{}", a.host, a.port));
    let endpoint = if a
        .endpoint
        .trim_end_matches('/')
        .ends_with("chat/completions")
    {
        Endpoint::Chat
    } else {
        Endpoint::Completions
    };
    let rate = parse_rate(&a.request_rate)?;
    if !(a.burstiness.is_finite() && a.burstiness > 0.0) {
        bail!("--burstiness must be positive, got {}", a.burstiness);
    }
    let ramp_up = match (a.ramp_up_strategy, a.ramp_up_start_rps, a.ramp_up_end_rps) {
        (None, None, None) => None,
        (Some(strategy), Some(start), Some(end)) if start >= 0.0 && end > 0.0 => Some(RampUp {
            strategy,
            start_rps: start,
            end_rps: end,
        }),
        _ => bail!(
            "ramp-up needs --ramp-up-strategy, --ramp-up-start-rps and --ramp-up-end-rps together (end > 0)"
        ),
    };
    let rate_shape = match rate {
        None => Rate::Unlimited,
        Some(rps) if a.burstiness == 1.0 => Rate::Poisson { rps },
        Some(rps) => Rate::Gamma {
            rps,
            burstiness: a.burstiness,
        },
    };
    let shape = LoadShape {
        max_concurrency: a.max_concurrency,
        rate: rate_shape,
        ramp_up,
        limit: match a.duration {
            Some(d) => Limit::Duration(d),
            None => Limit::Requests(a.num_prompts),
        },
        warmup: a.warmup_time.unwrap_or_default(),
        cooldown: a.cooldown_time.unwrap_or_default(),
    };
    if a.max_concurrency == Some(0) {
        bail!("--max-concurrency must be at least 1");
    }
    let path_needed = |name: &str| {
        a.dataset_path
            .clone()
            .ok_or_else(|| anyhow!("--dataset-name {name} needs --dataset-path"))
    };
    let spec = match a.dataset_name {
        DatasetName::Random => DatasetSpec::Random {
            input_len: a.random_input_len,
            output_len: a.random_output_len,
            range_ratio: a.random_range_ratio,
            prefix_len: a.random_prefix_len,
        },
        DatasetName::Sharegpt => DatasetSpec::ShareGpt {
            path: path_needed("sharegpt")?,
            input_len: a.sharegpt_input_len,
            output_len: a.sharegpt_output_len,
        },
        DatasetName::Text => DatasetSpec::Text {
            path: path_needed("text")?,
            input_len: a.text_input_len,
            output_len: a.text_output_len,
        },
        DatasetName::GeneratedSharedPrefix => DatasetSpec::SharedPrefix {
            num_groups: a.gsp_num_groups,
            prompts_per_group: a.gsp_prompts_per_group,
            system_prompt_len: a.gsp_system_prompt_len,
            question_len: a.gsp_question_len,
            output_len: a.gsp_output_len,
        },
        DatasetName::Jsonl => DatasetSpec::Jsonl {
            path: path_needed("jsonl")?,
            output_len: a.jsonl_output_len,
        },
    };
    let extra_body = match &a.extra_body {
        None => serde_json::Map::new(),
        Some(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => m,
            _ => bail!("--extra-body must be a JSON object, like '{{\"temperature\": 0}}'"),
        },
    };
    let metadata = a
        .metadata
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| anyhow!("--metadata `{kv}`: write KEY=VALUE"))
        })
        .collect::<anyhow::Result<_>>()?;
    let tokenizer = match &a.tokenizer {
        Some(t) => TokenizerSource::from_arg(t),
        None => match TokenizerSource::from_arg(&a.model) {
            TokenizerSource::Model(m)
                if !dataset::hf_hub_cache()
                    .join(format!("models--{}", m.replace('/', "--")))
                    .exists() =>
            {
                TokenizerSource::Server {
                    base_url: base_url.clone(),
                    model: a.served_model_name.clone().unwrap_or(m),
                }
            }
            other => other,
        },
    };
    let mut config = ClientConfig::new(
        base_url,
        a.served_model_name
            .clone()
            .unwrap_or_else(|| a.model.clone()),
        shape,
    );
    config.backend = a.backend;
    config.endpoint = endpoint;
    config.path = Some(a.endpoint.clone());
    config.ignore_eos = a.ignore_eos;
    config.extra_body = extra_body;
    config.api_key = a.api_key.clone();
    config.request_timeout = a.request_timeout;
    config.ttft_timeout = a.ttft_timeout;
    config.drain_timeout = a.drain_timeout;
    config.seed = a.seed;
    if a.no_server_metrics {
        config.server_metrics = None;
    }
    Ok(Resolved {
        config,
        spec,
        tokenizer,
        percentiles: parse_list("--metric-percentiles", &a.metric_percentiles)?,
        slos: parse_slos(&a.goodput)?,
        metadata,
        rate,
    })
}

/// Streams records to a JSONL file and progress to stderr.
struct BenchObserver {
    jsonl: Option<Mutex<BufWriter<File>>>,
    progress: bool,
}

impl Observer for BenchObserver {
    fn on_record(&self, record: &RequestRecord) {
        if let Some(w) = &self.jsonl
            && let Ok(mut w) = w.lock()
        {
            let _ = serde_json::to_writer(&mut *w, record);
            let _ = w.write_all(b"\n");
        }
    }

    fn on_progress(&self, p: &Progress) {
        if self.progress {
            eprint!("\r\x1b[2K{}", p.line());
        }
    }
}

pub fn run(args: Args) -> Outcome {
    let r = resolve(&args).map_err(Failure::bad_input)?;
    let rt = super::runtime()?;
    let shutdown = crate::shutdown::Shutdown::new();
    rt.block_on(async {
        shutdown.listen_for_signals();
        bench(&args, r, shutdown.token()).await
    })
}

async fn bench(
    args: &Args,
    mut r: Resolved,
    cancel: tokio_util::sync::CancellationToken,
) -> Outcome {
    let source = r.tokenizer.clone();
    let tokenizer = tokio::task::spawn_blocking(move || Tokenizer::load(&source))
        .await
        .map_err(|e| anyhow!(e))?
        .map_err(Failure::bad_input)?;
    let tokenizer = Arc::new(tokenizer);
    let num = match r.config.shape.limit {
        Limit::Requests(n) => n as usize,
        Limit::Duration(_) => args.num_prompts as usize,
    };
    let (spec, tok, seed) = (r.spec.clone(), tokenizer.clone(), r.config.seed);
    tracing::info!("building {num} prompts with tokenizer {}", tokenizer.name());
    let chat = r.config.endpoint == Endpoint::Chat;
    let (prompts, chat_counting) = tokio::task::spawn_blocking(move || {
        if chat {
            dataset::generate_chat(&spec, &tok, num, seed).map(|(p, c)| (p, Some(c)))
        } else {
            dataset::generate(&spec, &tok, num, seed).map(|p| (p, None))
        }
    })
    .await
    .map_err(|e| anyhow!(e))?
    .map_err(Failure::bad_input)?;
    let mut warnings = Vec::new();
    if let Some(w) = chat_counting
        .as_ref()
        .and_then(|c| c.warning(tokenizer.name()))
    {
        eprintln!("warning: {w}");
        warnings.push(w);
    }
    r.config.keep_texts = args.save_result && args.save_detailed;
    if args.usage_check_every > 0
        && let Some(local) = tokenizer.local()
    {
        r.config.output_check = Some(OutputCheck {
            tokenizer: Arc::new(local.clone()),
            every: args.usage_check_every,
        });
    }
    let date = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
    let rate_label = r.rate.map_or("inf".to_string(), |x| format!("{x}"));
    let model_base = args
        .model
        .rsplit('/')
        .next()
        .unwrap_or(&args.model)
        .to_string();
    let file_name = args.result_filename.clone().unwrap_or_else(|| {
        let label = args
            .label
            .clone()
            .unwrap_or_else(|| format!("{:?}", args.backend).to_lowercase());
        let conc = args
            .max_concurrency
            .map_or(String::new(), |c| format!("-concurrency{c}"));
        format!("{label}-{rate_label}qps{conc}-{model_base}-{date}.json")
    });
    let result_path = args.result_dir.join(&file_name);
    let jsonl = if args.save_result {
        std::fs::create_dir_all(&args.result_dir)
            .with_context(|| format!("cannot create {}", args.result_dir.display()))?;
        let path = result_path.with_extension("requests.jsonl");
        let f = File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        Some(Mutex::new(BufWriter::new(f)))
    } else {
        None
    };
    let observer = Arc::new(BenchObserver {
        jsonl,
        progress: !args.disable_tqdm && std::io::IsTerminal::is_terminal(&std::io::stderr()),
    });
    let outcome = client::run(&r.config, prompts, observer.clone(), cancel.clone())
        .await
        .map_err(Failure::bad_input)?;
    if observer.progress {
        eprintln!();
    }
    if let Some(w) = &observer.jsonl
        && let Ok(mut w) = w.lock()
    {
        w.flush().context("cannot write the per-request JSONL")?;
    }
    let opts = SummaryOptions {
        percentiles: r.percentiles.clone(),
        goodput: r.slos.clone(),
        warmup: r.config.shape.warmup,
        cooldown: r.config.shape.cooldown,
    };
    let summary = summarize(&outcome.records, &opts);
    let check = &outcome.self_check;
    print!(
        "{}",
        render_text(&summary, &r.percentiles, Some(&check.reasons))
    );
    if let Some(w) = &outcome.server_metrics {
        print!("{}", render_server(w));
    }
    if args.save_result {
        let header = ResultHeader {
            date,
            endpoint_type: format!("{:?}", args.backend).to_lowercase(),
            backend: format!("{:?}", args.backend).to_lowercase(),
            label: args.label.clone(),
            model_id: args.model.clone(),
            tokenizer_id: Some(tokenizer.name().to_string()),
            num_prompts: args.num_prompts,
            request_rate: r.rate.map_or(json!("inf"), |x| json!(x)),
            burstiness: args.burstiness,
            max_concurrency: args.max_concurrency,
            ramp_up: r.config.shape.ramp_up.as_ref().map(|u| {
                (
                    format!("{:?}", u.strategy).to_lowercase(),
                    u.start_rps,
                    u.end_rps,
                )
            }),
            metadata: r.metadata.clone(),
        };
        let mut extra = vec![
            ("self_check", json!(check)),
            ("client_limited", json!(check.client_limited)),
            ("server_metrics", json!(outcome.server_metrics)),
            ("started_at", json!(outcome.started_at.to_rfc3339())),
            ("warnings", json!(warnings)),
        ];
        if let Some(c) = &chat_counting {
            // Chat: which template the input lengths were counted through (null: none found).
            extra.push(("chat_template", json!(c.chat_template)));
        }
        if r.config.shape.ramp_up.is_some() {
            extra.push((
                "rps_change_events",
                rps_change_events(outcome.started_at, &outcome.rps_change_events),
            ));
        }
        let value = result_json(
            &header,
            &summary,
            &outcome.records,
            args.save_detailed,
            &extra,
        );
        let text = serde_json::to_string_pretty(&value).context("cannot serialize the result")?;
        std::fs::write(&result_path, text + "\n")
            .with_context(|| format!("cannot write {}", result_path.display()))?;
        eprintln!("result: {}", result_path.display());
    }
    if cancel.is_cancelled() {
        return Err(Failure::run_failed(anyhow!("interrupted")));
    }
    if summary.completed == 0 {
        return Err(Failure::run_failed(anyhow!("no request completed")));
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec![
            "bench",
            "--model",
            "m",
            "--tokenizer",
            "data/tokenizer/tokenizer.json",
        ];
        argv.extend_from_slice(extra);
        Cli::parse_from(argv).args
    }

    #[test]
    fn vllm_flags_resolve_to_a_load_shape() {
        let r = resolve(&args(&[
            "--request-rate",
            "20",
            "--burstiness",
            "0.5",
            "--max-concurrency",
            "8",
            "--num-prompts",
            "100",
            "--endpoint",
            "/v1/chat/completions",
            "--goodput",
            "ttft:500",
            "tpot:50",
            "--metric-percentiles",
            "50,99.9",
            "--metadata",
            "gpu=h20",
            "--extra-body",
            "{\"temperature\":0}",
        ]))
        .unwrap();
        assert_eq!(
            r.config.shape.rate,
            Rate::Gamma {
                rps: 20.0,
                burstiness: 0.5
            }
        );
        assert_eq!(r.config.shape.max_concurrency, Some(8));
        assert_eq!(r.config.endpoint, Endpoint::Chat);
        assert_eq!(r.slos.len(), 2);
        assert_eq!(r.percentiles, vec![50.0, 99.9]);
        assert_eq!(r.metadata, vec![("gpu".to_string(), "h20".to_string())]);
        assert_eq!(r.config.extra_body["temperature"], json!(0));
        assert_eq!(r.config.base_url, "http://127.0.0.1:8000");
    }

    #[test]
    fn bad_flags_say_what_to_write() {
        let e = resolve(&args(&["--request-rate", "fast"])).err().unwrap();
        assert!(e.to_string().contains("--request-rate"));
        let e = resolve(&args(&["--goodput", "ttft500"])).err().unwrap();
        assert!(e.to_string().contains("KEY:MS"));
        let e = resolve(&args(&["--ramp-up-strategy", "linear"]))
            .err()
            .unwrap();
        assert!(e.to_string().contains("ramp-up"));
        let e = resolve(&args(&["--dataset-name", "sharegpt"]))
            .err()
            .unwrap();
        assert!(e.to_string().contains("--dataset-path"));
    }
}
