//! Where the pinned routers are: the venv scripts/routers-venv.sh builds
//! (`ORCHESTRATE_ROUTERS_VENV`, default `~/.cache/orchestrate/routers-venv`) for sglang-router
//! and vllm-router, and the one scripts/dynamo-venv.sh builds (`ORCHESTRATE_DYNAMO_VENV`,
//! default `~/.cache/orchestrate/dynamo-venv`) for the Dynamo frontend and mocker. A missing
//! venv fails a test under CI=true and makes it return early, saying why, elsewhere.

use std::path::{Path, PathBuf};

/// The router commands of the venv.
#[derive(Debug, Clone)]
pub(crate) struct Routers {
    /// The venv's python (`python -m sglang_router.launch_router`).
    pub python: PathBuf,
    /// The `vllm-router` executable.
    pub vllm_router: PathBuf,
}

/// `$var` when set, else `~/.cache/orchestrate/<name>`.
fn venv_dir(var: &str, name: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/orchestrate")
            .join(name),
    }
}

/// The routers venv directory tests look in.
pub(crate) fn dir() -> PathBuf {
    venv_dir("ORCHESTRATE_ROUTERS_VENV", "routers-venv")
}

/// The Dynamo venv directory tests look in.
pub(crate) fn dynamo_dir() -> PathBuf {
    venv_dir("ORCHESTRATE_DYNAMO_VENV", "dynamo-venv")
}

/// `python -c "import <module>"` succeeds with the venv's `python`.
fn imports(python: &Path, module: &str) -> bool {
    python.is_file()
        && std::process::Command::new(python)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success())
}

/// A part is missing: under CI=true a failure (CI installs it), else `None` after saying why.
fn missing<T>(why: &str) -> Option<T> {
    assert!(!crate::common::in_ci(), "{why}");
    eprintln!("skipping: {why}");
    None
}

/// The routers, or `None` (after saying why on stderr) when they are not installed outside
/// CI. Under CI=true a missing router panics: CI installs them, so absence is a failure.
pub(crate) fn routers() -> Option<Routers> {
    let venv = dir();
    let r = Routers {
        python: venv.join("bin/python"),
        vllm_router: venv.join("bin/vllm-router"),
    };
    let sglang_ok = imports(&r.python, "sglang_router.launch_router");
    if sglang_ok && r.vllm_router.is_file() {
        return Some(r);
    }
    missing(&format!(
        "the PD routers are not installed in {} (sglang_router importable: {sglang_ok}, \
         vllm-router present: {}); run scripts/routers-venv.sh",
        venv.display(),
        r.vllm_router.is_file()
    ))
}

/// The Dynamo venv's python (`python -m dynamo.frontend`, `python -m dynamo.mocker`), or
/// `None` (after saying why) when Dynamo is not installed outside CI; under CI=true a panic.
pub(crate) fn dynamo() -> Option<PathBuf> {
    let venv = dynamo_dir();
    let python = venv.join("bin/python");
    if imports(&python, "dynamo.frontend.main, dynamo.mocker.main") {
        return Some(python);
    }
    missing(&format!(
        "Dynamo (dynamo.frontend, dynamo.mocker) is not installed in {}; run \
         scripts/dynamo-venv.sh",
        venv.display()
    ))
}
