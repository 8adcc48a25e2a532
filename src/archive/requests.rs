//! `points/<point>/requests.jsonl`: one JSON line per request, streamed as requests finish.
//! Lines are buffered whole and written whole; a write that fails (a full disk) cuts the file
//! back to the last whole line, so a reader never meets half a record.
//! Known secret values are redacted from each line (an error body may echo one).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::ArchiveError;
use crate::metrics::RequestRecord;

/// Lines buffered before they are written.
const BUFFER: usize = 256 * 1024;

/// Streams requests.jsonl; flushed on `flush` and when the buffer fills.
pub struct RequestsWriter {
    path: PathBuf,
    file: File,
    /// Whole lines not written yet.
    pending: Vec<u8>,
    /// Bytes of whole lines in the file.
    committed: u64,
    lines: u64,
    /// A write failed (its kind and message): the file holds the lines before it and
    /// nothing more is written.
    failed: Option<(std::io::ErrorKind, String)>,
}

impl RequestsWriter {
    /// Create (or truncate) `path` for writing.
    pub(super) fn create(path: PathBuf) -> Result<Self, ArchiveError> {
        let file = File::create(&path).map_err(|source| ArchiveError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(RequestsWriter {
            path,
            file,
            pending: Vec::with_capacity(BUFFER),
            committed: 0,
            lines: 0,
            failed: None,
        })
    }

    fn error(&self, source: std::io::Error) -> ArchiveError {
        ArchiveError::Write {
            path: self.path.clone(),
            source,
        }
    }

    /// The error of the write that failed, if one did.
    fn still_writing(&self) -> Result<(), ArchiveError> {
        match &self.failed {
            Some((kind, message)) => Err(self.error(std::io::Error::new(*kind, message.clone()))),
            None => Ok(()),
        }
    }

    /// Append one JSON line.
    pub fn write<T: Serialize>(&mut self, record: &T) -> Result<(), ArchiveError> {
        self.still_writing()?;
        let line = match serde_json::to_string(record) {
            Ok(line) => crate::plan::secrets::redact(&line).into_owned(),
            Err(e) => return Err(self.error(e.into())),
        };
        self.pending.extend_from_slice(line.as_bytes());
        self.pending.push(b'\n');
        self.lines += 1;
        if self.pending.len() >= BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    /// Lines written so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Push buffered lines to the file. On failure the file is cut back to its last whole
    /// line (what a full disk let through of the buffer is removed) and the writer stops.
    pub fn flush(&mut self) -> Result<(), ArchiveError> {
        self.still_writing()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        match self.file.write_all(&self.pending) {
            Ok(()) => {
                self.committed += self.pending.len() as u64;
                self.pending.clear();
                Ok(())
            }
            Err(e) => {
                self.failed = Some((e.kind(), e.to_string()));
                self.pending = Vec::new();
                let _ = self.file.set_len(self.committed);
                let _ = self.file.seek(SeekFrom::Start(self.committed));
                Err(self.error(e))
            }
        }
    }
}

impl Drop for RequestsWriter {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// The request records of the point in `point_dir` (its requests.jsonl), in the order they
/// finished. A line that does not read (cut short by a crash) is an error naming the line.
pub fn read_requests(point_dir: &Path) -> Result<Vec<RequestRecord>, ArchiveError> {
    let path = point_dir.join("requests.jsonl");
    let text = std::fs::read_to_string(&path).map_err(|source| ArchiveError::Read {
        path: path.clone(),
        source,
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| ArchiveError::Invalid {
                path: path.clone(),
                message: format!("line {}: {e}", i + 1),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /dev/full takes nothing ("no space left on device"): nothing half-written stays and
    /// the error is reported, on the flush and on every write after it.
    #[test]
    fn a_full_disk_leaves_only_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.jsonl");
        let mut w = RequestsWriter::create(path.clone()).unwrap();
        w.write(&serde_json::json!({"i": 0})).unwrap();
        w.flush().unwrap();
        // Swap the file for /dev/full: the next flush fails like a full disk.
        w.file = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        w.write(&serde_json::json!({"i": 1})).unwrap();
        let e = w.flush().unwrap_err();
        assert!(
            crate::units::error_chain(&e).contains("No space left"),
            "{e}"
        );
        let again = w.write(&serde_json::json!({"i": 2})).unwrap_err();
        assert!(
            crate::units::error_chain(&again).contains("No space left"),
            "{again}"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "{\"i\":0}\n");
    }
}
