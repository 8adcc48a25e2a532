//! Scraping the servers' Prometheus `/metrics` during a run, on the run's clock: the entry
//! (the URL the client loads) and the deployment's other instances, each once before the first
//! request (stamped 0), about every interval while the run goes, and once after the last; at
//! the end, the entry's window figures (`server_metrics::window`) and every server's gauge
//! series (`gauges`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::MetricsSource;
use super::gauges::{ServerSample, ServerSeries};
use super::server_metrics::{ServerWindow, Snapshot, prefix_hit_rate, scrape, window};
use crate::fetch::Origin;

/// One server scraped during a run.
struct Source {
    name: String,
    url: String,
    origin: Origin,
    /// (microseconds since the run start, snapshot).
    snaps: Arc<Mutex<Vec<(u64, Snapshot)>>>,
}

impl Source {
    fn keep(&self, at: u64, s: Snapshot) {
        self.snaps.lock().map(|mut v| v.push((at, s))).ok();
    }
}

/// The scrapes of one run: one before the first request (stamped 0), one about every
/// `every` while it runs, one after the last, of the entry and of each other source; at the
/// end, the entry's window between the snapshots nearest the measured window's edges, and
/// every source's gauge series.
pub(crate) struct Scraper {
    path: String,
    every: Duration,
    /// The entry first.
    sources: Vec<Arc<Source>>,
    tasks: Vec<JoinHandle<()>>,
}

fn since_us(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX)
}

impl Scraper {
    /// The first scrape of every source, before the run starts. `others` whose URL does not
    /// parse are left out with a warning.
    pub(crate) async fn before(
        entry: (Origin, String),
        others: &[MetricsSource],
        path: String,
        every: Duration,
    ) -> Self {
        let source = |name: &str, url: String, origin: Origin| {
            Arc::new(Source {
                name: name.to_string(),
                url,
                origin,
                snaps: Arc::new(Mutex::new(Vec::new())),
            })
        };
        let mut sources = vec![source("entry", entry.1, entry.0)];
        for o in others {
            match Origin::parse(&o.base_url) {
                Ok(origin) => sources.push(source(&o.name, o.base_url.clone(), origin.root())),
                Err(e) => tracing::warn!("not scraping {}'s /metrics: {e}", o.name),
            }
        }
        let firsts = futures_util::future::join_all(
            sources.iter().map(|s| scrape(&s.origin, path.as_str())),
        )
        .await;
        for (s, first) in sources.iter().zip(firsts) {
            if let Some(first) = first {
                s.keep(0, first);
            }
        }
        Scraper {
            path,
            every,
            sources,
            tasks: Vec::new(),
        }
    }

    /// Scrape every source about once every `every` from the run start `t0` until `stop`.
    pub(crate) fn start(&mut self, t0: Instant, stop: CancellationToken) {
        for source in &self.sources {
            let (source, path, stop, every) =
                (source.clone(), self.path.clone(), stop.clone(), self.every);
            self.tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(every) => {}
                    }
                    if let Some(s) = scrape(&source.origin, &path).await {
                        source.keep(since_us(t0), s);
                    }
                }
            }));
        }
    }

    /// After the run (the `stop` of [`Scraper::start`] given): the last scrapes, then the
    /// entry's figures over `[start_us, end_us]` (`None` for `end_us` means up to the last
    /// scrape) and, when `series`, every source's gauge series.
    pub(crate) async fn finish(
        mut self,
        t0: Instant,
        (start_us, end_us): (u64, Option<u64>),
        series: bool,
    ) -> (Option<ServerWindow>, Vec<ServerSeries>) {
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        let lasts = futures_util::future::join_all(
            self.sources
                .iter()
                .map(|s| scrape(&s.origin, self.path.as_str())),
        )
        .await;
        for (s, last) in self.sources.iter().zip(lasts) {
            if let Some(last) = last {
                s.keep(since_us(t0), last);
            }
        }
        let snaps = |s: &Source| s.snaps.lock().map(|v| v.clone()).unwrap_or_default();
        let window = self
            .sources
            .first()
            .and_then(|s| window(&snaps(s), start_us, end_us.unwrap_or(u64::MAX)));
        let series = if series {
            self.sources
                .iter()
                .map(|s| ServerSeries {
                    source: s.name.clone(),
                    url: s.url.clone(),
                    samples: samples(&snaps(s)),
                })
                .collect()
        } else {
            Vec::new()
        };
        (window, series)
    }
}

/// The samples of one server's snapshots (in scrape order, stamped in µs since the run start).
pub(crate) fn samples(snaps: &[(u64, Snapshot)]) -> Vec<ServerSample> {
    snaps
        .iter()
        .enumerate()
        .map(|(i, (at, s))| {
            let prev = i.checked_sub(1).map(|p| &snaps[p].1);
            ServerSample {
                t_s: *at as f64 / 1e6,
                running: s.gauges.running(),
                waiting: s.gauges.waiting(),
                kv_cache_usage: s.gauges.kv_cache_usage(),
                prefix_cache_hit_rate: prev.and_then(|p| prefix_hit_rate(p, s, &[s])),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::server_metrics::parse;
    use super::*;

    #[test]
    fn samples_carry_the_gauges_and_the_hit_rate_between_scrapes() {
        let vllm = |running: u32, q: u32, h: u32| {
            parse(&format!(
                "vllm:num_requests_running {running}\nvllm:prefix_cache_queries_total {q}\nvllm:prefix_cache_hits_total {h}\n"
            ))
        };
        let snaps = [
            (0, vllm(0, 0, 0)),
            (1_000_000, vllm(4, 100, 25)),
            (2_500_000, vllm(6, 300, 175)),
            (3_000_000, vllm(0, 300, 175)),
        ];
        let s = samples(&snaps);
        let t: Vec<f64> = s.iter().map(|x| x.t_s).collect();
        assert_eq!(t, [0.0, 1.0, 2.5, 3.0]);
        let running: Vec<Option<f64>> = s.iter().map(|x| x.running).collect();
        assert_eq!(running, [Some(0.0), Some(4.0), Some(6.0), Some(0.0)]);
        let hits: Vec<Option<f64>> = s.iter().map(|x| x.prefix_cache_hit_rate).collect();
        assert_eq!(hits, [None, Some(0.25), Some(0.75), None]);
        assert_eq!(s[1].waiting, None);
        // SGLang's hit-rate gauge stands for itself.
        let sglang = "sglang:num_running_reqs 3\nsglang:cache_hit_rate 0.0075\n";
        let g = samples(&[(0, parse(sglang)), (1_000_000, parse(sglang))]);
        assert_eq!(g[1].prefix_cache_hit_rate, Some(0.0075));
    }
}
