//! Getting the image: a registry that never answers times the pull out, and a missing image
//! without a registry fails fast and starts nothing.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_never_answers_times_out_the_pull() {
    let shutdown = Shutdown::new();
    let options = DockerOptions {
        pull_idle_timeout: Duration::from_secs(2),
        ..DockerOptions::default()
    };
    let Some(provider) = provider_with(&shutdown, options).await else {
        return;
    };
    // A registry that accepts connections and never says a word (the engine treats
    // 127.0.0.0/8 registries as plain HTTP).
    let silent = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let run = run_id("pull");
    let mut req = request(&run, "pull", &["true"], LogSink::memory());
    let image = format!("127.0.0.1:{port}/orchestrate/never:1");
    req.image = Some(image.clone());
    let started = Instant::now();
    let error = match provider.launch(req).await {
        Ok(_) => panic!("nothing can be pulled from a silent registry"),
        Err(e) => e.to_string(),
    };
    held.abort();
    assert!(started.elapsed() < Duration::from_secs(10), "{error}");
    assert!(
        error.contains(&format!(
            "image `{image}` is not present on local and pulling it made no progress for 2s"
        )),
        "{error}"
    );
    assert!(containers_of(&provider, &run).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_without_registry_fails_fast_and_starts_nothing() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("missing");
    let mut req = request(&run, "missing", &["true"], LogSink::memory());
    req.image = Some("orchestrate-test/does-not-exist:0.0.1".into());
    let started = Instant::now();
    let error = match provider.launch(req).await {
        Ok(_) => panic!("a missing image must not launch"),
        Err(e) => e.to_string(),
    };
    assert!(started.elapsed() < Duration::from_secs(15), "{error}");
    assert!(
        error.contains("image `orchestrate-test/does-not-exist:0.0.1` is not present on local"),
        "{error}"
    );
    assert!(containers_of(&provider, &run).await.is_empty());
    assert_eq!(shutdown.live(), 0);
}
