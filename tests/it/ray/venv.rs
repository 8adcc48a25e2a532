//! Where the pinned Ray is: the venv scripts/ray-venv.sh builds (`ORCHESTRATE_RAY_VENV`,
//! default `~/.cache/orchestrate/ray-venv`). A missing Ray fails a test under CI=true and
//! makes it return early, saying why, elsewhere.

use std::path::PathBuf;

/// The venv directory tests look in.
pub(crate) fn dir() -> PathBuf {
    match std::env::var_os("ORCHESTRATE_RAY_VENV") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/orchestrate/ray-venv"),
    }
}

/// The venv's `ray` program, or `None` (after saying why on stderr) when Ray is not
/// installed outside CI. Under CI=true a missing Ray panics: CI installs it, so absence is a
/// failure.
pub(crate) fn ray() -> Option<PathBuf> {
    let venv = dir();
    let ray = venv.join("bin/ray");
    let importable = venv.join("bin/python").is_file()
        && std::process::Command::new(venv.join("bin/python"))
            .args(["-c", "import ray"])
            .output()
            .is_ok_and(|o| o.status.success());
    if importable && ray.is_file() {
        return Some(ray);
    }
    let why = format!(
        "Ray is not installed in {} (ray importable: {importable}, bin/ray present: {}); run scripts/ray-venv.sh",
        venv.display(),
        ray.is_file()
    );
    assert!(!crate::common::in_ci(), "{why}");
    eprintln!("skipping: {why}");
    None
}
