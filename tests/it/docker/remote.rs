//! An engine that is not local, reached through a forwarded TCP port (what an SSH tunnel
//! does): containers run and every one is cleaned up through the same endpoint.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_reached_through_a_forwarded_tcp_port_runs_and_cleans_up() {
    let shutdown = Shutdown::new();
    let Some(local) = provider(&shutdown).await else {
        return;
    };
    // What an SSH tunnel does: a local TCP port whose connections reach the engine's socket.
    let socket = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| "/var/run/docker.sock".into());
    let forward = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let endpoint = format!("tcp://{}", forward.local_addr().unwrap());
    let tunnel = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = forward.accept().await {
            let socket = socket.clone();
            tokio::spawn(async move {
                if let Ok(mut unix) = tokio::net::UnixStream::connect(&socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    let options = DockerOptions {
        host_label: "tunnelled".into(),
        stop_grace: Duration::from_secs(2),
        engine_is_local: false,
        ..DockerOptions::default()
    };
    let remote = DockerProvider::connect_to(&endpoint, shutdown.clone(), options)
        .await
        .unwrap();
    assert_eq!(remote.name(), "docker@tunnelled");
    let run = run_id("tunnel");
    let first = remote
        .launch(request(
            &run,
            "tunnel",
            &["echo through the tunnel", WAIT_FOR_TERM],
            LogSink::memory(),
        ))
        .await
        .unwrap();
    let mut second_request = request(&run, "tunnel", &[WAIT_FOR_TERM], LogSink::memory());
    second_request.index = 1;
    let second = remote.launch(second_request).await.unwrap();
    assert_eq!(containers_of(&local, &run).await.len(), 2);
    first.stop().await.unwrap();
    drop(second); // the Drop fallback reconnects through the same endpoint
    assert!(containers_of(&local, &run).await.is_empty());
    let facts = remote.host_facts().await;
    assert_eq!(facts["docker"]["endpoint"], endpoint.as_str());
    assert!(
        facts["gpus"].is_string(),
        "GPUs are not probed for a remote engine: {facts}"
    );
    tunnel.abort();
}
