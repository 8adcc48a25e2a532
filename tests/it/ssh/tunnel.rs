//! Local port forwards: HTTP to a server behind the host, a remote unix socket, the remote
//! Docker engine through bollard, and the tunnel figures (ignored benchmark).

use super::*;

#[tokio::test]
async fn tunnel_carries_http_to_a_server_behind_the_host() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
    // A tiny HTTP server on loopback "behind" the host, answering with a large body.
    let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = server.local_addr().unwrap().port();
    let body: String = (0..200_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let served = body.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = server.accept().await {
            let served = served.clone();
            tokio::spawn(async move {
                let mut request = vec![0u8; 1024];
                let n = stream.read(&mut request).await.unwrap();
                let path = String::from_utf8_lossy(&request[..n])
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                let reply = format!(
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{path}{served}",
                    path.len() + served.len()
                );
                stream.write_all(reply.as_bytes()).await.unwrap();
            });
        }
    });
    let tunnel = session
        .forward(orchestrate::ssh::ForwardTarget::Tcp {
            host: "127.0.0.1".to_string(),
            port,
        })
        .await
        .unwrap();
    let addr = tunnel.local_addr();
    let requests = (0..5).map(|i| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(format!("GET /r{i} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    });
    let answers = tokio::time::timeout(
        Duration::from_secs(20),
        futures_util::future::join_all(requests),
    )
    .await
    .expect("tunnel requests finished");
    for (i, answer) in answers.iter().enumerate() {
        assert!(
            answer.starts_with("HTTP/1.0 200 OK"),
            "{}",
            &answer[..40.min(answer.len())]
        );
        assert!(answer.ends_with(&format!("/r{i}{body}")), "body {i} intact");
    }
}

#[tokio::test]
async fn tunnel_reaches_a_remote_unix_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("echo.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 5];
        stream.read_exact(&mut buf).await.unwrap();
        stream.write_all(b"pong:").await.unwrap();
        stream.write_all(&buf).await.unwrap();
    });
    let tunnel = session
        .forward(orchestrate::ssh::ForwardTarget::Unix {
            path: path.display().to_string(),
        })
        .await
        .unwrap();
    let mut stream = tokio::net::TcpStream::connect(tunnel.local_addr())
        .await
        .unwrap();
    stream.write_all(b"hello").await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert_eq!(answer, "pong:hello");
}

#[tokio::test]
async fn remote_docker_engine_answers_through_the_tunnel() {
    let Some(keys) = Keys::new() else { return };
    if !std::path::Path::new(orchestrate::ssh::DOCKER_SOCKET).exists() {
        assert!(
            !crate::common::in_ci(),
            "CI=true but no Docker engine socket"
        );
        eprintln!(
            "skipping: no Docker engine at {}",
            orchestrate::ssh::DOCKER_SOCKET
        );
        return;
    }
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
    let docker = orchestrate::ssh::RemoteDocker::connect(&session)
        .await
        .unwrap();
    let version = docker.client().version().await.unwrap();
    assert!(version.api_version.is_some(), "{version:?}");
    // Several requests share the tunnel (bollard keeps connections alive).
    for _ in 0..3 {
        docker.client().ping().await.unwrap();
    }
    // No engine at that path: a clear error, not a hang.
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        orchestrate::ssh::RemoteDocker::connect_to(&session, "/nonexistent/docker.sock"),
    )
    .await
    .expect("answered in time")
    .err()
    .unwrap();
    assert!(
        err.to_string().contains("/nonexistent/docker.sock"),
        "{err}"
    );
}

