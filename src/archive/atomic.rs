//! All-or-nothing file writes: readers of the archive never see half a file. Every JSON file
//! is written with known secret values redacted (`plan::secrets`).

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use super::ArchiveError;

pub(super) fn write_json_atomic(
    path: &Path,
    value: &serde_json::Value,
) -> Result<(), ArchiveError> {
    let mut value = value.clone();
    crate::plan::secrets::redact_json(&mut value);
    let mut text = serde_json::to_string_pretty(&value).expect("json serializes");
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

/// Write to a temporary file beside `path`, fsync, rename: readers never see half a file.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ArchiveError> {
    let map = |source| ArchiveError::Write {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let written = File::create(&tmp).and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_data()?;
        fs::rename(&tmp, path)
    });
    if written.is_err() {
        // A full disk: what was written of the copy is given back.
        let _ = fs::remove_file(&tmp);
    }
    written.map_err(map)
}
