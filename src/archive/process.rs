//! What the manifest records about each process of a deployment (`deployments[].instances`,
//! keyed `<role>-<index>`) and about the invocation that made the run: enough to start the
//! same processes again by hand (`orchestrate runs show RUN --repro`, repro.md).
//!
//! Format version 1 gained these fields later; every one is optional on reading, so older
//! archives still read (with nothing to show for them).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One process (a local process group, a process on a remote host, or a container).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessRecord {
    /// The role it plays (`server` for a plain task).
    #[serde(default)]
    pub role: String,
    /// Its index within the role.
    #[serde(default)]
    pub index: usize,
    /// The replica (one model instance) it belongs to; the index unless the role spans nodes.
    #[serde(default)]
    pub replica: usize,
    /// Its rank within the replica (0 for a one-node replica).
    #[serde(default)]
    pub node: usize,
    /// Its index on its node, when its role runs several processes per node (`procs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proc_rank: Option<usize>,
    /// The host it ran on (`local` for this machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// `local`, `ssh`, `docker`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The commands as run (templates rendered), one shell line each, run by `sh -c`.
    #[serde(default)]
    pub argv: Vec<String>,
    /// Its environment as set by orchestrate, secrets as `***`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of the env entries shown as `***`: what a user must supply to repeat the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Process id (of the process group leader for a local process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Container id, for a container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// The image, for a container: the reference asked for and what the engine had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageRecord>,
    /// `repo@sha256:...` when the image came from a registry, else its `sha256:` id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    /// Seconds from the deployment's first launch until this process was launched (a gang
    /// with a `startup_order` launches its ranks one after the other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_after_s: Option<f64>,
    /// Seconds from the deployment's first launch until it passed readiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_after_s: Option<f64>,
    /// The version the server reported, and where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<ServerVersion>,
    /// How it ended (also when orchestrate stopped it), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitRecord>,
    /// Everything else its provider reported (port, pgid, container name, reach, ...).
    #[serde(flatten)]
    pub facts: serde_json::Map<String, serde_json::Value>,
}

/// A container image, as the engine described it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ImageRecord {
    /// The reference the task asked for.
    #[serde(default)]
    pub reference: String,
    /// `sha256:...` image id on the engine.
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub repo_digests: Vec<String>,
    #[serde(default)]
    pub repo_tags: Vec<String>,
}

impl ImageRecord {
    /// The most portable name of exactly this image: a registry digest, else the engine's id.
    pub fn digest(&self) -> Option<String> {
        self.repo_digests
            .first()
            .cloned()
            .or_else(|| (!self.id.is_empty()).then(|| self.id.clone()))
    }
}

/// A server's own version.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServerVersion {
    pub version: String,
    /// Where it came from, e.g. `GET /version`.
    pub source: String,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitRecord {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl std::fmt::Display for ExitRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exit code {code}"),
            (None, Some(signal)) => write!(f, "signal {signal}"),
            (None, None) => f.write_str("unknown"),
        }
    }
}

impl ProcessRecord {
    /// Read one `instances` entry back; entries written before these fields existed give a
    /// record with only `facts`.
    pub fn from_value(value: &serde_json::Value) -> Option<Self> {
        serde_json::from_value(value.clone()).ok()
    }

    /// As an `instances` entry.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a process record serializes")
    }
}

/// How orchestrate was invoked for the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Invocation {
    /// The command line, known secret values as `***`.
    pub argv: Vec<String>,
    /// The working directory (relative paths in `argv` are relative to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// The hosts file used, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts_file: Option<PathBuf>,
    /// sha256 of the hosts file, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts_sha256: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn provider_facts_are_kept_and_typed_fields_read_back() {
        let value = json!({
            "role": "server", "index": 0, "replica": 0, "node": 0, "host": "local",
            "provider": "docker", "argv": ["serve --port 1"], "env": {"A": "1", "HF_TOKEN": "***"},
            "secrets": ["HF_TOKEN"], "container_id": "abc",
            "image": {"reference": "m:1", "id": "sha256:1", "repo_digests": [], "repo_tags": ["m:1"]},
            "image_digest": "sha256:1", "ready_after_s": 1.5,
            "server_version": {"version": "0.9", "source": "GET /version"},
            "exit": {"code": null, "signal": 15},
            "container": {"id": "abc", "name": "n"}, "port": 8000,
        });
        let record = ProcessRecord::from_value(&value).unwrap();
        assert_eq!(record.image.as_ref().unwrap().digest().unwrap(), "sha256:1");
        assert_eq!(record.exit.unwrap().to_string(), "signal 15");
        assert_eq!(record.facts["port"], 8000);
        assert_eq!(record.to_value(), value);
        // An entry of an older archive: only the provider's facts.
        let old = ProcessRecord::from_value(&json!({"provider": "local", "pgid": 5709})).unwrap();
        assert_eq!(old.provider.as_deref(), Some("local"));
        assert!(old.argv.is_empty() && old.facts["pgid"] == 5709);
    }
}
