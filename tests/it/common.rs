//! Helpers shared by the integration tests: the built binary, the repository root, and
//! whether the environment demands Docker/SSH tests run (CI=true).

#![allow(dead_code, reason = "each test module uses a different subset")]

use std::path::PathBuf;

/// The `orchestrate` binary built for this test run.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_orchestrate"))
}

/// The repository root (where tasks/ and docs/ live).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// In CI (`CI=true`) tests that need Docker or sshd must run: a missing engine is a failure,
/// never a silent skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}
