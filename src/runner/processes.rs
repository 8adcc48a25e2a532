//! The manifest's record of each process of a deployment ([`ProcessRecord`]): role, index,
//! host, the commands and env as run (secrets `***`), pid or container and image digest
//! (from the provider's facts), time to ready, the version the server reports, how it ended;
//! and the record of orchestrate's own invocation. Gathers facts only: never fails a run.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::Value;

use crate::archive::{ExitRecord, Invocation, ProcessRecord, ServerVersion};
use crate::fetch::{self, Origin};
use crate::plan::secrets::redact;
use crate::plan::{DeploymentPlan, EnvValue, HostPlan, InstancePlan, REDACTED, RolePlan};
use crate::provider::{ExitWatch, Instance};

/// How long one version request may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(2);

/// When each process was launched and when it passed readiness, in seconds from the
/// deployment's first launch.
#[derive(Default)]
pub(super) struct Timings {
    /// The first launch of the deployment: where every `ready_after_s` counts from.
    start: Option<Instant>,
    started_after: BTreeMap<String, f64>,
    ready_after: BTreeMap<String, f64>,
}

impl Timings {
    /// `key` is being launched now.
    pub(super) fn launching(&mut self, key: &str) {
        let at = *self.start.get_or_insert_with(Instant::now);
        self.started_after
            .insert(key.to_string(), at.elapsed().as_secs_f64());
    }

    /// `key` passed readiness now.
    pub(super) fn ready(&mut self, key: &str) {
        if let Some(at) = self.start {
            self.ready_after
                .insert(key.to_string(), at.elapsed().as_secs_f64());
        }
    }
}

/// One record per launched instance, keyed `<role>-<index>` as the instances are.
pub(super) fn records(
    deployment: &DeploymentPlan,
    instances: &[(String, Box<dyn Instance>)],
    timings: &Timings,
    versions: &BTreeMap<String, ServerVersion>,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for role in &deployment.roles {
        for plan in &role.instances {
            let key = format!("{}-{}", role.name, plan.index);
            let Some((_, instance)) = instances.iter().find(|(k, _)| *k == key) else {
                continue;
            };
            // A pod's commands as it ran them: with the IPs of the pods it named.
            let placed = super::pod_addresses::place(role, plan, instances)
                .unwrap_or(std::borrow::Cow::Borrowed(plan));
            let mut record = record(role, &placed, instance.facts());
            record.started_after_s = timings.started_after.get(&key).copied();
            record.ready_after_s = timings.ready_after.get(&key).copied();
            record.server_version = versions.get(&key).cloned();
            out.insert(key, record.to_value());
        }
    }
    out
}

/// The record of instance `plan` of `role`, from its provider's `facts`.
fn record(role: &RolePlan, plan: &InstancePlan, facts: Value) -> ProcessRecord {
    // Facts whose known fields do not read (a provider's own shape) are kept whole.
    let mut record = ProcessRecord::from_value(&facts).unwrap_or_else(|| ProcessRecord {
        facts: facts.as_object().cloned().unwrap_or_default(),
        ..ProcessRecord::default()
    });
    record.role = role.name.clone();
    record.index = plan.index;
    record.replica = plan.replica;
    record.node = plan.node_rank;
    record.proc_rank = plan.proc_rank;
    record.host = Some(match &plan.host {
        HostPlan::Local => "local".to_string(),
        HostPlan::Remote { name, .. } => name.clone(),
        HostPlan::Slurm(slurm) => slurm.name.clone(),
        HostPlan::Kubernetes(place) => place.cluster.name.clone(),
    });
    if record.provider.is_none() {
        record.provider = Some(match &plan.host {
            HostPlan::Local => "local".to_string(),
            HostPlan::Remote { .. } => "ssh".to_string(),
            HostPlan::Slurm(_) => "slurm".to_string(),
            HostPlan::Kubernetes(_) => "kubernetes".to_string(),
        });
    }
    record.argv = plan
        .commands
        .iter()
        .map(|c| redact(c).into_owned())
        .collect();
    for var in &plan.env {
        let shown = match &var.value {
            EnvValue::Plain(v) => redact(v).into_owned(),
            EnvValue::Secret { name, value } => {
                record.secrets.extend(name.split(',').map(str::to_string));
                match redact(value) {
                    std::borrow::Cow::Owned(clean) => clean,
                    std::borrow::Cow::Borrowed(_) => REDACTED.to_string(),
                }
            }
        };
        record.env.insert(var.name.clone(), shown);
    }
    record.secrets.sort();
    record.secrets.dedup();
    if record.pid.is_none() {
        record.pid = record
            .facts
            .get("pgid")
            .and_then(Value::as_u64)
            .and_then(|p| u32::try_from(p).ok());
    }
    if record.container_id.is_none() {
        record.container_id = record
            .facts
            .get("container")
            .and_then(|c| c["id"].as_str())
            .map(str::to_string);
    }
    record.image_digest = record.image.as_ref().and_then(|i| i.digest());
    record
}

