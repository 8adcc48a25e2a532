//! The ground-truth log: one JSON line per request with the wall-clock time at which each
//! chunk was handed to the connection, for checking what a client measured. Timestamps
//! come from one monotonic clock anchored to the Unix epoch at start (no per-chunk system
//! call to the wall clock, no jumps); lines are formatted and written by a dedicated
//! thread behind a channel and a 1 MiB buffer, so the hot path only pushes a record.
//! Not here: deciding when a chunk is sent (`stream.rs`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::error::MockError;

/// Unix-epoch nanoseconds from a monotonic clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WallClock {
    anchor: Instant,
    anchor_ns: u64,
}

impl WallClock {
    pub(crate) fn new() -> Self {
        let anchor = Instant::now();
        let anchor_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Self { anchor, anchor_ns }
    }

    /// Now, in Unix-epoch nanoseconds.
    pub(crate) fn now_ns(&self) -> u64 {
        self.at_ns(Instant::now())
    }

    /// `t`, in Unix-epoch nanoseconds.
    pub(crate) fn at_ns(&self, t: Instant) -> u64 {
        self.anchor_ns + t.saturating_duration_since(self.anchor).as_nanos() as u64
    }
}

/// How a request ended, as the log records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TruthStatus {
    /// Every chunk (and `[DONE]` when streaming) was handed to the connection.
    Ok,
    /// Answered with an HTTP error (status in `http_status`).
    Error,
    /// The client went away, or the server stopped, before the end.
    Cancelled,
}

/// One line of the log (format documented in docs/mock-server.md).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TruthRecord {
    /// The response's `id` (`cmpl-...` / `chatcmpl-...`).
    pub id: String,
    /// The request's `X-Request-Id` header, if it had one.
    pub x_request_id: Option<String>,
    /// `completions` or `chat`.
    pub endpoint: &'static str,
    pub stream: bool,
    pub http_status: u16,
    pub status: TruthStatus,
    /// When the request's headers were read.
    pub arrival_ns: u64,
    pub prompt_tokens: u32,
    /// Sum of the tokens of `chunks`.
    pub completion_tokens: u32,
    /// Chat streams: when the role-only first chunk was handed over.
    pub role_ns: Option<u64>,
    /// `[send_ns, tokens]` for every token-bearing chunk, in order; a non-streaming response
    /// is one chunk holding every token.
    pub chunks: Vec<(u64, u32)>,
    /// When the last frame (`[DONE]`, or the whole body) was handed over.
    pub end_ns: Option<u64>,
}

/// Sends records to the writer thread.
#[derive(Debug, Clone)]
pub(crate) struct TruthSink {
    tx: Sender<TruthRecord>,
}

impl TruthSink {
    /// Queue a record (dropped silently if the writer has already stopped).
    pub(crate) fn send(&self, record: TruthRecord) {
        let _ = self.tx.send(record);
    }
}

/// The writer thread; `finish` flushes and joins it.
#[derive(Debug)]
pub(crate) struct TruthWriter {
    thread: JoinHandle<std::io::Result<()>>,
}

/// Create (truncate) the log at `path` and start its writer thread.
pub(crate) fn start(path: &Path) -> Result<(TruthSink, TruthWriter), MockError> {
    let err = |source| MockError::GroundTruth {
        path: path.to_path_buf(),
        source,
    };
    let file = File::create(path).map_err(err)?;
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("mock-truth".into())
        .spawn(move || write_loop(rx, BufWriter::with_capacity(1 << 20, file)))
        .map_err(err)?;
    Ok((TruthSink { tx }, TruthWriter { thread }))
}

impl TruthWriter {
    /// Wait until every sender is gone and the file is flushed. Blocking.
    pub(crate) fn finish(self) -> std::io::Result<()> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("ground-truth writer panicked")))
    }
}

fn write_loop(rx: Receiver<TruthRecord>, mut out: BufWriter<File>) -> std::io::Result<()> {
    let mut dirty = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(record) => {
                serde_json::to_writer(&mut out, &record).map_err(std::io::Error::other)?;
                out.write_all(b"\n")?;
                dirty = true;
            }
            Err(RecvTimeoutError::Timeout) => {
                if dirty {
                    out.flush()?;
                    dirty = false;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return out.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_epoch_nanoseconds_and_monotonic() {
        let c = WallClock::new();
        let a = c.now_ns();
        let b = c.now_ns();
        assert!(b >= a);
        let sys = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(sys.abs_diff(a) < 1_000_000_000);
    }

    #[test]
    fn writes_one_json_line_per_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("truth.jsonl");
        let (sink, writer) = start(&path).unwrap();
        for i in 0..3 {
            sink.send(TruthRecord {
                id: format!("cmpl-{i}"),
                x_request_id: None,
                endpoint: "completions",
                stream: true,
                http_status: 200,
                status: TruthStatus::Ok,
                arrival_ns: 1,
                prompt_tokens: 2,
                completion_tokens: 3,
                role_ns: None,
                chunks: vec![(5, 1), (6, 2)],
                end_ns: Some(7),
            });
        }
        drop(sink);
        writer.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2]["id"], "cmpl-2");
        assert_eq!(lines[0]["chunks"], serde_json::json!([[5, 1], [6, 2]]));
        assert_eq!(lines[0]["status"], "ok");
    }

    #[test]
    fn unwritable_path_names_the_file() {
        let err = start(Path::new("/nonexistent-dir/truth.jsonl")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent-dir/truth.jsonl"));
    }
}
