//! The flags resolved before anything starts: the client's configuration, the dataset,
//! the tokenizer source, percentiles, goodput SLOs and metadata; bad flags are refused with
//! what to write instead.

use anyhow::{anyhow, bail};
use serde_json::Value;

use super::args::{Args, DatasetName};
use crate::client::ClientConfig;
use crate::dataset::{self, Conversation, DatasetSpec, Replay, TokenizerSource};
use crate::load::{Endpoint, Limit, LoadShape, RampUp, Rate};
use crate::metrics::Slo;
use crate::search::{Attainment, Axis, PercentileSlo, SearchSpec};

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

/// `--goodput KEY:MS ...`: vLLM's form, parsed by the same rules as a task file's
/// `benchmark.goodput`.
fn parse_slos(items: &[String]) -> anyhow::Result<Vec<Slo>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    crate::load::parse_slos(&items.join(" ")).map_err(|e| anyhow!("--goodput {e}"))
}

/// Everything resolved from the flags before anything starts.
pub(super) struct Resolved {
    pub(super) config: ClientConfig,
    pub(super) spec: DatasetSpec,
    pub(super) tokenizer: TokenizerSource,
    pub(super) percentiles: Vec<f64>,
    pub(super) slos: Vec<Slo>,
    pub(super) metadata: Vec<(String, String)>,
    pub(super) rate: Option<f64>,
    /// `--search AXIS`: a capacity search instead of one measurement.
    pub(super) search: Option<SearchSpec>,
}

pub(super) fn resolve(a: &Args) -> anyhow::Result<Resolved> {
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
    let (shape, rate) = load_shape(a)?;
    let spec = dataset_spec(a)?;
    if matches!(spec, DatasetSpec::Conversation(_)) && endpoint != Endpoint::Chat {
        bail!(
            "--dataset-name conversation sends each turn's history as chat messages: add --endpoint /v1/chat/completions"
        );
    }
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
    let tokenizer = tokenizer_source(a, &base_url);
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
    if let Some(stall) = a.stall_timeout {
        config.stall_timeout = stall.0;
    }
    config.drain_timeout = a.drain_timeout;
    config.seed = a.seed;
    if a.no_server_metrics {
        config.server_metrics = None;
    }
    config.timeseries_interval = a.timeseries_interval.0;
    let slos = parse_slos(&a.goodput)?;
    Ok(Resolved {
        config,
        spec,
        tokenizer,
        percentiles: parse_list("--metric-percentiles", &a.metric_percentiles)?,
        search: search_spec(a, &slos)?,
        slos,
        metadata,
        rate,
    })
}

