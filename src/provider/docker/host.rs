//! Facts about the engine's host for the manifest: the Docker version, and the GPUs that
//! `nvidia-smi`, `amd-smi` and `rocm-smi` report when they exist (their absence is recorded,
//! never guessed). The GPU tools run on the orchestrating machine, so they are only probed
//! for the local engine.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::connection::Connection;

/// How long one GPU tool may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(15);

/// The NVIDIA GPUs `nvidia-smi` lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct NvidiaGpu {
    pub index: String,
    pub name: String,
    pub uuid: String,
    pub driver: String,
    pub memory: String,
}

/// What one GPU tool said.
#[derive(Debug, Clone)]
pub(crate) enum ToolOutput {
    /// Not installed (not on PATH).
    Absent,
    /// Installed but failed (no driver loaded, no permission, ...).
    Failed(String),
    Ran(String),
}

impl ToolOutput {
    fn facts(&self) -> Value {
        match self {
            ToolOutput::Absent => json!({"present": false}),
            ToolOutput::Failed(error) => json!({"present": true, "error": error}),
            ToolOutput::Ran(out) => json!({"present": true, "output": cut(out, 8000)}),
        }
    }
}

/// Run a tool with a timeout.
pub(crate) async fn run_tool(program: &str, args: &[&str]) -> ToolOutput {
    let mut command = tokio::process::Command::new(program);
    command.args(args).kill_on_drop(true);
    match tokio::time::timeout(TOOL_TIMEOUT, command.output()).await {
        Err(_) => ToolOutput::Failed(format!("no answer within {TOOL_TIMEOUT:?}")),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => ToolOutput::Absent,
        Ok(Err(e)) => ToolOutput::Failed(e.to_string()),
        Ok(Ok(out)) if !out.status.success() => ToolOutput::Failed(format!(
            "{}: {}",
            out.status,
            cut(String::from_utf8_lossy(&out.stderr).trim(), 2000)
        )),
        Ok(Ok(out)) => ToolOutput::Ran(String::from_utf8_lossy(&out.stdout).into_owned()),
    }
}

/// `nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader`.
pub(crate) async fn nvidia() -> (ToolOutput, Vec<NvidiaGpu>) {
    let out = run_tool(
        "nvidia-smi",
        &[
            "--query-gpu=index,name,uuid,driver_version,memory.total",
            "--format=csv,noheader",
        ],
    )
    .await;
    let gpus = match &out {
        ToolOutput::Ran(text) => parse_nvidia(text),
        _ => vec![],
    };
    (out, gpus)
}

fn parse_nvidia(text: &str) -> Vec<NvidiaGpu> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            match fields.as_slice() {
                [index, name, uuid, driver, memory] => Some(NvidiaGpu {
                    index: index.to_string(),
                    name: name.to_string(),
                    uuid: uuid.to_string(),
                    driver: driver.to_string(),
                    memory: memory.to_string(),
                }),
                _ => None,
            }
        })
        .collect()
}

/// AMD GPUs by `rocm-smi --showproductname --json` (`card0`, `card1`, ... keys): their
/// product names, or `None` when rocm-smi did not run.
pub(crate) fn parse_rocm_cards(text: &str) -> Option<Vec<String>> {
    let value: Value = serde_json::from_str(text).ok()?;
    let cards = value.as_object()?;
    Some(
        cards
            .iter()
            .filter(|(key, _)| key.starts_with("card"))
            .map(|(_, card)| {
                ["Card Series", "Card series", "Card Model", "Card model"]
                    .iter()
                    .find_map(|k| card.get(*k).and_then(Value::as_str))
                    .unwrap_or("unknown")
                    .to_string()
            })
            .collect(),
    )
}

/// The host facts: engine version, and GPU tools when `probe_gpus`.
pub(crate) async fn facts(connection: &Connection, probe_gpus: bool) -> Value {
    let docker = match connection.docker.version().await {
        Ok(v) => json!({
            "endpoint": connection.endpoint,
            "version": v.version,
            "api_version": v.api_version,
            "os": v.os,
            "arch": v.arch,
            "kernel": v.kernel_version,
        }),
        Err(e) => json!({"endpoint": connection.endpoint, "error": super::error::chain(&e)}),
    };
    if !probe_gpus {
        return json!({"docker": docker, "gpus": "not probed (remote engine)"});
    }
    let (nvidia_out, nvidia_gpus) = nvidia().await;
    let mut nvidia_facts = nvidia_out.facts();
    if !nvidia_gpus.is_empty() {
        nvidia_facts["count"] = json!(nvidia_gpus.len());
        nvidia_facts["gpus"] = json!(nvidia_gpus);
    }
    let rocm = run_tool(
        "rocm-smi",
        &["--showproductname", "--showdriverversion", "--json"],
    )
    .await;
    let mut rocm_facts = rocm.facts();
    if let ToolOutput::Ran(text) = &rocm
        && let Some(models) = parse_rocm_cards(text)
    {
        rocm_facts["count"] = json!(models.len());
        rocm_facts["models"] = json!(models);
    }
    let amd = run_tool("amd-smi", &["static", "--json"]).await;
    json!({
        "docker": docker,
        "gpus": {
            "nvidia-smi": nvidia_facts,
            "rocm-smi": rocm_facts,
            "amd-smi": amd.facts(),
        },
    })
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_csv_rows_become_gpus() {
        let text = "0, NVIDIA H200, GPU-aaa, 570.86.15, 143771 MiB\n1, NVIDIA H200, GPU-bbb, 570.86.15, 143771 MiB\n";
        let gpus = parse_nvidia(text);
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[1].name, "NVIDIA H200");
        assert_eq!(gpus[1].uuid, "GPU-bbb");
        assert_eq!(gpus[0].driver, "570.86.15");
    }

    #[test]
    fn rocm_cards_are_counted() {
        let text = r#"{"card0": {"Card Series": "AMD Instinct MI300X"}, "card1": {"Card Series": "AMD Instinct MI300X"}, "system": {"Driver version": "6.8.5"}}"#;
        assert_eq!(
            parse_rocm_cards(text).unwrap(),
            vec!["AMD Instinct MI300X", "AMD Instinct MI300X"]
        );
        assert_eq!(parse_rocm_cards("not json"), None);
    }

    #[tokio::test]
    async fn a_missing_tool_is_recorded_as_absent() {
        let out = run_tool("orchestrate-no-such-tool-xyz", &[]).await;
        assert!(matches!(out, ToolOutput::Absent));
        assert_eq!(out.facts(), json!({"present": false}));
    }
}
