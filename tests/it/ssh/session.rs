//! Sessions against real sshd: commands with streamed output and exit status, host key and
//! auth failures, trusting a new key, jump hosts, a dropped connection, uploads, timeouts.

use super::*;

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
async fn killing_sshd_mid_command_fails_cleanly() {
    let Some((_keys, mut sshd, session)) = connected().await else {
        return;
    };
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
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
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

#[tokio::test]
async fn pool_opens_another_connection_when_sshd_caps_sessions() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start_with(&keys, "127.0.0.1", &["MaxSessions=2"]);
    let host = sshd.host("capped", &keys);
    sshd.trust(&keys);
    // The cap is real: a third command on one connection is refused.
    let single = Session::connect(&host, &keys.options(HostKeyPolicy::Strict))
        .await
        .unwrap();
    let _a = single.exec("cat").await.unwrap();
    let _b = single.exec("cat").await.unwrap();
    assert!(
        single.exec("cat").await.is_err(),
        "sshd accepted a third session"
    );

    let pool = Pool::new(keys.options(HostKeyPolicy::Strict)).with_max_commands(2);
    let mut commands = Vec::new();
    for i in 0..5 {
        let session = pool.get(&host).await.unwrap();
        let command = session
            .exec(&format!("read line; echo \"$line {i}\""))
            .await
            .unwrap();
        commands.push(command);
    }
    assert_eq!(pool.connections(&host).await, 3);
    for (i, command) in commands.into_iter().enumerate() {
        command.write_stdin(b"hello\n").await.unwrap();
        let output = command.collect().await.unwrap();
        assert_eq!(output.stdout, format!("hello {i}\n"));
    }
    // Finished commands free their slots: the pool reuses a connection.
    let session = pool.get(&host).await.unwrap();
    assert_eq!(session.run_ok("echo reused").await.unwrap(), "reused\n");
    assert_eq!(pool.connections(&host).await, 3);
}

#[tokio::test]
async fn installs_our_binary_once_and_downloads_files() {
    let Some((_keys, _sshd, session)) = connected().await else {
        return;
    };
    let bin = crate::common::bin();
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("bin").display().to_string();
    let first = orchestrate::ssh::install_binary_in(&session, &bin, &bin_dir)
        .await
        .unwrap();
    assert!(first.uploaded);
    let again = orchestrate::ssh::install_binary_in(&session, &bin, &bin_dir)
        .await
        .unwrap();
    assert_eq!(first.path, again.path);
    assert!(!again.uploaded, "the same content was uploaded twice");
    let help = session
        .run_ok(&format!("{} --help", first.path))
        .await
        .unwrap();
    assert!(help.contains("Usage"), "{help}");

    let remote = dir.path().join("result.json");
    std::fs::write(&remote, "{\"ok\": true}\n").unwrap();
    let local = dir.path().join("copy.json");
    session
        .download(&remote.display().to_string(), &local)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&local).unwrap(), "{\"ok\": true}\n");
    let err = session
        .download("/nonexistent/file", &dir.path().join("none"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/file"), "{err}");
    assert!(!dir.path().join("none").exists());
}

#[tokio::test]
async fn a_hung_server_is_detected_by_keepalive() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    sshd.trust(&keys);
    let mut options = keys.options(HostKeyPolicy::Strict);
    options.keepalive = Duration::from_secs(1);
    let session = Session::connect(&sshd.host("h", &keys), &options)
        .await
        .unwrap();
    // `cat` ends by itself once sshd dies and its stdin closes: nothing is left behind.
    let mut command = session.exec("cat").await.unwrap();
    sshd.freeze();
    let started = std::time::Instant::now();
    let event = tokio::time::timeout(Duration::from_secs(15), command.next())
        .await
        .expect("the hang was detected");
    let Some(CommandEvent::Failed(err)) = event else {
        panic!("unexpected {event:?}");
    };
    assert!(err.to_string().contains("sent nothing"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(!session.is_alive());
}

#[tokio::test]
async fn authenticates_with_ssh_agent() {
    let Some(keys) = Keys::new() else { return };
    let sshd = Sshd::start(&keys, "127.0.0.1");
    sshd.trust(&keys);
    let agent = sshd::Agent::start(&keys.user_key);
    let mut host = sshd.host("h", &keys);
    // No key file: only the agent holds the key (HOME's default keys are not authorized).
    host.identity_files = Vec::new();
    let mut options = keys.options(HostKeyPolicy::Strict);
    options.agent = orchestrate::ssh::AgentSocket::Path(agent.socket.clone());
    let session = Session::connect(&host, &options).await.unwrap();
    assert_eq!(session.run_ok("echo agent").await.unwrap(), "agent\n");

    // An agent holding only a stranger's key is named in the failure.
    let stranger = sshd::Agent::start(&keys.stranger_key);
    options.agent = orchestrate::ssh::AgentSocket::Path(stranger.socket.clone());
    let err = Session::connect(&host, &options).await.err().unwrap();
    assert!(matches!(err, SshError::Auth { .. }), "{err}");
    assert!(err.to_string().contains("ssh-agent at"), "{err}");
}
