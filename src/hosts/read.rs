//! Reading the hosts file into its typed form ([`HostsFileSpec`]): the bytes (at most
//! [`MAX_FILE_BYTES`]), UTF-8 (a bad byte is told by line, column and offset), an empty file,
//! and the YAML, each failure rendered as the task file's are (`crate::spec::diagnostic`).

use std::io::Read;
use std::path::Path;

use super::error::HostsError;
use super::file::HostsFileSpec;
use crate::spec::Diagnostic;
use crate::spec::diagnostic::from_yaml;
use crate::spec::load::MAX_FILE_BYTES;

/// What a hosts file looks like, for the help of an empty or unreadable one.
const EXAMPLE: &str = "list your machines under `hosts:`, e.g. `hosts: {gpu-1: {address: 10.0.0.5, gpus: 8:H200}}` (see docs/hosts.md)";

/// The text of the hosts file at `path`, and its content parsed.
pub(super) fn read(path: &Path) -> Result<(String, HostsFileSpec), HostsError> {
    let read_err = |source| HostsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    // One byte over the limit is enough to know it is too large.
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(Diagnostic::file(
            path,
            format!(
                "the file is larger than {} MiB; a hosts file is a page of YAML",
                MAX_FILE_BYTES / (1024 * 1024)
            ),
        )
        .with_help("check that --hosts names the hosts file, not another file")
        .into());
    }
    let text = String::from_utf8(bytes).map_err(|e| not_utf8(path, e.as_bytes(), &e))?;
    if is_blank(&text) {
        return Err(Diagnostic::file(path, "the file is empty")
            .with_help(EXAMPLE)
            .into());
    }
    let spec = serde_saphyr::from_str(&text).map_err(|e| from_yaml(path, &text, &e))?;
    Ok((text, spec))
}

/// Nothing but blank lines and comments.
fn is_blank(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#') || l == "---" || l == "...")
}

/// Where the first byte that is not UTF-8 is: line, column (in characters) and offset.
fn not_utf8(path: &Path, bytes: &[u8], e: &std::string::FromUtf8Error) -> Diagnostic {
    let at = e.utf8_error().valid_up_to();
    let before = &bytes[..at];
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line = before.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    // The bytes before `at` are valid UTF-8, so this counts characters.
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count() as u64
        + 1;
    Diagnostic {
        file: path.to_path_buf(),
        line,
        column,
        message: format!(
            "not UTF-8 text: byte {at} (0x{:02x}) starts no UTF-8 character",
            bytes[at]
        ),
        snippet: String::new(),
        help: Some(
            "save the file as UTF-8 (`iconv -f latin1 -t utf-8`), or check that --hosts names the hosts file"
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(bytes: &[u8]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts.yaml");
        std::fs::write(&path, bytes).unwrap();
        read(&path)
            .unwrap_err()
            .to_string()
            .replace(&dir.path().display().to_string(), "[DIR]")
    }

    #[test]
    fn a_byte_that_is_not_utf8_is_told_by_line_column_and_offset() {
        let err = error(b"hosts:\n  caf\xc3\xa9:\n    user: \xff\n");
        assert!(
            err.starts_with("[DIR]/hosts.yaml:3:11: not UTF-8 text: byte 26 (0xff)"),
            "{err}"
        );
        assert!(err.contains("help: save the file as UTF-8"), "{err}");
    }

    #[test]
    fn an_empty_file_says_so_and_what_to_write() {
        for text in ["", "\n  \n", "# only a comment\n---\n"] {
            let err = error(text.as_bytes());
            assert!(
                err.starts_with("[DIR]/hosts.yaml: the file is empty"),
                "{text:?}: {err}"
            );
            assert!(err.contains("list your machines under `hosts:`"), "{err}");
        }
    }
}
