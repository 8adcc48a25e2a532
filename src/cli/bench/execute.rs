//! One `orchestrate bench` run: load the tokenizer, measure through the same function a
//! sweep point uses (`runner::sample`: prompts, then the client, streaming records to JSONL
//! and progress to stderr), print the result block and, with `--save-result`, write the
//! result JSON and the time series beside it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, anyhow};
use serde_json::json;

use super::args::Args;
use super::resolve::Resolved;
use crate::cli::{Exit, Failure, Outcome};
use crate::client::{Observer, OutputCheck, Progress, RequestRecord};
use crate::dataset::{ChatCounting, Tokenizer};
use crate::load::Limit;
use crate::metrics::{
    ResultHeader, Summary, SummaryOptions, render_server, render_text, result_json,
    rps_change_events, summarize,
};
use crate::runner::sample::{self, Sample, SampleError, Sampled};

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

pub(super) async fn bench(
    args: &Args,
    mut r: Resolved,
    cancel: tokio_util::sync::CancellationToken,
    quiet: bool,
) -> Outcome {
    let tokenizer = load_tokenizer(&r).await?;
    let num = match r.config.shape.limit {
        Limit::Requests(n) => n as usize,
        Limit::Duration(_) => args.num_prompts as usize,
    };
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
    let result_path = result_path(args, &r, &date);
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
        progress: !quiet
            && !args.disable_tqdm
            && std::io::IsTerminal::is_terminal(&std::io::stderr()),
    });
    tracing::info!("building {num} prompts with tokenizer {}", tokenizer.name());
    let mut warnings = Vec::new();
    let sample = Sample {
        config: &r.config,
        dataset: &r.spec,
        tokenizer: tokenizer.clone(),
        prompts: num,
        site: None,
        prefix_block_tokens: args.prefix_block_size,
    };
    let on_prompts = |counting: Option<&ChatCounting>| {
        if let Some(w) = counting.and_then(|c| c.warning(tokenizer.name())) {
            eprintln!("warning: {w}");
            warnings.push(w);
        }
    };
    let sampled = sample::sample(sample, on_prompts, observer.clone(), cancel.clone())
        .await
        .map_err(|e| match e {
            SampleError::Prompts(e) => Failure::bad_input(e),
            SampleError::Client(e) => Failure::bad_input(e),
            other => Failure::run_failed(other),
        })?;
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
    let mut summary = summarize(&sampled.outcome.records, &opts);
    sampled.prefix_cache(&mut summary);
    let outcome = &sampled.outcome;
    let check = &outcome.self_check;
    print!(
        "{}",
        render_text(&summary, &r.percentiles, Some(&check.reasons))
    );
    if let Some(w) = &outcome.server_metrics {
        print!("{}", render_server(w));
    }
    if args.save_result {
        let saved = Saved {
            tokenizer: tokenizer.name(),
            date,
            summary: &summary,
            sampled: &sampled,
            warnings: &warnings,
        };
        save_result(args, &r, saved, &result_path)?;
        if let Some(series) = sampled.time_series(&r.config) {
            let path = result_path.with_extension("timeseries.json");
            let text =
                serde_json::to_string(&series).context("cannot serialize the time series")?;
            std::fs::write(&path, text + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("time series: {}", path.display());
        }
    }
    if cancel.is_cancelled() {
        return Err(Failure {
            exit: Exit::Interrupted,
            error: anyhow!("interrupted; the requests that finished are counted above"),
        });
    }
    if summary.completed == 0 {
        return Err(Failure::run_failed(anyhow!("no request completed")));
    }
    Ok(Exit::Ok)
}

/// The tokenizer of the flags, loaded off the runtime.
pub(super) async fn load_tokenizer(r: &Resolved) -> Result<Arc<Tokenizer>, Failure> {
    let source = r.tokenizer.clone();
    let tokenizer = tokio::task::spawn_blocking(move || Tokenizer::load(&source))
        .await
        .map_err(|e| anyhow!(e))?
        .map_err(Failure::bad_input)?;
    Ok(Arc::new(tokenizer))
}

/// What `--save-result` writes besides the flags.
struct Saved<'a> {
    tokenizer: &'a str,
    date: String,
    summary: &'a Summary,
    sampled: &'a Sampled,
    warnings: &'a [String],
}

/// The result JSON (vllm bench serve's fields + ours) at `result_path`.
fn save_result(
    args: &Args,
    r: &Resolved,
    saved: Saved<'_>,
    result_path: &Path,
) -> anyhow::Result<()> {
    let Saved {
        tokenizer,
        date,
        summary,
        sampled,
        warnings,
    } = saved;
    let outcome = &sampled.outcome;
    let check = &outcome.self_check;
    let header = ResultHeader {
        date,
        endpoint_type: format!("{:?}", args.backend).to_lowercase(),
        backend: format!("{:?}", args.backend).to_lowercase(),
        label: args.label.clone(),
        model_id: args.model.clone(),
        tokenizer_id: Some(tokenizer.to_string()),
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
    if let Some(c) = &sampled.chat_counting {
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
        summary,
        &outcome.records,
        args.save_detailed,
        &extra,
    );
    let text = serde_json::to_string_pretty(&value).context("cannot serialize the result")?;
    std::fs::write(result_path, text + "\n")
        .with_context(|| format!("cannot write {}", result_path.display()))?;
    eprintln!("result: {}", result_path.display());
    Ok(())
}

/// `--result-filename`, else `<label>-<rate>qps[-concurrency<c>]-<model>-<date>.json`, in
/// `--result-dir`.
pub(super) fn result_path(args: &Args, r: &Resolved, date: &str) -> PathBuf {
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
    args.result_dir.join(&file_name)
}
