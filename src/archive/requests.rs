//! `points/<point>/requests.jsonl`: one JSON line per request, streamed as requests finish,
//! known secret values redacted (an error body may echo one).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use serde::Serialize;

use super::ArchiveError;

/// Streams requests.jsonl; flushed on `flush` and when dropped.
pub struct RequestsWriter {
    path: PathBuf,
    out: BufWriter<File>,
    lines: u64,
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
            out: BufWriter::with_capacity(256 * 1024, file),
            lines: 0,
        })
    }

    /// Append one JSON line.
    pub fn write<T: Serialize>(&mut self, record: &T) -> Result<(), ArchiveError> {
        let map = |source| ArchiveError::Write {
            path: self.path.clone(),
            source,
        };
        let line = serde_json::to_string(record).map_err(|e| map(e.into()))?;
        let line = crate::plan::secrets::redact(&line);
        self.out.write_all(line.as_bytes()).map_err(map)?;
        self.out.write_all(b"\n").map_err(map)?;
        self.lines += 1;
        Ok(())
    }

    /// Lines written so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Push buffered lines to the file.
    pub fn flush(&mut self) -> Result<(), ArchiveError> {
        self.out.flush().map_err(|source| ArchiveError::Write {
            path: self.path.clone(),
            source,
        })
    }
}
