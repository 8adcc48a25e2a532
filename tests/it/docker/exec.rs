//! `Instance::exec` on a container: in the container or on the host, output and exit code,
//! an abandoned command killed with everything it started.

use super::*;

/// `Instance::exec` on a container: the command runs inside it (or on this machine for
/// `ExecTarget::Host`), output and exit code come back, and an abandoned command (the
/// future dropped, as on a timeout) is killed with everything it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_in_the_container_or_on_the_host_and_an_abandoned_one_is_killed() {
    use orchestrate::provider::{ExecRequest, ExecTarget};
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("exec");
    let mut req = request(&run, "exec", &[], LogSink::memory());
    req.commands = vec![format!(
        "exec orchestrate mock-server --host 0.0.0.0 --port {}",
        req.port
    )];
    let instance = provider.launch(req).await.unwrap();
    let exec = |command: String, target: ExecTarget| {
        instance.exec(ExecRequest {
            command,
            target,
            env: vec![("EXTRA".into(), "from the task env".into())],
            log: LogSink::memory(),
        })
    };
    let out = exec(
        "[ -f /.dockerenv ] && echo in-container; echo \"$EXTRA\"; echo err >&2; exit 5".into(),
        ExecTarget::Instance,
    )
    .await
    .unwrap();
    assert_eq!(out.exit.code, Some(5));
    assert_eq!(out.stdout, "in-container\nfrom the task env\n");
    assert_eq!(out.stderr, "err\n");

    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("host-was-here");
    let out = exec(format!("echo x > {}", mark.display()), ExecTarget::Host)
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert!(mark.exists(), "`where: host` runs on this machine");

    let abandoned = exec(
        "sh -c 'sleep 300' & sleep 300 & echo started; wait".into(),
        ExecTarget::Instance,
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(2), abandoned)
            .await
            .is_err()
    );
    // Killed processes stay zombies under the mock server (pid 1 reaps nothing): they run
    // nothing, so only live ones count.
    let sleeping = r#"for s in /proc/[0-9]*/stat; do read -r a b c r < "$s" && [ "$b" = "(sleep)" ] && [ "$c" != Z ] && echo "$a"; done; true"#;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = exec(sleeping.into(), ExecTarget::Instance).await.unwrap();
        if out.stdout.trim().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sleeps left in the container: {}",
            out.stdout
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    instance.stop().await.unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
}
