//! What it takes to repeat a run, as text (`repro.md` in the run directory, and
//! `orchestrate runs show RUN --repro`): orchestrate's version and command line, the secrets
//! to supply, per process its host, image@digest, env and commands with a shell line that
//! starts it by hand, and the task as resolved. Made from the manifest alone, so an archive
//! copied elsewhere still tells it; secrets stay `***`.

use std::fmt::Write as _;

use super::atomic::write_atomic;
use super::{Archive, ArchiveError, DeploymentRecord, Manifest, ProcessRecord};
use crate::units::shell_quote;

/// The file name in the run directory.
pub const REPRO: &str = "repro.md";

impl Archive {
    /// Write `repro.md` from the manifest as it stands.
    pub fn write_repro(&self) -> Result<(), ArchiveError> {
        let text = repro_text(self.manifest());
        write_atomic(&self.dir().join(REPRO), text.as_bytes())
    }
}

/// The reproduction text of a run (Markdown).
pub fn repro_text(m: &Manifest) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# Reproducing {}/{}\n", m.task, m.run_id);
    let commit = m
        .tool
        .commit
        .as_deref()
        .map(|c| format!(", commit {c}"))
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "Run {} of task `{}` ({}), started {}, status {}, by {} {}{commit}.\n",
        m.run_id,
        m.task,
        m.model,
        m.started_at.to_rfc3339(),
        m.status,
        m.tool.name,
        m.tool.version,
    );
    command_section(&mut o, m);
    secrets_section(&mut o, m);
    let _ = writeln!(o, "## Processes\n");
    for d in &m.deployments {
        deployment_section(&mut o, d);
    }
    let _ = writeln!(o, "## The task as resolved\n");
    let _ = writeln!(
        o,
        "Templates rendered per deployment under `deployments`; secrets as `***`.\n"
    );
    let resolved = serde_json::to_string_pretty(&m.resolved).unwrap_or_default();
    let _ = writeln!(o, "```json\n{resolved}\n```");
    o
}

fn command_section(o: &mut String, m: &Manifest) {
    let _ = writeln!(o, "## The orchestrate command\n");
    match &m.invocation {
        Some(inv) => {
            let line: Vec<String> = inv.argv.iter().map(|a| shell_quote(a)).collect();
            let _ = writeln!(o, "```sh");
            if let Some(cwd) = &inv.cwd {
                let _ = writeln!(o, "cd {}", shell_quote(&cwd.to_string_lossy()));
            }
            let _ = writeln!(o, "{}\n```\n", line.join(" "));
            if let Some(hosts) = &inv.hosts_file {
                let digest = inv.hosts_sha256.as_deref().unwrap_or("unreadable");
                let _ = writeln!(o, "Hosts file: `{}` (sha256 {digest}).", hosts.display());
            }
        }
        None => {
            let _ = writeln!(o, "Not recorded (an archive of an older orchestrate).\n");
        }
    }
    let _ = writeln!(
        o,
        "Task file: `{}` (sha256 {}).\n",
        m.source.display(),
        m.spec_hash
    );
}

