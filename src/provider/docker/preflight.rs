//! Pre-flight: before anything starts, check that the engine answers, that each image is
//! present or pullable, that the requested GPUs exist, and that the ports are free. Every
//! problem is collected and reported together; nothing is created or pulled.

use std::net::TcpListener;
use std::time::Duration;

use super::connection::Connection;
use super::error::chain;
use super::host::{self, ToolOutput};
use super::image;
use super::options::DockerOptions;
use crate::deploy::Network;
use crate::deploy::{GpuRequest, GpuVendor};

/// How long the registry may take to say whether an image exists.
const REGISTRY_TIMEOUT: Duration = Duration::from_secs(10);

/// One thing a run needs from the engine and its host.
#[derive(Debug, Clone)]
pub enum PreflightCheck {
    /// The image is on the engine, or a registry has it.
    Image(String),
    /// The host has these GPUs (checked on the local host only; see docs/docker.md).
    Gpus(GpuRequest),
    /// Nothing listens on this port yet (checked for the local engine only).
    Port { port: u16, network: Network },
}

impl PreflightCheck {
    /// The checks for what a role needs from this engine: its image, its GPUs (all local
    /// instances together) and each local instance's port, in that order.
    pub fn list(
        image: Option<&str>,
        gpus: Option<&GpuRequest>,
        ports: &[u16],
        network: Network,
    ) -> Vec<PreflightCheck> {
        let image = image.map(|i| PreflightCheck::Image(i.to_string()));
        let gpus = gpus.map(|g| PreflightCheck::Gpus(g.clone()));
        let ports = ports
            .iter()
            .map(|&port| PreflightCheck::Port { port, network });
        image.into_iter().chain(gpus).chain(ports).collect()
    }
}

/// A reason the run cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreflightProblem {
    #[error("the docker engine at {endpoint} is not reachable: {reason}")]
    EngineUnreachable { endpoint: String, reason: String },
    #[error("image `{image}` is not on {host} and no registry offers it: {reason}")]
    ImageUnavailable {
        image: String,
        host: String,
        reason: String,
    },
    #[error("{requested} {vendor} GPU(s) requested but {found}")]
    GpusUnavailable {
        requested: u32,
        vendor: String,
        found: String,
    },
    #[error("port {port} on {address} is already in use ({reason})")]
    PortInUse {
        port: u16,
        address: String,
        reason: String,
    },
}