/// The version each HTTP server of the deployment reports, asked once all are ready; roles
/// probed over TCP only (not HTTP servers, perhaps) are not asked.
pub(super) async fn versions(
    deployment: &DeploymentPlan,
    instances: &[(String, Box<dyn Instance>)],
) -> BTreeMap<String, ServerVersion> {
    let asked = instances.iter().filter(|(key, _)| {
        deployment
            .roles
            .iter()
            .any(|r| r.readiness.http.is_some() && key.starts_with(&format!("{}-", r.name)))
    });
    let answers = join_all(asked.map(|(key, instance)| async move {
        (key.clone(), server_version(&instance.base_url()).await)
    }))
    .await;
    answers
        .into_iter()
        .filter_map(|(key, v)| Some((key, v?)))
        .collect()
}

/// What the server at `base_url` says its version is: vLLM's `GET /version`, SGLang's
/// `GET /get_server_info` (or `/server_info`) `version`, else the first model's `owned_by`
/// in `GET /v1/models`; `None` when none answers.
pub(super) async fn server_version(base_url: &str) -> Option<ServerVersion> {
    let origin = Origin::parse(base_url).ok()?.root();
    for path in ["/version", "/get_server_info", "/server_info"] {
        if let Some(body) = json_at(&origin, path).await
            && let Some(version) = body["version"].as_str().filter(|v| !v.is_empty())
        {
            return Some(ServerVersion {
                version: version.to_string(),
                source: format!("GET {path}"),
            });
        }
    }
    let models = json_at(&origin, "/v1/models").await?;
    let owner = models["data"][0]["owned_by"].as_str()?;
    Some(ServerVersion {
        version: owner.to_string(),
        source: "GET /v1/models (owned_by)".to_string(),
    })
}

async fn json_at(origin: &Origin, path: &str) -> Option<Value> {
    let reply = fetch::get(origin, path, VERSION_TIMEOUT).await.ok()?;
    if reply.status != 200 {
        return None;
    }
    serde_json::from_slice(&reply.body).ok()
}

/// Each instance's exit watch, taken before `stop` consumes it.
pub(super) fn exit_watches(
    instances: &[(String, Box<dyn Instance>)],
) -> Vec<(String, Option<ExitWatch>)> {
    instances
        .iter()
        .map(|(key, i)| (key.clone(), i.exit_watch()))
        .collect()
}

/// How each instance ended, as far as known now.
pub(super) fn exits(watches: &[(String, Option<ExitWatch>)]) -> BTreeMap<String, ExitRecord> {
    watches
        .iter()
        .filter_map(|(key, watch)| {
            let exit = watch.as_ref()?.borrow().clone()?;
            Some((
                key.clone(),
                ExitRecord {
                    code: exit.code,
                    signal: exit.signal,
                },
            ))
        })
        .collect()
}

/// Put each exit into its instance's record.
pub(super) fn record_exits(
    instances: &mut BTreeMap<String, Value>,
    exits: &BTreeMap<String, ExitRecord>,
) {
    for (key, exit) in exits {
        if let Some(Value::Object(map)) = instances.get_mut(key) {
            map.insert(
                "exit".into(),
                serde_json::to_value(exit).expect("an exit serializes"),
            );
        }
    }
}

/// This invocation of orchestrate: its command line (secrets redacted), working directory
/// and hosts file with its digest.
pub(super) fn invocation(hosts_file: Option<&Path>) -> Invocation {
    use sha2::{Digest, Sha256};
    let argv = std::env::args_os()
        .map(|a| redact(&a.to_string_lossy()).into_owned())
        .collect();
    let hosts_sha256 = hosts_file.and_then(|p| std::fs::read(p).ok()).map(|bytes| {
        Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    });
    Invocation {
        argv,
        cwd: std::env::current_dir().ok(),
        hosts_file: hosts_file.map(Path::to_path_buf),
        hosts_sha256,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_invocation_records_the_hosts_file_digest_and_redacts_the_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts.yaml");
        std::fs::write(&hosts, "abc").unwrap();
        let inv = invocation(Some(&hosts));
        assert_eq!(
            inv.hosts_sha256.as_deref(),
            Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        assert_eq!(inv.hosts_file.as_deref(), Some(hosts.as_path()));
        assert!(!inv.argv.is_empty() && inv.cwd.is_some());
        let none = invocation(None);
        assert!(none.hosts_file.is_none() && none.hosts_sha256.is_none());
    }

    /// A server answering `GET /get_server_info` only (SGLang's shape), one request per
    /// connection; ends with the test.
    async fn sglang_like() -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for _ in 0..8 {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let (status, body) = if head.starts_with("GET /get_server_info ") {
                    ("200 OK", r#"{"version":"0.4.6.post1","tp_size":1}"#)
                } else {
                    ("404 Not Found", "{}")
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn the_server_version_comes_from_sglangs_server_info_when_there_is_no_version_route() {
        let url = sglang_like().await;
        let v = server_version(&url).await.unwrap();
        assert_eq!(v.version, "0.4.6.post1");
        assert_eq!(v.source, "GET /get_server_info");
        // Nothing listening: no version, no error.
        let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = gone.local_addr().unwrap().port();
        drop(gone);
        assert!(
            server_version(&format!("http://127.0.0.1:{port}"))
                .await
                .is_none()
        );
    }
}
