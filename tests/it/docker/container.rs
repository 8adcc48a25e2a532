//! One container through the provider: it starts with its logs in the sink, becomes ready on
//! the published port, an exit at start or while starting is seen at once with its code and
//! log tail, a leftover of the same name is named with the way out, volumes are mounted.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_runs_with_logs_in_the_sink_and_stop_removes_it() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("up");
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("logs/server-0.log");
    let sink = LogSink::create(&log_path).unwrap();
    let commands = ["echo \"$GREETING\"", "echo to-stderr >&2", WAIT_FOR_TERM];
    let instance = provider
        .launch(request(&run, "up", &commands, sink))
        .await
        .unwrap();
    assert!(instance.describe().starts_with("container orchestrate-"));
    assert!(instance.base_url().starts_with("http://127.0.0.1:"));
    assert_eq!(shutdown.live(), 1, "an emergency kill is registered");
    assert_eq!(containers_of(&provider, &run).await.len(), 1);

    let deadline = Instant::now() + Duration::from_secs(10);
    while instance.log().tail(10).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "no logs: {:?}",
            instance.log().tail(10)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let facts = instance.facts();
    assert!(
        facts["image"]["id"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(facts["container"]["network"], "bridge");

    instance.stop().await.unwrap();
    assert_eq!(shutdown.live(), 0);
    assert!(containers_of(&provider, &run).await.is_empty());
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(text.contains("hello from the container\n"), "{text}");
    assert!(text.contains("to-stderr\n"), "{text}");
    assert!(
        text.contains("got SIGTERM, shutting down"),
        "the last line is flushed before removal: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_server_in_a_container_becomes_ready_on_the_published_port() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("mock");
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("logs/server-0.log");
    let mut req = request(&run, "mock", &[], LogSink::create(&log_path).unwrap());
    let port = req.port;
    req.commands = vec![format!(
        "exec orchestrate mock-server --host 0.0.0.0 --port {port} --startup-delay 500ms --model served-in-docker"
    )];
    let instance = provider.launch(req).await.unwrap();
    assert_eq!(instance.base_url(), format!("http://127.0.0.1:{port}"));
    let plan = ReadinessPlan {
        http: Some(HttpProbePlan {
            path: "/health".into(),
            status: 200,
        }),
        generate: false,
        interval: Duration::from_millis(200),
        timeout: Duration::from_secs(30),
        alive_only: false,
        workers: None,
        ray: None,
    };
    readiness::wait(instance.as_ref(), &plan, None, &CancellationToken::new())
        .await
        .unwrap();
    let origin = orchestrate::fetch::Origin::parse(&instance.base_url()).unwrap();
    let reply = orchestrate::fetch::get(&origin, "/v1/models", Duration::from_secs(5))
        .await
        .unwrap();
    let body = reply.text_lossy();
    assert_eq!(reply.status, 200, "{body}");
    assert!(body.contains("served-in-docker"), "{body}");
    instance.stop().await.unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("listening on"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_exits_at_start_is_seen_at_once_with_code_and_tail() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("exit");
    let commands = [
        "echo loading model",
        "echo 'fatal: no such model' >&2",
        "exit 3",
    ];
    let instance = provider
        .launch(request(&run, "exit", &commands, LogSink::memory()))
        .await
        .unwrap();
    let started = Instant::now();
    let exit = tokio::time::timeout(Duration::from_secs(10), instance.exited())
        .await
        .expect("exited() resolves when the container exits");
    assert_eq!(exit.code, Some(3));
    assert!(started.elapsed() < Duration::from_secs(5));
    // stdout and stderr are separate pipes: their relative order is not kept.
    let mut tail = instance.log().tail(2);
    tail.sort();
    assert_eq!(tail, vec!["fatal: no such model", "loading model"]);
    // Awaiting again gives the same answer.
    assert_eq!(instance.exited().await, exit);
    instance.stop().await.unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_at_once_with_the_tail_when_the_container_exits_while_starting() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("ready");
    let commands = [
        "echo loading weights",
        "sleep 1",
        "echo 'CUDA error: out of memory' >&2",
        "exit 1",
    ];
    let instance = provider
        .launch(request(&run, "ready", &commands, LogSink::memory()))
        .await
        .unwrap();
    let plan = ReadinessPlan {
        http: Some(HttpProbePlan {
            path: "/health".into(),
            status: 200,
        }),
        generate: false,
        interval: Duration::from_millis(200),
        timeout: Duration::from_secs(60),
        alive_only: false,
        workers: None,
        ray: None,
    };
    let started = Instant::now();
    let error = readiness::wait(instance.as_ref(), &plan, None, &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10), "{error}");
    match &error {
        ReadinessError::Exited { exit, tail, .. } => {
            assert_eq!(exit.code, Some(1));
            assert!(tail.contains("loading weights"), "{tail}");
            assert!(tail.contains("CUDA error: out of memory"), "{tail}");
        }
        other => panic!("expected an exit during startup, got: {other}"),
    }
    instance.stop().await.unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_with_the_same_name_is_named_with_the_way_out() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("twice");
    let first = provider
        .launch(request(&run, "twice", &[WAIT_FOR_TERM], LogSink::memory()))
        .await
        .unwrap();
    let error = match provider
        .launch(request(&run, "twice", &[WAIT_FOR_TERM], LogSink::memory()))
        .await
    {
        Ok(_) => panic!("two containers cannot share a name"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains(&format!("remove it with `orchestrate clean --run {run}`")),
        "{error}"
    );
    assert_eq!(containers_of(&provider, &run).await.len(), 1);
    assert_eq!(shutdown.live(), 1);
    first.stop().await.unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_are_mounted_read_write_or_read_only() {
    use orchestrate::deploy::VolumeMount;
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(cache.path().join("weights.txt"), "cached weights\n").unwrap();
    let run = run_id("volumes");
    let mount = |container: &str, read_only: bool| VolumeMount {
        host: cache.path().display().to_string(),
        container: container.into(),
        read_only,
    };
    let mut rw = request(
        &run,
        "volumes",
        &[
            "read line < /cache/weights.txt",
            "echo \"$line via $GREETING\" > /cache/out.txt",
        ],
        LogSink::memory(),
    );
    rw.volumes = vec![mount("/cache", false)];
    let instance = provider.launch(rw).await.unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), instance.exited())
        .await
        .unwrap();
    assert_eq!(exit.code, Some(0), "{:?}", instance.log().tail(5));
    instance.stop().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(cache.path().join("out.txt")).unwrap(),
        "cached weights via hello from the container\n"
    );

    let mut ro = request(
        &run,
        "volumes",
        &["echo no > /cache/denied.txt"],
        LogSink::memory(),
    );
    ro.index = 1;
    ro.volumes = vec![mount("/cache", true)];
    let instance = provider.launch(ro).await.unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), instance.exited())
        .await
        .unwrap();
    assert_ne!(exit.code, Some(0));
    assert!(
        instance
            .log()
            .tail(5)
            .join("\n")
            .contains("Read-only file system"),
        "{:?}",
        instance.log().tail(5)
    );
    instance.stop().await.unwrap();
    assert!(!cache.path().join("denied.txt").exists());
    assert!(containers_of(&provider, &run).await.is_empty());
}