/// Run every check against `connection` (or record that the engine is unreachable).
pub(crate) async fn run(
    connection: Result<&Connection, PreflightProblem>,
    options: &DockerOptions,
    checks: &[PreflightCheck],
) -> Result<(), Vec<PreflightProblem>> {
    let mut problems = Vec::new();
    let connection = match connection {
        Ok(c) => match c.docker.ping().await {
            Ok(_) => Some(c),
            Err(e) => {
                problems.push(PreflightProblem::EngineUnreachable {
                    endpoint: c.endpoint.clone(),
                    reason: chain(&e),
                });
                None
            }
        },
        Err(problem) => {
            problems.push(problem);
            None
        }
    };
    for check in checks {
        match check {
            PreflightCheck::Image(reference) => {
                if let Some(connection) = connection
                    && let Some(problem) = check_image(connection, reference, options).await
                {
                    problems.push(problem);
                }
            }
            PreflightCheck::Gpus(request) => {
                if options.engine_is_local
                    && let Some(problem) = check_gpus(request).await
                {
                    problems.push(problem);
                }
            }
            PreflightCheck::Port { port, network } => {
                if options.engine_is_local
                    && let Some(problem) = check_port(*port, *network, &options.publish_ip)
                {
                    problems.push(problem);
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

async fn check_image(
    connection: &Connection,
    reference: &str,
    options: &DockerOptions,
) -> Option<PreflightProblem> {
    let unavailable = |reason: String| PreflightProblem::ImageUnavailable {
        image: reference.to_string(),
        host: options.host_label.clone(),
        reason,
    };
    match image::inspect(connection, reference).await {
        Ok(Some(_)) => return None,
        Ok(None) => {}
        Err(e) => return Some(unavailable(chain(&e))),
    }
    let lookup = connection.docker.inspect_registry_image(reference, None);
    match tokio::time::timeout(REGISTRY_TIMEOUT, lookup).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(unavailable(chain(&e))),
        Err(_) => Some(unavailable(format!(
            "no registry answered within {REGISTRY_TIMEOUT:?}"
        ))),
    }
}

async fn check_gpus(request: &GpuRequest) -> Option<PreflightProblem> {
    let problem = |vendor: &str, found: String| PreflightProblem::GpusUnavailable {
        requested: request.count,
        vendor: vendor.to_string(),
        found,
    };
    match request.vendor {
        GpuVendor::Nvidia => {
            let (out, gpus) = host::nvidia().await;
            let matching = gpus
                .iter()
                .filter(|g| name_matches(&g.name, &request.names))
                .count();
            match out {
                ToolOutput::Absent => Some(problem(
                    "NVIDIA",
                    "nvidia-smi is not installed on this host (install the NVIDIA driver and the NVIDIA Container Toolkit)".into(),
                )),
                ToolOutput::Failed(e) => Some(problem("NVIDIA", format!("nvidia-smi failed: {e}"))),
                ToolOutput::Ran(_) if matching < request.count as usize => Some(problem(
                    "NVIDIA",
                    format!(
                        "this host has {matching} matching ({}) of {}",
                        describe_names(&request.names),
                        gpus.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                )),
                ToolOutput::Ran(_) => None,
            }
        }
        GpuVendor::Amd => {
            let missing: Vec<&str> = super::gpu::AMD_DEVICES
                .iter()
                .copied()
                .filter(|d| !std::path::Path::new(d).exists())
                .collect();
            if !missing.is_empty() {
                return Some(problem(
                    "AMD",
                    format!(
                        "{} missing on this host (is the amdgpu driver loaded?)",
                        missing.join(" and ")
                    ),
                ));
            }
            let out = host::run_tool("rocm-smi", &["--showproductname", "--json"]).await;
            let models = match &out {
                ToolOutput::Ran(text) => host::parse_rocm_cards(text),
                _ => None,
            };
            let Some(models) = models else {
                // No rocm-smi: count render nodes, each GPU has one.
                let nodes = std::fs::read_dir("/dev/dri")
                    .map(|d| {
                        d.filter_map(Result::ok)
                            .filter(|e| e.file_name().to_string_lossy().starts_with("renderD"))
                            .count()
                    })
                    .unwrap_or(0);
                return (nodes < request.count as usize).then(|| {
                    problem(
                        "AMD",
                        format!("this host has {nodes} render node(s) in /dev/dri"),
                    )
                });
            };
            let matching = models
                .iter()
                .filter(|m| name_matches(m, &request.names))
                .count();
            (matching < request.count as usize).then(|| {
                problem(
                    "AMD",
                    format!(
                        "this host has {matching} matching ({}) of {}",
                        describe_names(&request.names),
                        models.join(", ")
                    ),
                )
            })
        }
    }
}

fn name_matches(model: &str, names: &[String]) -> bool {
    names.is_empty()
        || names
            .iter()
            .any(|n| model.to_lowercase().contains(&n.to_lowercase()))
}

fn describe_names(names: &[String]) -> String {
    if names.is_empty() {
        "any model".into()
    } else {
        names.join(" or ")
    }
}

fn check_port(port: u16, network: Network, publish_ip: &str) -> Option<PreflightProblem> {
    let address = match network {
        Network::Bridge => publish_ip,
        Network::Host => "0.0.0.0",
    };
    match TcpListener::bind((address, port)) {
        Ok(_) => None,
        Err(e) => Some(PreflightProblem::PortInUse {
            port,
            address: address.to_string(),
            reason: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_port_is_reported_and_a_free_one_is_not() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let problem = check_port(port, Network::Bridge, "127.0.0.1").unwrap();
        assert!(
            matches!(problem, PreflightProblem::PortInUse { port: p, .. } if p == port),
            "{problem}"
        );
        drop(listener);
        assert_eq!(check_port(port, Network::Bridge, "127.0.0.1"), None);
    }

    #[test]
    fn checks_list_the_image_then_the_gpus_then_each_port() {
        let gpus = GpuRequest {
            count: 8,
            names: vec!["MI300X".into()],
            vendor: GpuVendor::Amd,
        };
        let checks =
            PreflightCheck::list(Some("img"), Some(&gpus), &[30000, 30001], Network::Bridge);
        assert_eq!(checks.len(), 4, "{checks:?}");
        assert!(matches!(&checks[0], PreflightCheck::Image(i) if i == "img"));
        assert!(matches!(&checks[1], PreflightCheck::Gpus(g) if g.count == 8));
        assert!(matches!(
            checks[2],
            PreflightCheck::Port { port: 30000, .. }
        ));
        assert!(matches!(
            checks[3],
            PreflightCheck::Port { port: 30001, .. }
        ));
        assert!(PreflightCheck::list(None, None, &[], Network::Host).is_empty());
    }

    #[tokio::test]
    async fn an_unreachable_engine_is_reported_with_the_host_problems() {
        let busy = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = busy.local_addr().unwrap().port();
        let unreachable = PreflightProblem::EngineUnreachable {
            endpoint: "unix:///nowhere.sock".into(),
            reason: "socket not found".into(),
        };
        let checks = [
            PreflightCheck::Image("img".into()),
            PreflightCheck::Port {
                port,
                network: Network::Bridge,
            },
        ];
        let problems = run(Err(unreachable.clone()), &DockerOptions::default(), &checks)
            .await
            .unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[0], unreachable);
        assert!(matches!(problems[1], PreflightProblem::PortInUse { port: p, .. } if p == port));
    }

    #[test]
    fn gpu_names_match_case_insensitively_within_the_model() {
        assert!(name_matches("NVIDIA H200", &["h200".into()]));
        assert!(!name_matches("NVIDIA H100 80GB HBM3", &["H200".into()]));
        assert!(name_matches("anything", &[]));
    }
}