/// The load shape of the flags (rate, burstiness, ramp-up, limit, concurrency), and the
/// request rate (`None`: unlimited).
fn load_shape(a: &Args) -> anyhow::Result<(LoadShape, Option<f64>)> {
    let rate = parse_rate(&a.request_rate)?;
    if !(a.burstiness.is_finite() && a.burstiness > 0.0) {
        bail!("--burstiness must be positive, got {}", a.burstiness);
    }
    let ramp_up = match (a.ramp_up_strategy, a.ramp_up_start_rps, a.ramp_up_end_rps) {
        (None, None, None) => None,
        (Some(strategy), Some(start), Some(end))
            if start > 0.0 && start.is_finite() && end > 0.0 && end.is_finite() =>
        {
            Some(RampUp {
                strategy,
                start_rps: start,
                end_rps: end,
            })
        }
        (Some(_), Some(start), Some(end)) => bail!(
            "--ramp-up-start-rps ({start}) and --ramp-up-end-rps ({end}) must be positive: a ramp from 0 requests per second never sends its first request"
        ),
        _ => bail!(
            "ramp-up needs --ramp-up-strategy, --ramp-up-start-rps and --ramp-up-end-rps together"
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
    Ok((shape, rate))
}

/// `--dataset-name` and its flags.
fn dataset_spec(a: &Args) -> anyhow::Result<DatasetSpec> {
    let path_needed = |name: &str| {
        a.dataset_path
            .clone()
            .ok_or_else(|| anyhow!("--dataset-name {name} needs --dataset-path"))
    };
    Ok(match a.dataset_name {
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
        DatasetName::Mooncake => {
            let slow = a.mooncake_slowdown_factor;
            if !(slow.is_finite() && slow > 0.0) {
                bail!(
                    "--mooncake-slowdown-factor {slow} must be above 0 (0.5 replays twice as fast)"
                );
            }
            if a.mooncake_block_size == 0 {
                bail!("--mooncake-block-size must be at least 1 token");
            }
            DatasetSpec::Mooncake {
                path: path_needed("mooncake")?,
                replay: Replay {
                    block_size: a.mooncake_block_size,
                    speedup: 1.0 / slow,
                    start: a.mooncake_start,
                    duration: a.mooncake_duration,
                },
            }
        }
        DatasetName::Weka => {
            let slow = a.mooncake_slowdown_factor;
            if !(slow.is_finite() && slow > 0.0) {
                bail!(
                    "--mooncake-slowdown-factor {slow} must be above 0 (0.5 replays twice as fast)"
                );
            }
            DatasetSpec::Weka {
                path: path_needed("weka")?,
                speedup: 1.0 / slow,
            }
        }
        DatasetName::Conversation => {
            if a.conversation_input_len == 0 || a.conversation_output_len == Some(0) {
                bail!("--conversation-input-len and --conversation-output-len must be at least 1");
            }
            DatasetSpec::Conversation(Conversation {
                path: a.dataset_path.clone(),
                num_turns: a.conversation_num_turns.clone(),
                input_len: a.conversation_input_len,
                output_len: match (&a.dataset_path, a.conversation_output_len) {
                    (None, None) => Some(64),
                    (_, out) => out,
                },
                range_ratio: a.random_range_ratio,
                input_dist: a.conversation_input_dist.clone(),
                output_dist: a.conversation_output_dist.clone(),
                prefix_len: a.conversation_prefix_len,
                system_prompt_len: a.conversation_system_prompt_len,
                think_time: a.conversation_think_time,
            })
        }
    })
}

fn flag(name: &str) -> String {
    format!("--search-{name}")
}

/// `--search` and its flags: the capacity search asked for; `None` without `--search`.
fn search_spec(a: &Args, goodput: &[Slo]) -> anyhow::Result<Option<SearchSpec>> {
    let Some(axis) = &a.search else {
        return Ok(None);
    };
    let axis = Axis::parse(axis).ok_or_else(|| {
        anyhow!("--search `{axis}`: write concurrency or request-rate (the axis to search along)")
    })?;
    match axis {
        Axis::Concurrency if a.max_concurrency.is_some() => {
            bail!("--search concurrency sets --max-concurrency at each level; leave it out")
        }
        Axis::RequestRate if !a.request_rate.eq_ignore_ascii_case("inf") => {
            bail!("--search request-rate sets --request-rate at each level; leave it out")
        }
        _ => {}
    }
    if a.ramp_up_strategy.is_some() {
        bail!("--search measures each level at a steady load; leave out --ramp-up-*");
    }
    let mut s = SearchSpec::new(axis, a.search_min, a.search_max);
    s.percentiles = a
        .search_slo
        .iter()
        .map(|x| PercentileSlo::parse(x).map_err(|e| anyhow!("--search-slo {e}")))
        .collect::<anyhow::Result<_>>()?;
    if let Some(pct) = a.search_attainment {
        if goodput.is_empty() {
            bail!(
                "--search-attainment {pct} needs the per-request bounds: add --goodput KEY:MS ... (e.g. --goodput ttft:500 tpot:50)"
            );
        }
        s.attainment = Some(Attainment {
            bounds: goodput.to_vec(),
            fraction: pct / 100.0,
        });
    }
    s.width = a.search_width;
    s.max_points = a.search_max_points;
    s.repetitions = a.search_repetitions;
    s.confidence = a.search_confidence;
    s.validate(flag).map_err(|e| anyhow!(e))?;
    Ok(Some(s))
}

/// `--tokenizer`, else the model's when cached, else the server's own.
fn tokenizer_source(a: &Args, base_url: &str) -> TokenizerSource {
    match &a.tokenizer {
        Some(t) => TokenizerSource::from_arg(t),
        None => match TokenizerSource::from_arg(&a.model) {
            TokenizerSource::Model(m)
                if !dataset::hf_hub_cache()
                    .join(format!("models--{}", m.replace('/', "--")))
                    .exists() =>
            {
                TokenizerSource::Server {
                    base_url: base_url.to_string(),
                    model: a.served_model_name.clone().unwrap_or(m),
                }
            }
            other => other,
        },
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// `bench --model m --tokenizer data/tokenizer/tokenizer.json` plus `extra`.
    pub(in crate::cli::bench) fn args(extra: &[&str]) -> Args {
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
        for start in ["--ramp-up-start-rps=0", "--ramp-up-start-rps=-1"] {
            let e = resolve(&args(&[
                "--ramp-up-strategy",
                "linear",
                start,
                "--ramp-up-end-rps",
                "10",
            ]))
            .err()
            .unwrap();
            assert!(e.to_string().contains("must be positive"), "{e}");
        }
    }

    #[test]
    fn zero_timeouts_are_flag_errors_and_the_stall_timeout_can_be_off() {
        for flag in ["--request-timeout", "--ttft-timeout", "--stall-timeout"] {
            let e = Cli::try_parse_from(["bench", "--model", "m", flag, "0s"])
                .err()
                .unwrap();
            assert_eq!(e.exit_code(), 2, "{flag}");
            assert!(e.to_string().contains("longer than 0s"), "{flag}: {e}");
        }
        let r = resolve(&args(&[])).unwrap();
        assert_eq!(
            r.config.stall_timeout,
            Some(crate::client::DEFAULT_STALL_TIMEOUT)
        );
        let r = resolve(&args(&["--stall-timeout", "off"])).unwrap();
        assert_eq!(r.config.stall_timeout, None);
        let r = resolve(&args(&["--stall-timeout", "90s"])).unwrap();
        assert_eq!(
            r.config.stall_timeout,
            Some(std::time::Duration::from_secs(90))
        );
    }

    #[test]
    fn mooncake_flags_take_sglangs_names() {
        let r = resolve(&args(&[
            "--dataset-name",
            "mooncake",
            "--dataset-path",
            "t.jsonl",
            "--mooncake-slowdown-factor",
            "0.5",
            "--mooncake-block-size",
            "16",
            "--mooncake-start",
            "10s",
            "--mooncake-duration",
            "1m",
        ]))
        .unwrap();
        let DatasetSpec::Mooncake { path, replay } = &r.spec else {
            panic!("{:?}", r.spec)
        };
        assert_eq!(path, &std::path::PathBuf::from("t.jsonl"));
        assert_eq!((replay.block_size, replay.speedup), (16, 2.0));
        assert_eq!(replay.start, std::time::Duration::from_secs(10));
        assert_eq!(replay.duration, Some(std::time::Duration::from_secs(60)));
        for (flags, want) in [
            (&["--dataset-name", "mooncake"][..], "--dataset-path"),
            (
                &[
                    "--dataset-name",
                    "mooncake",
                    "--dataset-path",
                    "t",
                    "--mooncake-slowdown-factor",
                    "0",
                ][..],
                "--mooncake-slowdown-factor",
            ),
        ] {
            let e = resolve(&args(flags)).err().unwrap();
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn conversation_flags_take_vllm_names_and_need_the_chat_endpoint() {
        let r = resolve(&args(&[
            "--endpoint",
            "/v1/chat/completions",
            "--dataset-name",
            "multi-turn",
            "--max-turns",
            r#"{"distribution": "uniform", "min": 4, "max": 8}"#,
            "--conversation-system-prompt-len",
            "50",
            "--conversation-think-time",
            "250ms",
            "--max-active-conversations",
            "3",
            "--conversation-output-dist",
            r#"{"distribution": "zipf", "alpha": 1.5, "max": 40}"#,
            "--conversation-prefix-len",
            "30",
        ]))
        .unwrap();
        let DatasetSpec::Conversation(c) = &r.spec else {
            panic!("{:?}", r.spec)
        };
        assert_eq!(c.num_turns, Some(dataset::Dist::Uniform { min: 4, max: 8 }));
        assert_eq!(
            (c.input_len, c.output_len, c.system_prompt_len),
            (128, Some(64), 50)
        );
        assert_eq!(c.think_time, std::time::Duration::from_millis(250));
        assert_eq!(
            c.output_dist,
            Some(dataset::Dist::Zipf {
                alpha: 1.5,
                max: Some(40)
            })
        );
        assert_eq!((c.input_dist.clone(), c.prefix_len), (None, 30));
        assert_eq!(r.config.shape.max_concurrency, Some(3));
        // The completions endpoint cannot carry a history.
        let e = resolve(&args(&["--dataset-name", "conversation"]))
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("--endpoint /v1/chat/completions"),
            "{e}"
        );
        let e = Cli::try_parse_from([
            "bench",
            "--model",
            "m",
            "--max-turns",
            "{\"distribution\": \"uniform\", \"min\": 9, \"max\": 2}",
        ])
        .err()
        .unwrap();
        assert!(e.to_string().contains("`min` 9"), "{e}");
    }
}
