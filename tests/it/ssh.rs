//! SSH against real sshd servers on loopback (see `sshd`): commands with streamed output and
//! exit status, host key and auth failures, trusting a new key, jump hosts, tunnels, a dropped
//! connection, the remote process provider, the host lock and pre-flight.

use std::time::Duration;

use orchestrate::plan::{GpuRequest, GpuVendor};
use orchestrate::provider::ssh::{Reach, SshProvider};
use orchestrate::provider::{LaunchRequest, Provider};
use orchestrate::shutdown::Shutdown;
use orchestrate::ssh::{
    CommandEvent, HostCheck, HostKeyPolicy, HostLock, LockWait, Pool, Session, SshError, preflight,
};

use crate::sshd::{Keys, Sshd, eventually, running};

#[tokio::test]
async fn runs_a_remote_command_and_streams_its_output() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    sshd.trust(&keys);
    let host = sshd.host("h1", &keys);
    let session = Session::connect(&host, &keys.options(HostKeyPolicy::Strict))
        .await
        .unwrap();
    let mut command = session
        .exec("for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.1; done; exit 7")
        .await
        .unwrap();
    command.close_stdin();
    let (mut out, mut err, mut chunks) = (String::new(), String::new(), 0);
    let exit = loop {
        match command.next().await.unwrap() {
            CommandEvent::Stdout(b) => {
                chunks += 1;
                out.push_str(&String::from_utf8_lossy(&b));
            }
            CommandEvent::Stderr(b) => err.push_str(&String::from_utf8_lossy(&b)),
            CommandEvent::Exit(exit) => break exit,
            CommandEvent::Failed(e) => panic!("{e}"),
        }
    };
    assert_eq!(out, "out1\nout2\nout3\n");
    assert_eq!(err, "err1\nerr2\nerr3\n");
    assert!(chunks >= 2, "output arrived as it came, not at the end");
    assert_eq!(exit.code, 7);
    // The session is reused for further commands.
    assert_eq!(session.run_ok("echo again").await.unwrap(), "again\n");
}

#[tokio::test]
async fn unknown_host_key_is_refused_and_accept_new_trusts_it() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let host = sshd.host("h1", &keys);
    let err = Session::connect(&host, &keys.options(HostKeyPolicy::Strict))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, SshError::UnknownHostKey { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("unknown host key") && text.contains("--accept-new-host-keys"),
        "{text}"
    );
    assert!(!keys.known_hosts.exists(), "strict mode wrote known_hosts");

    let session = Session::connect(&host, &keys.options(HostKeyPolicy::AcceptNew))
        .await
        .unwrap();
    assert_eq!(session.run_ok("echo ok").await.unwrap(), "ok\n");
    let written = std::fs::read_to_string(&keys.known_hosts).unwrap();
    assert!(
        written.starts_with(&format!("[127.0.0.1]:{} ssh-ed25519 ", sshd.port)),
        "{written}"
    );
    // Now strict mode accepts it.
    Session::connect(&host, &keys.options(HostKeyPolicy::Strict))
        .await
        .unwrap();
}

#[tokio::test]
async fn changed_host_key_is_refused_even_with_accept_new() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let other = Sshd::start(&keys, "127.0.0.1");
    // File the other server's key under this server's address.
    let public = std::fs::read_to_string(other.host_key.with_extension("pub")).unwrap();
    let key: Vec<&str> = public.split_whitespace().take(2).collect();
    std::fs::write(
        &keys.known_hosts,
        format!("[127.0.0.1]:{} {} {}\n", sshd.port, key[0], key[1]),
    )
    .unwrap();
    let err = Session::connect(
        &sshd.host("h1", &keys),
        &keys.options(HostKeyPolicy::AcceptNew),
    )
    .await
    .err()
    .unwrap();
    assert!(matches!(err, SshError::ChangedHostKey { .. }), "{err}");
    assert!(err.to_string().contains("ssh-keygen -R"), "{err}");
}

#[tokio::test]
async fn wrong_user_key_is_a_clear_auth_error() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    sshd.trust(&keys);
    let mut host = sshd.host("h1", &keys);
    host.identity_files = vec![keys.stranger_key.clone()];
    let err = Session::connect(&host, &keys.options(HostKeyPolicy::Strict))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, SshError::Auth { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("stranger_key") && text.contains("authorized_keys"),
        "{text}"
    );
}

fn marker(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("orch-{name}-{}-{nanos}", std::process::id())
}

async fn connect(sshd: &Sshd, keys: &Keys) -> Session {
    sshd.trust(keys);
    Session::connect(&sshd.host("h", keys), &keys.options(HostKeyPolicy::Strict))
        .await
        .unwrap()
}

