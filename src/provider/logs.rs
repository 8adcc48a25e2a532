//! Instance logs: every line goes to `logs/<role>-r<R>-n<N>.log` as it comes (flushed per
//! write, so a crash keeps it) and the last lines stay in memory to explain failures.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// How many lines of tail are kept in memory.
pub const TAIL_LINES: usize = 40;

/// A shared, cheap-to-clone log writer with an in-memory tail.
#[derive(Clone)]
pub struct LogSink {
    inner: Arc<Mutex<Inner>>,
    path: Option<PathBuf>,
}

struct Inner {
    file: Option<File>,
    tail: VecDeque<String>,
    partial: Vec<u8>,
}

impl std::fmt::Debug for LogSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSink").field("path", &self.path).finish()
    }
}

impl LogSink {
    /// A sink writing to `path` (created, parents too).
    pub fn create(path: &Path) -> std::io::Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = File::create(path)?;
        Ok(Self::with_file(Some(file), Some(path.to_path_buf())))
    }

    /// A sink that only keeps the tail in memory (probes, tests).
    pub fn memory() -> Self {
        Self::with_file(None, None)
    }

    fn with_file(file: Option<File>, path: Option<PathBuf>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                file,
                tail: VecDeque::new(),
                partial: Vec::new(),
            })),
            path,
        }
    }

    /// The log file, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Append raw output; complete lines enter the tail, the file gets the bytes at once.
    pub fn write(&self, bytes: &[u8]) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(file) = inner.file.as_mut() {
            // A full disk must not kill the run; the tail still explains failures.
            let _ = file.write_all(bytes);
        }
        inner.partial.extend_from_slice(bytes);
        while let Some(pos) = inner.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = inner.partial.drain(..=pos).collect();
            let text = String::from_utf8_lossy(&line[..line.len() - 1])
                .trim_end_matches('\r')
                .to_string();
            push_tail(&mut inner.tail, text);
        }
    }

    /// Append one line (a newline is added).
    pub fn line(&self, text: &str) {
        let mut bytes = Vec::with_capacity(text.len() + 1);
        bytes.extend_from_slice(text.as_bytes());
        bytes.push(b'\n');
        self.write(&bytes);
    }

    /// The last `n` lines (at most [`TAIL_LINES`]), oldest first; includes a trailing partial line.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut lines: Vec<String> = inner.tail.iter().cloned().collect();
        if !inner.partial.is_empty() {
            lines.push(String::from_utf8_lossy(&inner.partial).to_string());
        }
        let skip = lines.len().saturating_sub(n);
        lines.split_off(skip)
    }

    /// Flush the file to disk.
    pub fn flush(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(file) = inner.file.as_mut() {
            let _ = file.flush();
            let _ = file.sync_data();
        }
    }
}

fn push_tail(tail: &mut VecDeque<String>, line: String) {
    if tail.len() == TAIL_LINES {
        tail.pop_front();
    }
    tail.push_back(line);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_lines_and_writes_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/server-0.log");
        let sink = LogSink::create(&path).unwrap();
        for i in 0..100 {
            sink.write(format!("line {i}\n").as_bytes());
        }
        sink.write(b"partial");
        let tail = sink.tail(3);
        assert_eq!(tail, vec!["line 98", "line 99", "partial"]);
        assert_eq!(sink.tail(1000).len(), TAIL_LINES + 1);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("line 0\n") && text.ends_with("line 99\npartial"));
    }
}
