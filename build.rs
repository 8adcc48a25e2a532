//! Build script: records the git commit orchestrate is built from (`ORCHESTRATE_GIT_COMMIT`,
//! shown as `tool.commit` in every run manifest). An `ORCHESTRATE_GIT_COMMIT` set in the
//! build's environment wins (builds from a source tarball); without git the field is omitted.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Watch `path` (inside the git directory) when it exists: a missing one would rerun the
/// script on every build.
fn watch(path: Option<String>) {
    if let Some(p) = path.filter(|p| std::path::Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={p}");
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=ORCHESTRATE_GIT_COMMIT");
    if let Ok(given) = std::env::var("ORCHESTRATE_GIT_COMMIT") {
        println!("cargo:rustc-env=ORCHESTRATE_GIT_COMMIT={given}");
        return;
    }
    // Rebuild when HEAD moves: the HEAD file and the branch ref it points at.
    println!("cargo:rerun-if-changed=build.rs");
    for path in ["HEAD", "packed-refs"] {
        watch(git(&["rev-parse", "--git-path", path]));
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(git(&["rev-parse", "--git-path", &branch]));
    }
    if let Some(commit) = git(&["rev-parse", "HEAD"]) {
        println!("cargo:rustc-env=ORCHESTRATE_GIT_COMMIT={commit}");
    }
}
