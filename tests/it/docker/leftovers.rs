//! What a dead owner leaves behind: `orchestrate ps` lists it and `orchestrate clean` removes
//! it, also after the owner process was SIGKILLed (the ignored `owner_process` is that owner).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ps_lists_and_clean_removes_what_a_dead_owner_left() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("clean");
    for task in ["alpha", "beta"] {
        let instance = provider
            .launch_container(request(&run, task, &[WAIT_FOR_TERM], LogSink::memory()))
            .await
            .unwrap();
        // The owner dies without any teardown: no stop, no Drop.
        std::mem::forget(instance);
    }

    let ps = Command::new(common::bin())
        .args(["ps", "--run", &run])
        .output()
        .unwrap();
    assert!(
        ps.status.success(),
        "{}",
        String::from_utf8_lossy(&ps.stderr)
    );
    let table = String::from_utf8(ps.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("RUN"), "{table}");
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[1].starts_with(&run) && lines[1].contains("alpha"),
        "{table}"
    );
    assert!(
        lines[2].contains("beta") && lines[2].contains("running"),
        "{table}"
    );

    let json = Command::new(common::bin())
        .args(["ps", "--json", "--run", &run])
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let tasks: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["alpha", "beta"], "{listed:#}");
    assert_eq!(listed[0]["run"], run.as_str());

    let clean = |args: &[&str]| {
        let out = Command::new(common::bin())
            .arg("clean")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let removed = clean(&["--run", &run, "--task", "alpha"]);
    assert_eq!(removed.lines().count(), 1, "{removed}");
    assert!(removed.contains("-alpha-"), "{removed}");
    let left = containers_of(&provider, &run).await;
    assert_eq!(left.len(), 1);
    assert!(left[0].contains("-beta-"));

    let removed = clean(&["--run", &run]);
    assert!(removed.contains("-beta-"), "{removed}");
    assert!(containers_of(&provider, &run).await.is_empty());
}

/// Set for the owner process of `a_sigkilled_owner_leaves_a_container_that_clean_removes`.
const OWNER_RUN_ENV: &str = "ORCHESTRATE_IT_OWNER_RUN";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the owner process of a_sigkilled_owner_leaves_a_container_that_clean_removes"]
async fn owner_process() {
    let Ok(run) = std::env::var(OWNER_RUN_ENV) else {
        eprintln!("nothing to do: {OWNER_RUN_ENV} is set by the parent test only");
        return;
    };
    let shutdown = Shutdown::new();
    let provider = provider(&shutdown)
        .await
        .expect("the parent checked the engine");
    let instance = provider
        .launch(request(&run, "owner", &[WAIT_FOR_TERM], LogSink::memory()))
        .await
        .unwrap();
    println!("owner ready: {}", instance.describe());
    tokio::time::sleep(Duration::from_secs(120)).await;
    instance.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_owner_leaves_a_container_that_clean_removes() {
    use std::io::BufRead;
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("sigkill");
    let mut owner = Command::new(std::env::current_exe().unwrap())
        .args([
            "docker::leftovers::owner_process",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(OWNER_RUN_ENV, &run)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(owner.stdout.take().unwrap());
    let ready = stdout
        .lines()
        .map_while(Result::ok)
        .find(|line| line.starts_with("owner ready"));
    assert!(ready.is_some(), "the owner never started its container");
    owner.kill().unwrap(); // SIGKILL: no teardown can run
    owner.wait().unwrap();
    assert_eq!(containers_of(&provider, &run).await.len(), 1, "left behind");

    let out = Command::new(common::bin())
        .args(["clean", "--run", &run])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("-owner-"));
    assert!(containers_of(&provider, &run).await.is_empty());
}