#[tokio::test]
async fn jump_host_carries_the_session() {
    let Some(keys) = Keys::new() else { return };
    let mut bastion = Sshd::start(&keys, "127.0.0.1");
    let inner = Sshd::start(&keys, "127.0.0.2");
    bastion.trust(&keys);
    inner.trust(&keys);
    let mut host = inner.host("inner", &keys);
    host.jump = Some(Box::new(bastion.host("bastion", &keys)));
    let session = Session::connect(&host, &keys.options(HostKeyPolicy::Strict))
        .await
        .unwrap();
    let seen = session.run_ok("echo $SSH_CONNECTION").await.unwrap();
    assert!(seen.contains("127.0.0.2"), "{seen}");
    // The traffic goes through the bastion: without it the inner session is gone.
    bastion.kill();
    let err = session.run_ok("echo still here").await.unwrap_err();
    assert!(matches!(err, SshError::Lost { .. }), "{err}");
}

#[tokio::test]
async fn tunnel_carries_http_to_a_server_behind_the_host() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
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
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
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
async fn killing_sshd_mid_command_fails_cleanly() {
    let Some(keys) = Keys::new() else { return };
    let mut sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
    let mark = marker("lost");
    let mut command = session
        .exec(&format!("echo started; sh -c 'cat >/dev/null; : {mark}'"))
        .await
        .unwrap();
    assert!(matches!(
        command.next().await,
        Some(CommandEvent::Stdout(_))
    ));
    sshd.kill();
    let outcome = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match command.next().await {
                Some(CommandEvent::Failed(e)) => break e,
                Some(CommandEvent::Exit(e)) => panic!("unexpected exit {e:?}"),
                None => panic!("no final event"),
                _ => {}
            }
        }
    })
    .await
    .expect("the loss was reported");
    assert!(matches!(outcome, SshError::Lost { .. }), "{outcome}");
    assert!(!session.is_alive());
    assert!(matches!(
        session.run("true").await,
        Err(SshError::Lost { .. })
    ));
    assert!(
        eventually(Duration::from_secs(10), || !running(&mark)).await,
        "the remote command outlived its connection"
    );
}

#[tokio::test]
async fn uploads_files_atomically() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("data.bin");
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&local, &data).unwrap();
    let remote = dir.path().join("remote/sub/data.bin");
    session
        .upload(&local, &remote.display().to_string(), 0o640)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&remote).unwrap(), data);
    session
        .upload_bytes(
            b"tok",
            &dir.path().join("remote/t.json").display().to_string(),
            0o600,
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("remote/t.json")).unwrap(),
        b"tok"
    );
}

fn launch_request(commands: Vec<String>, log: orchestrate::provider::LogSink) -> LaunchRequest {
    LaunchRequest {
        run_id: marker("run"),
        task: "t".to_string(),
        deployment: "d1".to_string(),
        role: "server".to_string(),
        index: 0,
        image: None,
        commands,
        env: vec![("GREETING".to_string(), "it's me".to_string())],
        port: 8000,
        volumes: Vec::new(),
        resources: Default::default(),
        log,
    }
}

#[tokio::test]
async fn provider_runs_remote_processes_into_the_log() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
    let shutdown = Shutdown::new();
    let provider = SshProvider::new(session, shutdown.clone(), Reach::Direct);
    let dir = tempfile::tempdir().unwrap();
    let log =
        orchestrate::provider::LogSink::create(&dir.path().join("logs/server-0.log")).unwrap();
    let instance = provider
        .launch(launch_request(
            vec![
                "echo \"hello $GREETING on $PORT\"".to_string(),
                "echo oops >&2".to_string(),
                "exit 3".to_string(),
            ],
            log,
        ))
        .await
        .unwrap();
    assert_eq!(shutdown.live(), 1, "emergency kill registered");
    assert_eq!(instance.base_url(), "http://127.0.0.1:8000");
    let exit = tokio::time::timeout(Duration::from_secs(10), instance.exited())
        .await
        .unwrap();
    assert_eq!(exit.code, Some(3));
    let text = std::fs::read_to_string(dir.path().join("logs/server-0.log")).unwrap();
    assert!(text.contains("hello it's me on 8000\n"), "{text}");
    assert!(text.contains("oops\n"), "{text}");
    instance.stop().await.unwrap();
    assert_eq!(shutdown.live(), 0);
}

#[tokio::test]
async fn stop_kills_the_remote_process_group() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
    let provider = SshProvider::new(session, Shutdown::new(), Reach::Direct)
        .with_grace(Duration::from_secs(2));
    let mark = marker("stop");
    // A child that ignores SIGTERM, in the background: only a group SIGKILL ends it.
    let command =
        format!("sh -c 'trap \"\" TERM; sleep 300; : {mark}' & echo ready; sleep 300; : {mark}");
    let log = orchestrate::provider::LogSink::memory();
    let instance = provider
        .launch(launch_request(vec![command], log.clone()))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || log
            .tail(5)
            .iter()
            .any(|l| l == "ready"))
        .await
    );
    assert!(running(&mark));
    instance.stop().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || !running(&mark)).await,
        "remote processes left behind"
    );
}