/// dstack's container keys reach the engine: `privileged` (every capability bounded), `user` (the
/// commands' uid) and `entrypoint` (the image's replaced, the commands its arguments).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileged_user_and_entrypoint_reach_the_container() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("keys");
    let script = "echo \"first-arg=$1\"; \
        while read -r k v rest; do case $k in Uid:|CapBnd:) echo \"$k $v\";; esac; done < /proc/self/status; \
        trap 'exit 0' TERM; sleep 300 & wait";
    let mut req = request(&run, "keys", &["from-commands"], LogSink::memory());
    req.container.privileged = true;
    req.container.user = Some("1234:1234".into());
    req.container.entrypoint = Some(vec![
        "/bin/sh".into(),
        "-c".into(),
        script.into(),
        "sh".into(),
    ]);
    let instance = provider.launch(req).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let lines = instance.log().tail(10);
        if lines.iter().any(|l| l.starts_with("CapBnd:")) {
            break lines;
        }
        assert!(Instant::now() < deadline, "no output: {lines:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    instance.stop().await.unwrap();
    assert!(
        lines.iter().any(|l| l == "first-arg=from-commands"),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "Uid: 1234"), "{lines:?}");
    let caps = lines
        .iter()
        .find_map(|l| l.strip_prefix("CapBnd: "))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap();
    // The bounding set (what any process of the container may ever hold, whatever its uid):
    // Docker's default has 14 capabilities; privileged has them all (over 38).
    assert!(caps.count_ones() > 30, "CapBnd {caps:x}: not privileged");
}
