//! `orchestrate bench --search AXIS`: a capacity search against the running endpoint. The
//! `--search-*` flags become a `SearchSpec` (in `resolve`); each level is measured through the same
//! function as a plain bench run (`runner::sample`), with the level as `--max-concurrency` or
//! `--request-rate` and the same seed every time (common random numbers). Prints each
//! measurement's verdict on stderr and the result block on stdout; with `--save-result`
//! writes the result as `<result>.slo_search.json`.

use std::sync::Arc;

use anyhow::{anyhow, bail};
use tokio_util::sync::CancellationToken;

use super::args::Args;
use super::execute::load_tokenizer;
use super::resolve::Resolved;
use crate::cli::{Exit, Failure, Outcome};
use crate::client::NoObserver;
use crate::load::Limit;
use crate::runner::sample::{self, Sample, SampleError};
use crate::search::{self, Axis, Iteration, Measurement, Probe, SearchSpec};

/// One level, measured.
async fn measure(
    args: &Args,
    r: &Resolved,
    tokenizer: Arc<crate::dataset::Tokenizer>,
    probe: Probe,
    spec: &SearchSpec,
    cancel: CancellationToken,
) -> anyhow::Result<Measurement> {
    let axis = spec.axis;
    let mut config = r.config.clone();
    config.shape = spec.shape_at(&r.config.shape, probe.level, args.burstiness);
    let prompts = match config.shape.limit {
        Limit::Requests(n) => n as usize,
        Limit::Duration(_) => args.num_prompts as usize,
    };
    let s = Sample {
        config: &config,
        dataset: &r.spec,
        tokenizer,
        prompts,
        site: None,
        prefix_block_tokens: args.prefix_block_size,
    };
    let sampled = sample::sample(s, |_| {}, Arc::new(NoObserver), cancel.clone())
        .await
        .map_err(|e| match e {
            SampleError::Client(e) => anyhow!(e),
            other => anyhow!(other),
        })?;
    if cancel.is_cancelled() {
        bail!(
            "interrupted while measuring {} {}",
            axis.name(),
            probe.level
        );
    }
    Ok(Measurement::of(&sampled.outcome.records, &config.shape))
}

/// The progress line of one measurement.
fn progress_line(axis: Axis, it: &Iteration) -> String {
    let checks: Vec<String> = it
        .checks
        .iter()
        .map(|c| {
            let b = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.4}"));
            format!(
                "{} {} {:.4} [{}, {}] vs {}",
                c.stat,
                c.metric_tag,
                c.observed,
                b(c.ci_low),
                b(c.ci_high),
                c.threshold
            )
        })
        .collect();
    format!(
        "search: {} {} ({:?}, {} requests) -> {:?}: {}",
        axis.name(),
        it.level,
        it.step,
        it.requests,
        it.verdict,
        checks.join("; ")
    )
}

/// Run the search and print (and with `--save-result`, write) its result.
pub(super) async fn run(
    args: &Args,
    r: Resolved,
    spec: SearchSpec,
    cancel: CancellationToken,
    quiet: bool,
) -> Outcome {
    let tokenizer = load_tokenizer(&r).await?;
    let axis = spec.axis;
    let (args_ref, r_ref, token, spec_ref) = (args, &r, cancel.clone(), &spec.clone());
    let measure_one = move |probe: Probe| {
        let (tokenizer, cancel) = (tokenizer.clone(), token.clone());
        async move { measure(args_ref, r_ref, tokenizer, probe, spec_ref, cancel).await }
    };
    let report = |it: &Iteration| {
        if !quiet {
            eprintln!("{}", progress_line(axis, it));
        }
    };
    let record = search::run(spec, measure_one, report).await.map_err(|e| {
        if cancel.is_cancelled() {
            Failure {
                exit: Exit::Interrupted,
                error: e,
            }
        } else {
            Failure::run_failed(e)
        }
    })?;
    print!("{}", search::render_text(&record));
    if args.save_result {
        let date = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
        let path = super::execute::result_path(args, &r, &date).with_extension("slo_search.json");
        std::fs::create_dir_all(&args.result_dir)
            .map_err(|e| anyhow!("cannot create {}: {e}", args.result_dir.display()))?;
        let text = serde_json::to_string_pretty(&record.to_json())
            .map_err(|e| anyhow!("cannot serialize the search result: {e}"))?;
        std::fs::write(&path, text + "\n")
            .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
        eprintln!("result: {}", path.display());
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::bench::resolve::tests::args;
    use crate::load::Rate;

    fn resolve(extra: &[&str]) -> anyhow::Result<Resolved> {
        crate::cli::bench::resolve::resolve(&args(extra))
    }

    #[test]
    fn search_flags_become_a_spec() {
        let r = resolve(&[
            "--search",
            "concurrency",
            "--search-min",
            "8",
            "--search-max",
            "1024",
            "--search-slo",
            "p99:ttft:2s",
            "p99:tpot:50ms",
            "--goodput",
            "ttft:500",
            "--search-attainment",
            "95",
            "--search-width",
            "0.05",
        ])
        .unwrap();
        let s = r.search.unwrap();
        assert_eq!(
            (s.axis, s.min, s.max),
            (Axis::Concurrency, 8.0, Some(1024.0))
        );
        assert_eq!(s.percentiles.len(), 2);
        let a = s.attainment.unwrap();
        assert_eq!((a.fraction, a.bounds.len()), (0.95, 1));
        assert_eq!(s.width, 0.05);
        assert!(resolve(&[]).unwrap().search.is_none());
    }

    #[test]
    fn bad_search_flags_say_what_to_write() {
        let cases: [(&[&str], &str); 5] = [
            (
                &["--search", "users", "--search-slo", "p99:ttft:1s"],
                "concurrency or request-rate",
            ),
            (&["--search", "concurrency"], "--search-slo"),
            (
                &[
                    "--search",
                    "concurrency",
                    "--max-concurrency",
                    "4",
                    "--search-slo",
                    "p99:ttft:1s",
                ],
                "leave it out",
            ),
            (
                &["--search", "request-rate", "--search-attainment", "90"],
                "--goodput",
            ),
            (
                &["--search", "concurrency", "--search-slo", "p99:ttft"],
                "pP:METRIC:LIMIT",
            ),
        ];
        for (argv, needle) in cases {
            let e = resolve(argv).err().unwrap().to_string();
            assert!(e.contains(needle), "{argv:?}: {e}");
        }
    }

    #[test]
    fn a_closed_loop_level_turns_every_slot_over_twice() {
        let r = resolve(&["--num-prompts", "100"]).unwrap();
        let at = |axis, level| {
            SearchSpec::new(axis, 1.0, None)
                .shape_at(&r.config.shape, level, 1.0)
                .limit
        };
        assert_eq!(at(Axis::Concurrency, 10.0), Limit::Requests(100));
        assert_eq!(at(Axis::Concurrency, 300.0), Limit::Requests(600));
        assert_eq!(at(Axis::RequestRate, 300.0), Limit::Requests(100));
        let shape =
            SearchSpec::new(Axis::Concurrency, 1.0, None).shape_at(&r.config.shape, 7.0, 1.0);
        assert_eq!(shape.max_concurrency, Some(7));
        let shape =
            SearchSpec::new(Axis::RequestRate, 1.0, None).shape_at(&r.config.shape, 7.5, 0.5);
        assert_eq!(
            shape.rate,
            Rate::Gamma {
                rps: 7.5,
                burstiness: 0.5
            }
        );
    }
}
