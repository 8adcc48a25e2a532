//! The ssh provider: remote process groups with logs streamed back, stopped, dropped, killed
//! when the connection drops, and leftovers cleaned.

use super::*;

fn launch_request(commands: Vec<String>, log: orchestrate::provider::LogSink) -> LaunchRequest {
    LaunchRequest {
        run_id: marker("run"),
        task: "t".to_string(),
        deployment: "d1".to_string(),
        role: "server".to_string(),
        index: 0,
        place: orchestrate::provider::ProcessPlace::default(),
        image: None,
        commands,
        env: vec![("GREETING".to_string(), "it's me".to_string())],
        port: 8000,
        volumes: Vec::new(),
        resources: Default::default(),
        log,
        container: Default::default(),
    }
}

#[tokio::test]
async fn provider_runs_remote_processes_into_the_log() {
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
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
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
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
    let Some((_keys, mut sshd, session)) = connected().await else {
        return;
    };
    let provider = SshProvider::new(session, Shutdown::new(), Reach::Direct)
        .with_grace(Duration::from_secs(1));
    let mark = marker("drop");
    let log = orchestrate::provider::LogSink::memory();
    let request = launch_request(
        vec![format!("echo ready; sleep 300; : {mark}")],
        log.clone(),
    );
    let state = std::path::PathBuf::from("/tmp/orchestrate").join(&request.run_id);
    let instance = provider.launch(request).await.unwrap();
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
    assert!(
        eventually(Duration::from_secs(5), || !state.exists()).await,
        "the remote wrapper did not clean up {}",
        state.display()
    );
    instance.stop().await.unwrap();
}

#[tokio::test]
async fn dropping_an_instance_kills_it() {
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
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
async fn clean_kills_leftover_process_groups() {
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
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
    let killed = orchestrate::provider::ssh::clean(&session, Some(&run_id))
        .await
        .unwrap();
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

#[tokio::test]
async fn emergency_kill_kills_the_remote_group() {
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
    let shutdown = Shutdown::new();
    let provider = SshProvider::new(session, shutdown.clone(), Reach::Direct)
        .with_grace(Duration::from_secs(30));
    let mark = marker("forced");
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
    // A second Ctrl-C: the registered kill runs synchronously (SIGKILL, no grace).
    shutdown.kill_all();
    assert!(
        eventually(Duration::from_secs(5), || !running(&mark)).await,
        "the emergency kill left the group running"
    );
    let exit = tokio::time::timeout(Duration::from_secs(10), instance.exited())
        .await
        .unwrap();
    assert_eq!(exit.signal, Some(9), "{exit:?}");
}

/// A real server (our mock inference server) started as a remote process and reached
/// through the provider's tunnel (`Reach::Tunnel`), then stopped with nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_mock_server_answers_through_the_provider_tunnel() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
    let provider = SshProvider::new(session, Shutdown::new(), Reach::Tunnel)
        .with_grace(Duration::from_secs(2));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mark = marker("mock");
    let log = orchestrate::provider::LogSink::memory();
    let mut request = launch_request(
        vec![format!(
            "exec {} mock-server --port {port} --model {mark}",
            crate::common::bin().display()
        )],
        log.clone(),
    );
    request.port = port;
    let instance = provider.launch(request).await.unwrap();
    let base = instance.base_url();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    assert_ne!(
        base,
        format!("http://127.0.0.1:{port}"),
        "not through a tunnel"
    );
    let addr = base.trim_start_matches("http://").to_string();
    let models = async {
        loop {
            if let Ok(mut stream) = tokio::net::TcpStream::connect(&addr).await {
                let _ = stream
                    .write_all(b"GET /v1/models HTTP/1.0\r\nHost: x\r\n\r\n")
                    .await;
                let mut answer = String::new();
                let _ = stream.read_to_string(&mut answer).await;
                if answer.contains(" 200 ") {
                    return answer;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let answer = tokio::time::timeout(Duration::from_secs(30), models)
        .await
        .unwrap_or_else(|_| panic!("no answer through the tunnel; log: {:?}", log.tail(20)));
    assert!(answer.contains(&mark), "{answer}");
    instance.stop().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || !running(&mark)).await,
        "the remote server outlived stop"
    );
}

#[tokio::test]
async fn exec_runs_next_to_a_remote_instance_and_a_dropped_exec_is_killed() {
    use orchestrate::provider::{ExecRequest, ExecTarget};
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
    let provider = SshProvider::new(session, Shutdown::new(), Reach::Direct)
        .with_grace(Duration::from_secs(1));
    let mark = marker("exec");
    let instance = provider
        .launch(launch_request(
            vec![format!("sleep 300; : {mark}-server")],
            orchestrate::provider::LogSink::memory(),
        ))
        .await
        .unwrap();
    let log = orchestrate::provider::LogSink::memory();
    let out = instance
        .exec(ExecRequest {
            command: "echo \"figures for $GREETING\"; echo warn >&2; exit 4".into(),
            target: ExecTarget::Host,
            env: vec![("GREETING".into(), "it's me".into())],
            log: log.clone(),
        })
        .await
        .unwrap();
    assert_eq!(out.exit.code, Some(4));
    assert_eq!(out.stdout, "figures for it's me\n");
    assert_eq!(out.stderr, "warn\n");
    assert!(log.tail(5).contains(&"warn".to_string()));
    // Abandoned (a timeout): the command and what it started are killed.
    let command = format!("sh -c 'sleep 300; : {mark}-child' & echo started; sleep 300; : {mark}");
    let started = orchestrate::provider::LogSink::memory();
    let abandoned = instance.exec(ExecRequest {
        command,
        target: ExecTarget::Instance,
        env: Vec::new(),
        log: started.clone(),
    });
    let waited = tokio::time::timeout(Duration::from_secs(2), abandoned).await;
    assert!(waited.is_err(), "the command sleeps");
    assert!(started.tail(5).contains(&"started".to_string()));
    assert!(
        eventually(Duration::from_secs(10), || !running(&format!(
            "{mark}-child"
        )) && !running(&format!(
            "{mark} "
        )))
        .await,
        "the abandoned command survived"
    );
    assert!(
        running(&format!("{mark}-server")),
        "the instance itself runs on"
    );
    instance.stop().await.unwrap();
}
