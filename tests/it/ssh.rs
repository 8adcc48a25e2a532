//! SSH against real sshd servers on loopback (see `sshd`): commands with streamed output and
//! exit status, host key and auth failures, trusting a new key, jump hosts, tunnels, a dropped
//! connection, the remote process provider, the host lock and pre-flight.

use std::time::Duration;

use orchestrate::ssh::{CommandEvent, HostKeyPolicy, Session, SshError};

use crate::sshd::{Keys, Sshd};

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
