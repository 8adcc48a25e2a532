//! One model instance over several nodes (`--nnodes N --node-rank R --master-addr HOST:PORT`),
//! played by N mock processes: rank 0 listens on the master address and serves HTTP, the
//! other ranks connect to it and serve nothing (headless). Rank 0 answers `/health` 503
//! until every rank has joined. As NCCL peers do, a lost rank breaks the whole instance:
//! rank 0 stops with `MockError::RankLost`, and a rank whose master went away stops with
//! `MockError::MasterLost`.
//!
//! Wire: a rank sends `orchestrate-mock-gang rank=R nnodes=N\n`, rank 0 answers `ok\n` (or
//! `error: WHY\n` and closes), then the rank sends `ping\n` every second. Rank 0 counts a
//! rank lost at EOF or after `SILENCE` without a line; the rank counts the master lost at EOF.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::MockError;

const HELLO: &str = "orchestrate-mock-gang";
const PING_EVERY: Duration = Duration::from_secs(1);
/// A rank silent for this long is lost (a host that vanished without closing its socket).
const SILENCE: Duration = Duration::from_secs(10);

/// A node's place in its gang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangConfig {
    /// Processes in the instance (>= 2 for a gang).
    pub nnodes: u32,
    /// This process's rank; 0 serves HTTP.
    pub node_rank: u32,
    /// `host:port` of rank 0's gang listener.
    pub master: String,
    /// How long a rank > 0 keeps trying to reach rank 0.
    pub join_timeout: Duration,
}

/// Rank 0's view: how many ranks have joined.
#[derive(Debug)]
pub(crate) struct GangState {
    pub nnodes: u32,
    joined: AtomicU32,
}

impl GangState {
    pub(crate) fn new(nnodes: u32) -> Self {
        Self {
            nnodes,
            joined: AtomicU32::new(1),
        }
    }

    /// Ranks connected, rank 0 included.
    pub(crate) fn joined(&self) -> u32 {
        self.joined.load(Ordering::Acquire)
    }

    /// Every rank has joined.
    pub(crate) fn complete(&self) -> bool {
        self.joined() >= self.nnodes
    }
}

/// Rank 0: accept the other ranks on `listener`; returns the error when one is lost.
pub(crate) async fn master(listener: TcpListener, state: Arc<GangState>) -> MockError {
    let (lost_tx, mut lost_rx) = mpsc::unbounded_channel::<MockError>();
    let mut seen = vec![false; state.nnodes as usize];
    seen[0] = true;
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            Some(e) = lost_rx.recv() => return e,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                let hello = tokio::time::timeout(SILENCE, reader.read_line(&mut line)).await;
                if !matches!(hello, Ok(Ok(n)) if n > 0) {
                    continue;
                }
                let rank = match check_hello(&line, state.nnodes, &seen) {
                    Ok(rank) => rank,
                    Err(why) => {
                        let _ = reader.get_mut().write_all(format!("error: {why}\n").as_bytes()).await;
                        continue;
                    }
                };
                if reader.get_mut().write_all(b"ok\n").await.is_err() {
                    continue;
                }
                seen[rank as usize] = true;
                state.joined.fetch_add(1, Ordering::AcqRel);
                let lost = lost_tx.clone();
                let nnodes = state.nnodes;
                tasks.spawn(async move {
                    let why = watch_rank(reader).await;
                    let _ = lost.send(MockError::RankLost { rank, nnodes, peer: peer.to_string(), why });
                });
            }
        }
    }
}

/// The rank a hello line announces, if it fits this gang.
fn check_hello(line: &str, nnodes: u32, seen: &[bool]) -> Result<u32, String> {
    let mut rank = None;
    let mut their_nnodes = None;
    let mut words = line.split_whitespace();
    if words.next() != Some(HELLO) {
        return Err("not an orchestrate mock gang hello".into());
    }
    for w in words {
        if let Some(v) = w.strip_prefix("rank=") {
            rank = v.parse::<u32>().ok();
        } else if let Some(v) = w.strip_prefix("nnodes=") {
            their_nnodes = v.parse::<u32>().ok();
        }
    }
    let (Some(rank), Some(n)) = (rank, their_nnodes) else {
        return Err("the hello names no rank or nnodes".into());
    };
    if n != nnodes {
        return Err(format!(
            "rank {rank} was started with --nnodes {n}, rank 0 with --nnodes {nnodes}"
        ));
    }
    if rank == 0 || rank >= nnodes {
        return Err(format!(
            "--node-rank {rank} is outside 1..{} for --nnodes {nnodes}",
            nnodes - 1
        ));
    }
    if seen[rank as usize] {
        return Err(format!("rank {rank} has already joined"));
    }
    Ok(rank)
}

