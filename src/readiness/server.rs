//! Waiting for one freshly started server: its probes retried under a deadline, failing at
//! once (with the log tail) when it exits while starting, and never passing for an instance
//! that has exited, whatever answers on its port.

use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use super::excerpt::tail;
use super::probe::{GenerateProbe, backoff, generate_once, probe};
use crate::fetch::Origin;
use crate::plan::ReadinessPlan;
use crate::provider::{ExitInfo, Instance};

/// Why a server did not become ready.
#[derive(Debug, thiserror::Error)]
pub enum ReadinessError {
    #[error("{what} exited during startup ({exit}) after {elapsed:.1?}; last log lines:\n{tail}")]
    Exited {
        what: String,
        exit: ExitInfo,
        elapsed: Duration,
        tail: String,
    },
    #[error(
        "{what} was not ready after {timeout:?} (last probe: {last}); raise `readiness.timeout` if the model needs longer to load; last log lines:\n{tail}"
    )]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
        tail: String,
    },
    #[error("cancelled while waiting for {what} to become ready")]
    Cancelled { what: String },
}

/// Wait until `instance` passes `plan`'s probes. Returns the time it took.
pub async fn wait(
    instance: &dyn Instance,
    plan: &ReadinessPlan,
    generate: Option<&GenerateProbe>,
    cancel: &CancellationToken,
) -> Result<Duration, ReadinessError> {
    let started = Instant::now();
    let base = instance.base_url();
    let origin = Origin::parse(&base).map(|o| o.root());
    let interval = plan.interval;
    let deadline = started + plan.timeout;
    let mut last;
    let mut attempts = 0u32;
    let mut http_ok = false;
    loop {
        let attempt_timeout = interval
            .max(Duration::from_secs(2))
            .min(Duration::from_secs(10));
        let outcome = match &origin {
            Err(e) => Err(e.to_string()),
            Ok(origin) if !http_ok => probe(origin, plan, attempt_timeout).await,
            Ok(origin) => {
                let probe = generate.expect("generate probe only after http passed");
                generate_once(origin, probe, attempt_timeout).await
            }
        };
        match outcome {
            Ok((true, _)) if !http_ok && plan.generate && generate.is_some() => {
                http_ok = true;
                continue;
            }
            Ok((true, _)) => {
                // A probe answered by some other process on the port proves nothing: the
                // instance itself must still be running.
                if let Some(exit) = instance.exited().now_or_never() {
                    return Err(ReadinessError::Exited {
                        what: instance.describe(),
                        exit,
                        elapsed: started.elapsed(),
                        tail: tail(instance),
                    });
                }
                return Ok(started.elapsed());
            }
            Ok((false, text)) => last = text,
            Err(e) => last = e,
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(ReadinessError::Timeout {
                what: instance.describe(),
                timeout: plan.timeout,
                last,
                tail: tail(instance),
            });
        }
        // Poll fast at first (servers that start quickly are seen at once), then every `interval`.
        attempts += 1;
        let pause = backoff(attempts, interval).min(deadline - now);
        tokio::select! {
            exit = instance.exited() => {
                return Err(ReadinessError::Exited { what: instance.describe(), exit, elapsed: started.elapsed(), tail: tail(instance) });
            }
            _ = cancel.cancelled() => return Err(ReadinessError::Cancelled { what: instance.describe() }),
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::deploy::Resources;
    use crate::plan::HttpProbePlan;
    use crate::provider::local::LocalProvider;
    use crate::provider::{LaunchRequest, LogSink, Provider};
    use crate::shutdown::Shutdown;

    fn plan(timeout: Duration) -> ReadinessPlan {
        ReadinessPlan {
            http: Some(HttpProbePlan {
                path: "/health".into(),
                status: 200,
            }),
            generate: false,
            interval: Duration::from_millis(100),
            timeout,
            alive_only: false,
            workers: None,
            ray: None,
        }
    }

    pub(in crate::readiness) async fn launch(commands: &[&str], port: u16) -> Box<dyn Instance> {
        LocalProvider::new(Shutdown::new())
            .with_grace(Duration::from_millis(200))
            .launch(LaunchRequest {
                run_id: "r".into(),
                task: "t".into(),
                deployment: "d1".into(),
                role: "server".into(),
                index: 0,
                place: crate::provider::ProcessPlace::default(),
                image: None,
                commands: commands.iter().map(|s| s.to_string()).collect(),
                env: vec![],
                port,
                volumes: vec![],
                resources: Resources::default(),
                log: LogSink::memory(),
                container: Default::default(),
            })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn an_exiting_server_fails_at_once_with_its_log_tail() {
        let instance = launch(
            &[
                "echo loading weights",
                "echo 'CUDA out of memory' >&2",
                "exit 7",
            ],
            9,
        )
        .await;
        let started = Instant::now();
        let err = wait(
            instance.as_ref(),
            &plan(Duration::from_secs(60)),
            None,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "took {:?}",
            started.elapsed()
        );
        let text = err.to_string();
        assert!(
            text.contains("exit code 7") && text.contains("CUDA out of memory"),
            "{text}"
        );
        instance.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_server_that_never_answers_fails_at_the_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let instance = launch(&["sleep 30"], port).await;
        let started = Instant::now();
        let err = wait(
            instance.as_ref(),
            &plan(Duration::from_millis(700)),
            None,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(700) && took < Duration::from_secs(4),
            "took {took:?}"
        );
        assert!(matches!(err, ReadinessError::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("readiness.timeout"));
        instance.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_foreign_server_on_the_port_does_not_make_an_exited_instance_ready() {
        let foreign = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = foreign.local_addr().unwrap().port();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = foreign.accept().await {
                held.push(stream);
            }
        });
        let instance = launch(&["echo bind failed >&2", "exit 1"], port).await;
        tokio::time::timeout(Duration::from_secs(5), instance.exited())
            .await
            .unwrap();
        let tcp_plan = ReadinessPlan {
            http: None,
            ..plan(Duration::from_secs(5))
        };
        let err = wait(
            instance.as_ref(),
            &tcp_plan,
            None,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ReadinessError::Exited { .. }), "{err}");
        assert!(err.to_string().contains("bind failed"), "{err}");
        instance.stop().await.unwrap();
    }

    #[tokio::test]
    async fn cancellation_stops_the_wait() {
        let instance = launch(&["sleep 30"], 9).await;
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            c.cancel();
        });
        let err = wait(
            instance.as_ref(),
            &plan(Duration::from_secs(60)),
            None,
            &cancel,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ReadinessError::Cancelled { .. }));
        instance.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_tcp_probe_retries_every_interval() {
        // A port proxy with nothing behind it: every probe fails, so the probe count over a
        // fixed deadline shows the pause between probes.
        let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = proxy.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = proxy.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                drop(stream);
            }
        });
        let instance = launch(&["sleep 30"], port).await;
        let tcp_plan = ReadinessPlan {
            http: None,
            interval: Duration::from_millis(50),
            ..plan(Duration::from_millis(1500))
        };
        let err = wait(
            instance.as_ref(),
            &tcp_plan,
            None,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("closed at once"), "{err}");
        // Every 50ms: about 30 probes (a fixed 500ms pause would give 5 or 6).
        let probes = accepted.load(std::sync::atomic::Ordering::Relaxed);
        assert!(probes >= 12, "{probes} probes in 1.5s");
        instance.stop().await.unwrap();
    }
}