#[tokio::test]
async fn a_dropped_connection_kills_the_remote_processes() {
    let Some(keys) = Keys::new() else { return };
    let mut sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
    let provider = SshProvider::new(session, Shutdown::new(), Reach::Direct)
        .with_grace(Duration::from_secs(1));
    let mark = marker("drop");
    let log = orchestrate::provider::LogSink::memory();
    let instance = provider
        .launch(launch_request(
            vec![format!("echo ready; sleep 300; : {mark}")],
            log.clone(),
        ))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || log
            .tail(5)
            .iter()
            .any(|l| l == "ready"))
        .await
    );
    sshd.kill();
    let exit = tokio::time::timeout(Duration::from_secs(15), instance.exited())
        .await
        .expect("the instance reports the loss");
    assert_eq!(exit.code, None);
    assert!(
        log.tail(5)
            .iter()
            .any(|l| l.contains("lost the ssh connection")),
        "{:?}",
        log.tail(5)
    );
    assert!(
        eventually(Duration::from_secs(10), || !running(&mark)).await,
        "remote processes survived the dropped connection"
    );
    instance.stop().await.unwrap();
}

#[tokio::test]
async fn dropping_an_instance_kills_it() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
    let provider = SshProvider::new(session, Shutdown::new(), Reach::Direct)
        .with_grace(Duration::from_secs(1));
    let mark = marker("dropinst");
    let log = orchestrate::provider::LogSink::memory();
    let instance = provider
        .launch(launch_request(
            vec![format!("echo ready; sleep 300; : {mark}")],
            log.clone(),
        ))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || log
            .tail(5)
            .iter()
            .any(|l| l == "ready"))
        .await
    );
    drop(instance);
    assert!(
        eventually(Duration::from_secs(10), || !running(&mark)).await,
        "remote processes survived the drop"
    );
}

#[tokio::test]
async fn host_lock_serializes_and_reports_the_owner() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let first = connect(&sshd, &keys).await;
    let second = Session::connect(&sshd.host("h", &keys), &keys.options(HostKeyPolicy::Strict))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.lock").display().to_string();
    let held = HostLock::acquire_at(&first, &path, "run-a", LockWait::NoWait)
        .await
        .unwrap();
    let err = HostLock::acquire_at(&second, &path, "run-b", LockWait::NoWait)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, SshError::HostBusy { .. }), "{err}");
    assert!(err.to_string().contains("run-a"), "{err}");
    let waiter = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let lock = HostLock::acquire_at(
            &second,
            &path,
            "run-b",
            LockWait::For(Duration::from_secs(20)),
        )
        .await
        .unwrap();
        (started.elapsed(), lock)
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    held.release().await;
    let (waited, lock) = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
    let path = dir.path().join("host.lock").display().to_string();
    // A waiter that gives up (its future dropped) does not keep the lock once it frees up.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        HostLock::acquire_at(
            &first,
            &path,
            "run-c",
            LockWait::For(Duration::from_secs(30)),
        ),
    )
    .await;
    assert!(gave_up.is_err(), "run-b still holds the lock");
    // Dropping the guard frees the lock (the holder's stdin closes).
    drop(lock);
    let again = HostLock::acquire_at(
        &first,
        &path,
        "run-d",
        LockWait::For(Duration::from_secs(10)),
    )
    .await;
    assert!(again.is_ok(), "{:?}", again.err());
    // A holder whose connection is gone frees it too (a second sshd on the same machine
    // stands for a connection we can cut).
    let mut other = Sshd::start(&keys, "127.0.0.1");
    other.trust(&keys);
    let third = Session::connect(
        &other.host("h", &keys),
        &keys.options(HostKeyPolicy::Strict),
    )
    .await
    .unwrap();
    drop(again);
    let held = HostLock::acquire_at(
        &third,
        &path,
        "run-e",
        LockWait::For(Duration::from_secs(10)),
    )
    .await
    .unwrap();
    other.kill();
    std::mem::forget(held);
    let last = HostLock::acquire_at(
        &first,
        &path,
        "run-f",
        LockWait::For(Duration::from_secs(10)),
    )
    .await;
    assert!(last.is_ok(), "{:?}", last.err());
}