/// Read pings until the rank goes quiet or away; why it is lost.
async fn watch_rank(mut reader: BufReader<TcpStream>) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        match tokio::time::timeout(SILENCE, reader.read_line(&mut line)).await {
            Ok(Ok(0)) => return "its connection closed (the process exited)".into(),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return format!("its connection failed: {e}"),
            Err(_) => return format!("nothing heard from it for {SILENCE:?}"),
        }
    }
}

/// Rank > 0: join rank 0 (retrying until `join_timeout`), then keep the link until `cancel`
/// fires (`Ok`) or rank 0 goes away (`MockError::MasterLost`). `joined` is called once the
/// master accepted this rank.
pub async fn member(
    config: &GangConfig,
    cancel: CancellationToken,
    joined: impl FnOnce(),
) -> Result<(), MockError> {
    let start = Instant::now();
    let stream = loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            r = TcpStream::connect(&config.master) => match r {
                Ok(s) => break s,
                Err(e) if start.elapsed() >= config.join_timeout => {
                    return Err(MockError::Config(format!(
                        "rank {} could not reach rank 0 at {} within {:?}: {e}; start rank 0 \
                         with the same --master-addr, or check the address",
                        config.node_rank, config.master, config.join_timeout
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            },
        }
    };
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let hello = format!(
        "{HELLO} rank={} nnodes={}\n",
        config.node_rank, config.nnodes
    );
    let lost = |why: String| MockError::MasterLost {
        master: config.master.clone(),
        why,
    };
    write
        .write_all(hello.as_bytes())
        .await
        .map_err(|e| lost(e.to_string()))?;
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .await
        .map_err(|e| lost(e.to_string()))?;
    match line.trim() {
        "ok" => {}
        "" => return Err(lost("it closed the connection".into())),
        other => {
            return Err(MockError::Config(format!(
                "rank 0 at {} refused rank {}: {}",
                config.master,
                config.node_rank,
                other.trim_start_matches("error: ")
            )));
        }
    }
    joined();
    let mut ping = tokio::time::interval(PING_EVERY);
    loop {
        line.clear();
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = ping.tick() => {
                if let Err(e) = write.write_all(b"ping\n").await {
                    return Err(lost(format!("its connection failed: {e}")));
                }
            }
            r = reader.read_line(&mut line) => match r {
                Ok(0) => return Err(lost("its connection closed (the process exited)".into())),
                Ok(_) => {}
                Err(e) => return Err(lost(format!("its connection failed: {e}"))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_are_checked() {
        let seen = [true, false, true];
        assert_eq!(
            check_hello("orchestrate-mock-gang rank=1 nnodes=3\n", 3, &seen),
            Ok(1)
        );
        let bad = [
            ("orchestrate-mock-gang rank=2 nnodes=3", "already joined"),
            ("orchestrate-mock-gang rank=3 nnodes=3", "outside 1..2"),
            ("orchestrate-mock-gang rank=1 nnodes=2", "--nnodes 2"),
            ("GET / HTTP/1.1", "not an orchestrate"),
        ];
        for (line, needle) in bad {
            let e = check_hello(line, 3, &seen).unwrap_err();
            assert!(e.contains(needle), "{line}: {e}");
        }
    }

    #[tokio::test]
    async fn the_master_counts_ranks_and_notices_a_lost_one() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let master_addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new(GangState::new(2));
        let m = tokio::spawn(master(listener, state.clone()));
        assert!(!state.complete());
        let cancel = CancellationToken::new();
        let config = GangConfig {
            nnodes: 2,
            node_rank: 1,
            master: master_addr,
            join_timeout: Duration::from_secs(5),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let c2 = cancel.clone();
        let rank1 = tokio::spawn(async move {
            member(&config, c2, move || {
                let _ = tx.send(());
            })
            .await
        });
        rx.await.unwrap();
        let t0 = Instant::now();
        while !state.complete() && t0.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(state.complete());
        cancel.cancel();
        rank1.await.unwrap().unwrap();
        let e = tokio::time::timeout(Duration::from_secs(5), m)
            .await
            .unwrap()
            .unwrap();
        let text = e.to_string();
        assert!(
            text.contains("rank 1 of 2") && text.contains("closed"),
            "{text}"
        );
    }
}
