//! The docker provider against the real engine on this machine, with an image built locally
//! from our own binary (scripts/build-mock-image.sh; no registry): containers start, logs
//! land in the sink, exits are seen at once, every teardown path removes the container, and
//! `orchestrate ps` / `orchestrate clean` find what a dead owner left behind.
//!
//! Needs the Docker engine: in CI (`CI=true`) a missing engine fails these tests; elsewhere
//! they skip with a printed reason.
//!
//! This module holds the fixtures (the provider, the test image, launch requests); the
//! tests are in one file per concept.

mod container;
mod engine;
mod exec;
mod image;
mod leftovers;
mod remote;
mod run;
mod secrets;
mod teardown;

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use orchestrate::deploy::{GpuRequest, GpuVendor, Resources};

use orchestrate::deploy::{ContainerOptions, Network};
use orchestrate::plan::{HttpProbePlan, ReadinessPlan};
use orchestrate::provider::docker::{
    DockerOptions, DockerProvider, LabelFilter, PreflightCheck, PreflightProblem,
};
use orchestrate::provider::{LaunchRequest, LogSink, Provider};
use orchestrate::readiness::{self, ReadinessError};
use orchestrate::shutdown::Shutdown;
use tokio_util::sync::CancellationToken;

use crate::common;

pub(crate) const IMAGE: &str = "orchestrate-mock:test";

/// The provider for the local engine, or `None` (skip) outside CI when there is no engine.
pub(crate) async fn provider(shutdown: &Shutdown) -> Option<DockerProvider> {
    provider_with(
        shutdown,
        DockerOptions {
            stop_grace: Duration::from_secs(2),
            pull_idle_timeout: Duration::from_secs(10),
            ..DockerOptions::default()
        },
    )
    .await
}

async fn provider_with(shutdown: &Shutdown, options: DockerOptions) -> Option<DockerProvider> {
    match DockerProvider::connect(shutdown.clone(), options).await {
        Ok(provider) => {
            mock_image();
            Some(provider)
        }
        Err(e) if common::in_ci() => panic!("CI=true but the docker engine is unreachable: {e}"),
        Err(e) => {
            eprintln!("skipping: no docker engine ({e})");
            None
        }
    }
}

/// Build (once per test process, and only when the binary changed) the local test image.
pub(crate) fn mock_image() -> &'static str {
    static BUILT: OnceLock<Result<String, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let out = Command::new(common::repo().join("scripts/build-mock-image.sh"))
            .arg(common::bin())
            .arg(IMAGE)
            .output()
            .map_err(|e| format!("cannot run scripts/build-mock-image.sh: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    });
    if let Err(e) = built {
        panic!("cannot build {IMAGE}: {e}");
    }
    IMAGE
}

/// A run id no other test (or earlier run) uses.
fn run_id(test: &str) -> String {
    format!("it-{}-{test}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    nanos % 100_000
}

fn request(run: &str, task: &str, commands: &[&str], log: LogSink) -> LaunchRequest {
    LaunchRequest {
        run_id: run.into(),
        task: task.into(),
        deployment: "d1".into(),
        role: "server".into(),
        index: 0,
        place: orchestrate::provider::ProcessPlace::default(),
        image: Some(IMAGE.into()),
        commands: commands.iter().map(|c| c.to_string()).collect(),
        env: vec![("GREETING".into(), "hello from the container".into())],
        port: free_port(),
        volumes: vec![],
        resources: Resources::default(),
        log,
        container: ContainerOptions::default(),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Containers of `run` still on the engine.
async fn containers_of(provider: &DockerProvider, run: &str) -> Vec<String> {
    let filter = LabelFilter {
        run: Some(run.into()),
        task: None,
    };
    provider
        .list(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect()
}

/// Sleeps until SIGTERM, then says so (the last line must survive the teardown).
const WAIT_FOR_TERM: &str = "trap 'echo got SIGTERM, shutting down; exit 0' TERM; sleep 300 & wait";
