//! What the provider checks on and learns from the engine: pre-flight reports every problem
//! together and starts nothing; host facts record the engine and the GPU tools.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_reports_every_problem_together_and_starts_nothing() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let busy = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let gpu = GpuRequest {
        count: 1,
        names: vec![],
        vendor: GpuVendor::Nvidia,
    };
    let no_nvidia = Command::new("nvidia-smi").output().is_err();
    let mut checks = vec![
        PreflightCheck::Image(IMAGE.into()),
        PreflightCheck::Image("orchestrate-test/does-not-exist:0.0.1".into()),
        PreflightCheck::Port {
            port: busy_port,
            network: Network::Bridge,
        },
        PreflightCheck::Port {
            port: free_port(),
            network: Network::Bridge,
        },
    ];
    if no_nvidia {
        checks.push(PreflightCheck::Gpus(gpu));
    }
    let before = provider.list(&LabelFilter::default()).await.unwrap().len();
    let problems = provider.preflight(&checks).await.unwrap_err();
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(
        matches!(&problems[0], PreflightProblem::ImageUnavailable { image, .. } if image.contains("does-not-exist")),
        "{text:?}"
    );
    assert!(
        matches!(&problems[1], PreflightProblem::PortInUse { port, .. } if *port == busy_port),
        "{text:?}"
    );
    if no_nvidia {
        assert!(text[2].contains("nvidia-smi is not installed"), "{text:?}");
    }
    assert_eq!(problems.len(), if no_nvidia { 3 } else { 2 }, "{text:?}");
    assert_eq!(
        provider.list(&LabelFilter::default()).await.unwrap().len(),
        before
    );

    let fine = [
        PreflightCheck::Image(IMAGE.into()),
        PreflightCheck::Port {
            port: free_port(),
            network: Network::Bridge,
        },
    ];
    provider.preflight(&fine).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_facts_record_the_engine_and_which_gpu_tools_exist() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let facts = provider.host_facts().await;
    let version = facts["docker"]["version"].as_str().unwrap();
    assert!(!version.is_empty());
    for tool in ["nvidia-smi", "rocm-smi", "amd-smi"] {
        let installed = Command::new(tool).arg("--help").output().is_ok();
        assert_eq!(
            facts["gpus"][tool]["present"], installed,
            "{tool}: {facts:#}"
        );
    }
}