fn secrets_section(o: &mut String, m: &Manifest) {
    let mut names: Vec<String> = m
        .deployments
        .iter()
        .flat_map(|d| d.processes())
        .flat_map(|(_, p)| p.secrets)
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        return;
    }
    let _ = writeln!(o, "## Secrets to supply\n");
    let _ = writeln!(
        o,
        "Shown as `***` below. Export them where orchestrate runs (`${{{{ secrets.NAME }}}}`), or \
         put their values in place of `***` to start a process by hand: {}.\n",
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

fn deployment_section(o: &mut String, d: &DeploymentRecord) {
    let axes: Vec<String> = d
        .axes
        .iter()
        .map(|(k, v)| format!("{k}={}", super::value_text(v)))
        .collect();
    let _ = writeln!(
        o,
        "### Deployment {}{}\n",
        d.id,
        if axes.is_empty() {
            String::new()
        } else {
            format!(" ({})", axes.join(", "))
        }
    );
    let processes = d.processes();
    if processes.iter().all(|(_, p)| p.argv.is_empty()) {
        let _ = writeln!(
            o,
            "No process was recorded (never started, or an older archive).\n"
        );
        return;
    }
    for (key, p) in processes {
        process_section(o, key, &p);
    }
}

fn process_section(o: &mut String, key: &str, p: &ProcessRecord) {
    let host = p.host.as_deref().unwrap_or("?");
    let provider = p.provider.as_deref().unwrap_or("?");
    let _ = writeln!(o, "#### {key} on {host} ({provider})\n");
    let mut facts = Vec::new();
    if let Some(image) = &p.image {
        let exact = p.image_digest.as_deref().unwrap_or("no digest");
        facts.push(format!("image `{}` = `{exact}`", image.reference));
    }
    if let Some(pid) = p.pid {
        facts.push(format!("pid {pid}"));
    }
    if let Some(id) = &p.container_id {
        facts.push(format!("container {}", &id[..id.len().min(12)]));
    }
    if let Some(port) = p.facts.get("port").and_then(|v| v.as_u64()) {
        facts.push(format!("port {port}"));
    }
    if let Some(s) = p.ready_after_s {
        facts.push(format!("ready after {s:.1} s"));
    }
    if let Some(v) = &p.server_version {
        facts.push(format!("server version `{}` ({})", v.version, v.source));
    }
    if let Some(exit) = &p.exit {
        facts.push(format!("ended: {exit}"));
    }
    if !facts.is_empty() {
        let _ = writeln!(o, "{}.\n", facts.join("; "));
    }
    let _ = writeln!(o, "```sh\n{}\n```\n", start_line(p));
}

/// A shell line that starts the process as orchestrate did (its env and commands; for a
/// container the exact image, its port and network; GPUs and volumes are in `resolved`).
fn start_line(p: &ProcessRecord) -> String {
    let mut env: Vec<(String, String)> = p.env.clone().into_iter().collect();
    if let Some(serde_json::Value::Object(pinned)) = p.facts.get("gpu_env") {
        for (k, v) in pinned {
            env.retain(|(name, _)| name != k);
            env.push((k.clone(), super::value_text(v)));
        }
    }
    let script = p.argv.join("\n");
    match &p.image {
        Some(image) => {
            let exact = match (&p.image_digest, image.repo_digests.is_empty()) {
                (Some(d), false) => d.clone(),
                // A local build has no registry digest: the tag, with its id alongside.
                _ => image.reference.clone(),
            };
            let mut line = vec!["docker run --rm".to_string()];
            match p.facts.get("container").and_then(|c| c["network"].as_str()) {
                Some("host") => line.push("--network host".into()),
                _ => {
                    if let Some(port) = p.facts.get("port").and_then(|v| v.as_u64()) {
                        line.push(format!("-p 127.0.0.1:{port}:{port}"));
                    }
                }
            }
            for (k, v) in &env {
                line.push(format!("-e {}", shell_quote(&format!("{k}={v}"))));
            }
            line.push(format!("--entrypoint /bin/sh {} -c", shell_quote(&exact)));
            line.push(shell_quote(&script));
            line.join(" \\\n  ")
        }
        None => {
            let mut line = vec!["env".to_string()];
            for (k, v) in &env {
                line.push(shell_quote(&format!("{k}={v}")));
            }
            line.push(format!("sh -e -c {}", shell_quote(&script)));
            line.join(" \\\n  ")
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::archive::{Invocation, read_manifest};

    #[test]
    fn the_text_has_the_command_line_secrets_and_each_process() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/archive-v1/demo/20261123-223731");
        let mut m = read_manifest(&dir).unwrap();
        // An older archive: nothing per process, no command line; it still renders.
        let old = repro_text(&m);
        assert!(old.contains("Not recorded"), "{old}");
        m.invocation = Some(Invocation {
            argv: vec!["orchestrate".into(), "run".into(), "tasks/demo.yaml".into()],
            cwd: Some("/src/it's".into()),
            hosts_file: None,
            hosts_sha256: None,
        });
        m.deployments[0].instances.insert(
            "server-0".into(),
            json!({"role": "server", "index": 0, "host": "local", "provider": "docker",
                "argv": ["mock-server --port 8000", "echo done"],
                "env": {"HF_TOKEN": "***", "A": "1 2"}, "secrets": ["HF_TOKEN"],
                "image": {"reference": "m:1", "id": "sha256:ab", "repo_digests": ["m@sha256:cd"],
                    "repo_tags": []},
                "image_digest": "m@sha256:cd", "port": 8000,
                "container": {"id": "0123456789abcdef", "network": "bridge"},
                "server_version": {"version": "0.9", "source": "GET /version"},
                "exit": {"code": 0, "signal": null}}),
        );
        let text = repro_text(&m);
        for want in [
            "cd '/src/it'\\''s'\norchestrate run tasks/demo.yaml\n",
            "## Secrets to supply",
            "`HF_TOKEN`",
            "image `m:1` = `m@sha256:cd`",
            "server version `0.9` (GET /version)",
            "ended: exit code 0",
            "-p 127.0.0.1:8000:8000",
            "-e 'A=1 2'",
            "--entrypoint /bin/sh m@sha256:cd -c \\\n  'mock-server --port 8000\necho done'",
            "## The task as resolved\n\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }
}
