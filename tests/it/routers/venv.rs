//! Where the pinned routers are: the venv scripts/routers-venv.sh builds
//! (`ORCHESTRATE_ROUTERS_VENV`, default `~/.cache/orchestrate/routers-venv`). Missing
//! routers fail a test under CI=true and make it return early, saying why, elsewhere.

use std::path::PathBuf;

/// The router commands of the venv.
#[derive(Debug, Clone)]
pub(crate) struct Routers {
    /// The venv's python (`python -m sglang_router.launch_router`).
    pub python: PathBuf,
    /// The `vllm-router` executable.
    pub vllm_router: PathBuf,
}

/// The venv directory tests look in.
pub(crate) fn dir() -> PathBuf {
    match std::env::var_os("ORCHESTRATE_ROUTERS_VENV") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/orchestrate/routers-venv"),
    }
}

/// The routers, or `None` (after saying why on stderr) when they are not installed outside
/// CI. Under CI=true a missing router panics: CI installs them, so absence is a failure.
pub(crate) fn routers() -> Option<Routers> {
    let venv = dir();
    let r = Routers {
        python: venv.join("bin/python"),
        vllm_router: venv.join("bin/vllm-router"),
    };
    let sglang_ok = r.python.is_file()
        && std::process::Command::new(&r.python)
            .args(["-c", "import sglang_router.launch_router"])
            .output()
            .is_ok_and(|o| o.status.success());
    if sglang_ok && r.vllm_router.is_file() {
        return Some(r);
    }
    let why = format!(
        "the PD routers are not installed in {} (sglang_router importable: {sglang_ok}, \
         vllm-router present: {}); run scripts/routers-venv.sh",
        venv.display(),
        r.vllm_router.is_file()
    );
    assert!(!crate::common::in_ci(), "{why}");
    eprintln!("skipping: {why}");
    None
}