/// Figures, not a pass/fail test: round-trip latency and throughput of a tunnel against the
/// direct path. `cargo test --release --test it ssh_tunnel_figures -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints figures"]
async fn ssh_tunnel_figures() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
    let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = server.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = server.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let tunnel = session
        .forward(orchestrate::ssh::ForwardTarget::Tcp {
            host: "127.0.0.1".to_string(),
            port,
        })
        .await
        .unwrap();
    for (name, addr) in [
        ("direct", std::net::SocketAddr::from(([127, 0, 0, 1], port))),
        ("tunnel", tunnel.local_addr()),
    ] {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let mut times = Vec::new();
        let mut buf = [0u8; 64];
        for _ in 0..2000 {
            let start = std::time::Instant::now();
            stream.write_all(&[7u8; 64]).await.unwrap();
            stream.read_exact(&mut buf).await.unwrap();
            times.push(start.elapsed());
        }
        times.sort();
        let total: usize = 64 << 20;
        let (mut reader, mut writer) = stream.into_split();
        let start = std::time::Instant::now();
        let send = tokio::spawn(async move {
            let chunk = vec![1u8; 64 * 1024];
            for _ in 0..total / chunk.len() {
                writer.write_all(&chunk).await.unwrap();
            }
            writer
        });
        let mut got = 0;
        let mut big = vec![0u8; 64 * 1024];
        while got < total {
            got += reader.read(&mut big).await.unwrap();
        }
        let _writer = send.await.unwrap();
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{name}: round trip p50 {:?} p99 {:?}; echo throughput {:.0} MB/s",
            times[times.len() / 2],
            times[times.len() * 99 / 100],
            total as f64 / secs / 1e6
        );
    }
}

/// The docker provider on a bollard client that goes through an SSH tunnel to the host's
/// engine socket: a mock server container started, reached through a second (TCP) tunnel
/// to the host's loopback, logs streamed, stopped and removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_provider_runs_a_container_through_the_tunnel() {
    use orchestrate::provider::docker::{DockerOptions, DockerProvider, LabelFilter};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const IMAGE: &str = "orchestrate-mock:test";
    let Some(keys) = Keys::new() else { return };
    if !std::path::Path::new(orchestrate::ssh::DOCKER_SOCKET).exists() {
        assert!(
            !crate::common::in_ci(),
            "CI=true but no Docker engine socket"
        );
        eprintln!(
            "skipping: no Docker engine at {}",
            orchestrate::ssh::DOCKER_SOCKET
        );
        return;
    }
    let built =
        std::process::Command::new(crate::common::repo().join("scripts/build-mock-image.sh"))
            .arg(crate::common::bin())
            .arg(IMAGE)
            .output()
            .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );

    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
    let remote = orchestrate::ssh::RemoteDocker::connect(&session)
        .await
        .unwrap();
    let shutdown = Shutdown::new();
    let provider = DockerProvider::with_client(
        remote.client().clone(),
        shutdown.clone(),
        DockerOptions {
            host_label: "tunnel-host".into(),
            engine_is_local: false,
            stop_grace: Duration::from_secs(2),
            pull_idle_timeout: Duration::from_secs(10),
            ..DockerOptions::default()
        },
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run = marker("docker");
    let log = orchestrate::provider::LogSink::memory();
    let request = LaunchRequest {
        run_id: run.clone(),
        task: "remote-docker".to_string(),
        deployment: "d1".to_string(),
        role: "server".to_string(),
        index: 0,
        place: orchestrate::provider::ProcessPlace::default(),
        image: Some(IMAGE.to_string()),
        commands: vec![format!(
            "echo starting on $PORT; exec orchestrate mock-server --host 0.0.0.0 --port {port}"
        )],
        env: vec![("PORT".to_string(), port.to_string())],
        port,
        volumes: Vec::new(),
        resources: Default::default(),
        log: log.clone(),
        container: Default::default(),
    };
    let instance = provider.launch(request).await.unwrap();
    let filter = LabelFilter {
        run: Some(run.clone()),
        task: None,
    };
    assert_eq!(provider.list(&filter).await.unwrap().len(), 1);
    // The server port is published on the host's loopback: reach it through a TCP tunnel.
    let tunnel = session
        .forward(orchestrate::ssh::ForwardTarget::Tcp {
            host: "127.0.0.1".to_string(),
            port,
        })
        .await
        .unwrap();
    let addr = tunnel.local_addr();
    let healthy = async {
        loop {
            if let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await {
                let _ = stream
                    .write_all(b"GET /health HTTP/1.0\r\nHost: x\r\n\r\n")
                    .await;
                let mut answer = String::new();
                let _ = stream.read_to_string(&mut answer).await;
                if answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200") {
                    return answer;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), healthy)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no healthy answer through the tunnel; log: {:?}",
                log.tail(20)
            )
        });
    assert!(
        log.tail(20)
            .iter()
            .any(|l| l == &format!("starting on {port}")),
        "{:?}",
        log.tail(20)
    );
    instance.stop().await.unwrap();
    assert!(
        provider.list(&filter).await.unwrap().is_empty(),
        "container left behind"
    );
    assert_eq!(shutdown.live(), 0);
}
