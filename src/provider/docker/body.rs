//! A launch request -> the engine's container-create body: image, the task's commands as
//! `/bin/sh -c` or the task's shell (the image's ENTRYPOINT replaced, as dstack does for
//! `commands`) or as the arguments of the task's own entrypoint, user, privileged mode, env,
//! volumes, shared memory, IPC, network and published port, GPUs and our labels. Pure.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};

use super::{gpu, labels};
use crate::deploy::{Ipc, Network};
use crate::provider::LaunchRequest;

/// What the engine's host adds to a request.
#[derive(Debug, Clone)]
pub(crate) struct EngineSide {
    /// Address published ports bind to on the engine's host (`127.0.0.1` locally).
    pub publish_ip: String,
    /// Home directory on the engine's host, for volumes written `~/...`.
    pub home: Option<String>,
    /// SIGTERM -> SIGKILL grace the engine applies on stop.
    pub stop_grace: Duration,
    /// This process, recorded in a label for `orchestrate ps`.
    pub owner_pid: u32,
}

/// `orchestrate-<run>-<task>-<deployment>-<role>-<index>`, cut to the characters the engine
/// accepts in names.
pub(crate) fn container_name(request: &LaunchRequest) -> String {
    let raw = format!(
        "orchestrate-{}-{}-{}-{}-{}",
        request.run_id, request.task, request.deployment, request.role, request.index
    );
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The shell script the container runs: the task's commands, one per line.
pub(crate) fn script(commands: &[String]) -> String {
    commands.join("\n")
}

/// The container-create body for `request` running `image`.
pub(crate) fn create_body(
    request: &LaunchRequest,
    image: &str,
    engine: &EngineSide,
) -> ContainerCreateBody {
    let mut env: Vec<String> = request
        .env
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    let mut host = HostConfig {
        binds: Some(
            request
                .volumes
                .iter()
                .map(|v| {
                    let mut bind = format!(
                        "{}:{}",
                        expand_home(&v.host, engine.home.as_deref()),
                        v.container
                    );
                    if v.read_only {
                        bind.push_str(":ro");
                    }
                    bind
                })
                .collect(),
        ),
        shm_size: request
            .resources
            .shm_size
            .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
        ipc_mode: match request.container.ipc {
            Ipc::EngineDefault => None,
            Ipc::Host => Some("host".into()),
            Ipc::Private => Some("private".into()),
            Ipc::Shareable => Some("shareable".into()),
        },
        ..HostConfig::default()
    };
    let exposed_ports = match request.container.network {
        Network::Bridge => {
            host.network_mode = Some("bridge".into());
            // The server port, then dstack's other `ports`, each under its own number.
            let ports =
                std::iter::once(request.port).chain(request.container.ports.iter().copied());
            let keys: Vec<(String, u16)> = ports.map(|p| (format!("{p}/tcp"), p)).collect();
            host.port_bindings = Some(
                keys.iter()
                    .map(|(key, p)| {
                        (
                            key.clone(),
                            Some(vec![PortBinding {
                                host_ip: Some(engine.publish_ip.clone()),
                                host_port: Some(p.to_string()),
                            }]),
                        )
                    })
                    .collect(),
            );
            Some(
                keys.into_iter()
                    .map(|(key, _)| (key, HashMap::new()))
                    .collect(),
            )
        }
        Network::Host => {
            host.network_mode = Some("host".into());
            None
        }
    };
    gpu::apply(
        request.resources.gpu.as_ref(),
        &request.container.gpu_ids,
        &mut host,
        &mut env,
    );
    if request.container.privileged {
        host.privileged = Some(true);
    }
    // An entrypoint of the task's replaces the image's, the commands its arguments (dstack's
    // docker-like form); else no commands: the image's own ENTRYPOINT/CMD run unchanged.
    let (entrypoint, cmd) = match (&request.container.entrypoint, request.commands.is_empty()) {
        (Some(words), _) => (Some(words.clone()), Some(request.commands.clone())),
        (None, true) => (None, None),
        (None, false) => {
            let shell = request.container.shell.as_deref().unwrap_or("/bin/sh");
            (
                Some(vec![shell.to_string(), "-c".to_string()]),
                Some(vec![script(&request.commands)]),
            )
        }
    };
    let labels = HashMap::from([
        (labels::RUN.to_string(), request.run_id.clone()),
        (labels::TASK.to_string(), request.task.clone()),
        (labels::ROLE.to_string(), request.role.clone()),
        (labels::DEPLOYMENT.to_string(), request.deployment.clone()),
        (labels::INDEX.to_string(), request.index.to_string()),
        (labels::OWNER_PID.to_string(), engine.owner_pid.to_string()),
    ]);
    ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint,
        cmd,
        user: request.container.user.clone(),
        env: Some(env),
        labels: Some(labels),
        exposed_ports,
        stop_timeout: Some(i64::try_from(engine.stop_grace.as_secs()).unwrap_or(i64::MAX)),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        tty: Some(false),
        host_config: Some(host),
        ..ContainerCreateBody::default()
    }
}

