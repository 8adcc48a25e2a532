//! Teardown paths other than `stop`: dropping an instance and the emergency kill both remove
//! the container.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_instance_without_stop_removes_its_container() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("drop");
    let instance = provider
        .launch(request(&run, "drop", &[WAIT_FOR_TERM], LogSink::memory()))
        .await
        .unwrap();
    assert_eq!(containers_of(&provider, &run).await.len(), 1);
    drop(instance);
    assert!(containers_of(&provider, &run).await.is_empty());
    assert_eq!(shutdown.live(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emergency_kill_removes_running_containers() {
    let shutdown = Shutdown::new();
    let Some(provider) = provider(&shutdown).await else {
        return;
    };
    let run = run_id("kill");
    let instance = provider
        .launch(request(&run, "kill", &[WAIT_FOR_TERM], LogSink::memory()))
        .await
        .unwrap();
    // What a second Ctrl-C does, from the signal task inside the runtime.
    let killer = shutdown.clone();
    tokio::spawn(async move { killer.kill_all() })
        .await
        .unwrap();
    assert!(containers_of(&provider, &run).await.is_empty());
    let exit = tokio::time::timeout(Duration::from_secs(10), instance.exited())
        .await
        .unwrap();
    assert_ne!(exit.code, Some(0), "{exit}");
    instance.stop().await.unwrap();
}
