//! Host-level pieces: the per-host lock and pre-flight checks (all failures together).

use super::*;

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
            disk: None,
            cpus: None,
            memory: None,
        },
        HostCheck {
            host: good.host("good", &keys),
            docker: false,
            gpus: None,
            ports: vec![free_port],
            disk: None,
            cpus: None,
            memory: None,
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
            disk: Some(u64::MAX / 4),
            cpus: Some(1_000_000),
            memory: None,
        },
        HostCheck {
            host: bad_host,
            docker: false,
            gpus: None,
            ports: vec![],
            disk: None,
            cpus: None,
            memory: None,
        },
    ];
    let err = preflight(&pool, &checks).await.unwrap_err();
    let text = err.to_string();
    assert_eq!(err.failures.len(), 6, "{text}");
    assert!(text.contains("down: failed to connect"), "{text}");
    assert!(
        text.contains(&format!("busy: port {busy_port} is already in use")),
        "{text}"
    );
    assert!(text.contains("busy: needs 8 H200"), "{text}");
    assert!(
        text.contains("busy: needs 1000000 CPUs (resources.cpu), has "),
        "{text}"
    );
    assert!(
        text.contains("busy: needs ") && text.contains("of free disk (resources.disk), has "),
        "{text}"
    );
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
        disk: None,
        cpus: None,
        memory: None,
    };
    let reports = preflight(&pool, &[check]).await.unwrap();
    assert_eq!(reports[0].docker.as_deref(), Some("OK"));
}