fn expand_home(path: &str, home: Option<&str>) -> String {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => format!("{}/{rest}", home.trim_end_matches('/')),
        _ if path == "~" => home.unwrap_or(path).to_string(),
        _ => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::ContainerOptions;
    use crate::deploy::{GpuRequest, GpuVendor, Resources, VolumeMount};
    use crate::provider::LogSink;

    fn request() -> LaunchRequest {
        LaunchRequest {
            run_id: "20261122-1".into(),
            task: "sglang mi300".into(),
            deployment: "d1".into(),
            role: "server".into(),
            index: 0,
            place: crate::provider::ProcessPlace::default(),
            image: Some("rocm/sglang-staging:20250212".into()),
            commands: vec!["echo start".into(), "exec serve --port 30000".into()],
            env: vec![
                ("HF_TOKEN".into(), "secret".into()),
                ("A".into(), "1".into()),
            ],
            port: 30000,
            volumes: vec![VolumeMount {
                host: "~/.cache/huggingface".into(),
                container: "/root/.cache/huggingface".into(),
                read_only: true,
            }],
            resources: Resources {
                gpu: Some(GpuRequest {
                    count: 8,
                    names: vec!["MI300X".into()],
                    vendor: GpuVendor::Amd,
                }),
                shm_size: Some(32 << 30),
                disk: None,
                cpus: None,
                memory: None,
            },
            log: LogSink::memory(),
            container: ContainerOptions::default(),
        }
    }

    fn engine() -> EngineSide {
        EngineSide {
            publish_ip: "127.0.0.1".into(),
            home: Some("/home/bench".into()),
            stop_grace: Duration::from_secs(15),
            owner_pid: 4242,
        }
    }

    #[test]
    fn dstack_ports_are_published_besides_the_server_port() {
        let mut r = request();
        r.container.ports = vec![9090];
        let body = serde_json::to_value(create_body(&r, "img", &engine())).unwrap();
        assert_eq!(
            body["ExposedPorts"],
            serde_json::json!({"30000/tcp": {}, "9090/tcp": {}})
        );
        assert_eq!(
            body["HostConfig"]["PortBindings"]["9090/tcp"],
            serde_json::json!([{"HostIp": "127.0.0.1", "HostPort": "9090"}])
        );
    }

    #[test]
    fn bridge_body_publishes_the_port_and_runs_commands_in_sh() {
        let body = serde_json::to_value(create_body(
            &request(),
            "rocm/sglang-staging:20250212",
            &engine(),
        ))
        .unwrap();
        assert_eq!(body["Entrypoint"], serde_json::json!(["/bin/sh", "-c"]));
        assert_eq!(
            body["Cmd"],
            serde_json::json!(["echo start\nexec serve --port 30000"])
        );
        assert_eq!(body["Env"], serde_json::json!(["HF_TOKEN=secret", "A=1"]));
        assert_eq!(body["ExposedPorts"], serde_json::json!({"30000/tcp": {}}));
        assert_eq!(body["StopTimeout"], 15);
        let host = &body["HostConfig"];
        assert_eq!(host["NetworkMode"], "bridge");
        assert_eq!(
            host["PortBindings"],
            serde_json::json!({"30000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "30000"}]})
        );
        assert_eq!(
            host["Binds"],
            serde_json::json!(["/home/bench/.cache/huggingface:/root/.cache/huggingface:ro"])
        );
        assert_eq!(host["ShmSize"], 32_i64 << 30);
        assert!(host.get("IpcMode").is_none());
        assert_eq!(host["GroupAdd"], serde_json::json!(["video"]));
        let labels = &body["Labels"];
        assert_eq!(labels["orchestrate.run"], "20261122-1");
        assert_eq!(labels["orchestrate.task"], "sglang mi300");
        assert_eq!(labels["orchestrate.role"], "server");
        assert_eq!(labels["orchestrate.deployment"], "d1");
        assert_eq!(labels["orchestrate.index"], "0");
        assert_eq!(labels["orchestrate.pid"], "4242");
    }

    #[test]
    fn host_network_publishes_nothing_and_ipc_is_passed() {
        let mut request = request();
        request.container.network = Network::Host;
        request.container.ipc = Ipc::Host;
        let body = serde_json::to_value(create_body(&request, "img", &engine())).unwrap();
        assert_eq!(body["HostConfig"]["NetworkMode"], "host");
        assert_eq!(body["HostConfig"]["IpcMode"], "host");
        assert!(body["HostConfig"].get("PortBindings").is_none());
        assert!(body.get("ExposedPorts").is_none());
    }

    #[test]
    fn no_commands_keep_the_image_entrypoint() {
        let mut request = request();
        request.commands.clear();
        let body = serde_json::to_value(create_body(&request, "img", &engine())).unwrap();
        assert!(body.get("Entrypoint").is_none());
        assert!(body.get("Cmd").is_none());
    }

    #[test]
    fn container_keys_reach_the_body() {
        let mut request = request();
        let plain = serde_json::to_value(create_body(&request, "img", &engine())).unwrap();
        assert!(plain["HostConfig"].get("Privileged").is_none());
        assert!(plain.get("User").is_none());
        request.container.privileged = true;
        request.container.user = Some("1000:1000".into());
        request.container.shell = Some("/bin/bash".into());
        let body = serde_json::to_value(create_body(&request, "img", &engine())).unwrap();
        assert_eq!(body["HostConfig"]["Privileged"], true);
        assert_eq!(body["User"], "1000:1000");
        assert_eq!(body["Entrypoint"], serde_json::json!(["/bin/bash", "-c"]));
        request.container.entrypoint = Some(vec!["python3".into(), "-m".into(), "srv".into()]);
        let body = serde_json::to_value(create_body(&request, "img", &engine())).unwrap();
        assert_eq!(
            body["Entrypoint"],
            serde_json::json!(["python3", "-m", "srv"])
        );
        assert_eq!(
            body["Cmd"],
            serde_json::json!(["echo start", "exec serve --port 30000"]),
            "the commands are the entrypoint's arguments"
        );
    }

    #[test]
    fn names_are_engine_safe() {
        assert_eq!(
            container_name(&request()),
            "orchestrate-20261122-1-sglang_mi300-d1-server-0"
        );
    }

    #[test]
    fn home_expansion_only_touches_a_leading_tilde() {
        assert_eq!(expand_home("~/x", Some("/h/")), "/h/x");
        assert_eq!(expand_home("/data/~/x", Some("/h")), "/data/~/x");
        assert_eq!(expand_home("~/x", None), "~/x");
    }
}