#[tokio::test]
async fn preflight_reports_every_failure_together() {
    let Some(keys) = Keys::new() else { return };
    let good = Sshd::start(&keys, "127.0.0.1");
    let stranger = Sshd::start(&keys, "127.0.0.3");
    good.trust(&keys);
    stranger.trust(&keys);
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let free_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut bad_host = stranger.host("bad", &keys);
    bad_host.identity_files = vec![keys.stranger_key.clone()];
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let pool = Pool::new(keys.options(HostKeyPolicy::Strict));
    let checks = [
        HostCheck {
            host: orchestrate::hosts::Host::direct("down", "127.0.0.1", closed_port, "root"),
            docker: false,
            gpus: None,
            ports: vec![],
        },
        HostCheck {
            host: good.host("good", &keys),
            docker: false,
            gpus: None,
            ports: vec![free_port],
        },
        HostCheck {
            host: good.host("busy", &keys),
            docker: false,
            gpus: Some(GpuRequest {
                count: 8,
                names: vec!["H200".to_string()],
                vendor: GpuVendor::Nvidia,
            }),
            ports: vec![busy_port, free_port],
        },
        HostCheck {
            host: bad_host,
            docker: false,
            gpus: None,
            ports: vec![],
        },
    ];
    let err = preflight(&pool, &checks).await.unwrap_err();
    let text = err.to_string();
    assert_eq!(err.failures.len(), 4, "{text}");
    assert!(text.contains("down: failed to connect"), "{text}");
    assert!(
        text.contains(&format!("busy: port {busy_port} is already in use")),
        "{text}"
    );
    assert!(text.contains("busy: needs 8 H200"), "{text}");
    assert!(text.contains("bad: failed to authenticate"), "{text}");
    assert!(!text.contains(&format!("port {free_port}")), "{text}");
    let reports = preflight(&pool, &checks[1..2]).await.unwrap();
    assert_eq!(reports[0].host, "good");
}

#[tokio::test]
async fn preflight_reaches_the_docker_engine_through_the_tunnel() {
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
    sshd.trust(&keys);
    let pool = Pool::new(keys.options(HostKeyPolicy::Strict));
    let check = HostCheck {
        host: sshd.host("docker-host", &keys),
        docker: true,
        gpus: None,
        ports: vec![],
    };
    let reports = preflight(&pool, &[check]).await.unwrap();
    assert_eq!(reports[0].docker.as_deref(), Some("OK"));
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

#[tokio::test]
async fn clean_kills_leftover_process_groups() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
    let provider = SshProvider::new(session.clone(), Shutdown::new(), Reach::Direct);
    let mark = marker("clean");
    let log = orchestrate::provider::LogSink::memory();
    let request = launch_request(
        vec![format!("echo ready; sleep 300; : {mark}")],
        log.clone(),
    );
    let run_id = request.run_id.clone();
    let instance = provider.launch(request).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || log
            .tail(5)
            .iter()
            .any(|l| l == "ready"))
        .await
    );
    // As if orchestrate had died without any teardown while the connection stayed up.
    std::mem::forget(instance);
    let found = orchestrate::provider::ssh::leftovers(&session)
        .await
        .unwrap();
    assert!(
        found.iter().any(|(dir, _)| dir.contains(&run_id)),
        "{found:?}"
    );
    let killed = orchestrate::provider::ssh::clean(&session).await.unwrap();
    assert!(
        killed.iter().any(|(dir, _)| dir.contains(&run_id)),
        "{killed:?}"
    );
    assert!(
        eventually(Duration::from_secs(10), || !running(&mark)).await,
        "clean left the group running"
    );
    let found = orchestrate::provider::ssh::leftovers(&session)
        .await
        .unwrap();
    assert!(
        !found.iter().any(|(dir, _)| dir.contains(&run_id)),
        "{found:?}"
    );
}

/// Figures, not a pass/fail test: round-trip latency and throughput of a tunnel against the
/// direct path. `cargo test --release --test it ssh_tunnel_figures -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints figures"]
async fn ssh_tunnel_figures() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    let session = connect(&sshd, &keys).await;
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

#[tokio::test]
async fn connect_and_command_timeouts_are_enforced() {
    let Some(keys) = Keys::new() else { return };
    // A server that accepts TCP but never speaks SSH.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let mut options = keys.options(HostKeyPolicy::Strict);
    options.connect_timeout = Duration::from_secs(1);
    let host = orchestrate::hosts::Host::direct("silent", "127.0.0.1", port, "root");
    let started = std::time::Instant::now();
    let err = Session::connect(&host, &options).await.err().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(err, SshError::Handshake { .. } | SshError::Timeout { .. }),
        "{err}"
    );

    let sshd = Sshd::start(&keys, "127.0.0.1");
    sshd.trust(&keys);
    let mut options = keys.options(HostKeyPolicy::Strict);
    options.command_timeout = Duration::from_secs(1);
    let session = Session::connect(&sshd.host("h", &keys), &options)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = session.run("sleep 20").await.unwrap_err();
    assert!(matches!(err, SshError::Timeout { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The session is still usable afterwards.
    assert_eq!(session.run_ok("echo fine").await.unwrap(), "fine\n");
}
