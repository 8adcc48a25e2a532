//! Roles of a deployment: the single `server` of a plain task or the `roles:` map, put in
//! start order (dependencies first), with each instance placed on a host and given a port.
//!
//! Also resolves each role's readiness probe and the deployment's volume mounts.
//!
//! Owns: role normalization, dependency order, placement, readiness, volumes. Does not own:
//! rendering (build) or secrets (secrets).

use std::collections::BTreeMap;

use serde_saphyr::{Location, Spanned};

use super::render::Builder;
use super::secrets::EnvTemplate;
use super::types::{HostPlan, HttpProbePlan, PlanError, RayPlan, ReadinessPlan, WorkersPlan};
use crate::deploy::VolumeMount;
use crate::spec::dstack::StartupOrder;
use crate::spec::values::PortValue;
use crate::spec::{Diagnostic, ReadinessSpec, ResourcesSpec, TASK_SOURCE};

/// A role before rendering, from either form of the task file.
pub(super) struct RoleDef<'a> {
    pub name: String,
    pub loc: Location,
    pub commands: &'a [Spanned<String>],
    /// Task env then role env, secrets resolved.
    pub env: Vec<EnvTemplate>,
    pub hosts: &'a [Spanned<String>],
    /// The replica count: written, a range's lower bound, `--replicas` or the matrix axis.
    pub replicas: Option<Spanned<u32>>,
    /// `None`: the backend's default port.
    pub port: Option<&'a Spanned<PortValue>>,
    pub readiness: Option<&'a ReadinessSpec>,
    pub image: Option<&'a Spanned<String>>,
    pub depends_on: &'a [Spanned<String>],
    /// Processes per replica (`nodes`); `None` is 1.
    pub nodes: Option<&'a Spanned<u32>>,
    /// Processes per node (`procs`); `None` is 1.
    pub procs: Option<&'a Spanned<u32>>,
    /// Order of each gang's processes (`startup_order`); `None` is `any`.
    pub startup_order: Option<&'a Spanned<StartupOrder>>,
    /// The role's own `resources` (replacing the task's), when it sets them.
    pub resources: Option<&'a ResourcesSpec>,
    /// Each node rank's own `resources` where a gang's nodes differ (dstack's node groups);
    /// empty: every node has the role's.
    pub node_resources: &'a [Option<ResourcesSpec>],
    /// The role's own `volumes`, mounted after the task's.
    pub volumes: &'a [Spanned<String>],
}

/// A process's place: host and port, and its replica and rank within the replica.
#[derive(Debug, Clone)]
pub(super) struct Placement {
    pub host: HostPlan,
    pub port: u16,
    pub replica: usize,
    pub node_rank: usize,
    /// The process's index on its node when the role runs several per node (`procs`).
    pub proc_rank: Option<usize>,
}

impl Placement {
    /// Whether this process is its replica's leader: node 0, process 0.
    pub(super) fn is_leader(&self) -> bool {
        self.node_rank == 0 && self.proc_rank.unwrap_or(0) == 0
    }

    /// Whether this process serves HTTP: a replica's leader, or any process of a role with
    /// several per node (each its own server: data-parallel ranks).
    pub(super) fn serves(&self) -> bool {
        self.node_rank == 0 || self.proc_rank.is_some()
    }

    /// `http://address:port`.
    pub(super) fn url(&self) -> String {
        format!("http://{}:{}", self.host.address(), self.port)
    }
}

/// The processes of `place`'s replica among `places`, in rank order.
pub(super) fn gang<'p>(places: &'p [Placement], place: &Placement) -> Vec<&'p Placement> {
    places
        .iter()
        .filter(|p| p.replica == place.replica)
        .collect()
}

/// Order roles so every role comes after the roles it depends on (file order otherwise).
pub(super) fn start_order<'a>(
    b: &Builder<'_>,
    roles: Vec<RoleDef<'a>>,
) -> Result<Vec<RoleDef<'a>>, PlanError> {
    let names: Vec<String> = roles.iter().map(|r| r.name.clone()).collect();
    for r in &roles {
        let registered = r
            .readiness
            .and_then(|x| x.workers.as_ref())
            .map_or(&[][..], |w| &w.register[..]);
        for reg in registered {
            if !names.contains(&reg.value) || reg.value == r.name {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                return Err(b
                    .at(
                        TASK_SOURCE,
                        reg.referenced,
                        format!(
                            "role `{}` registers unknown worker role `{}`",
                            r.name, reg.value
                        ),
                    )
                    .with_help(crate::spec::diagnostic::suggest(&reg.value, &refs))
                    .into());
            }
        }
        for dep in r.depends_on {
            if !names.contains(&dep.value) {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                return Err(b
                    .at(
                        TASK_SOURCE,
                        dep.referenced,
                        format!("role `{}` depends on unknown role `{}`", r.name, dep.value),
                    )
                    .with_help(crate::spec::diagnostic::suggest(&dep.value, &refs))
                    .into());
            }
            if dep.value == r.name {
                return Err(b
                    .at(
                        TASK_SOURCE,
                        dep.referenced,
                        format!("role `{}` depends on itself", r.name),
                    )
                    .into());
            }
        }
    }
    let mut pending: Vec<Option<RoleDef<'a>>> = roles.into_iter().map(Some).collect();
    let mut out: Vec<RoleDef<'a>> = Vec::new();
    while out.len() < names.len() {
        let next = pending.iter().position(|r| {
            r.as_ref().is_some_and(|r| {
                r.depends_on
                    .iter()
                    .all(|d| out.iter().any(|o| o.name == d.value))
            })
        });
        match next {
            Some(i) => out.push(pending[i].take().expect("position found a pending role")),
            None => {
                let stuck: Vec<&RoleDef<'a>> = pending.iter().flatten().collect();
                let cycle: Vec<&str> = stuck.iter().map(|r| r.name.as_str()).collect();
                return Err(b
                    .at(
                        TASK_SOURCE,
                        stuck[0].loc,
                        format!(
                            "roles depend on each other in a cycle: {}",
                            cycle.join(", ")
                        ),
                    )
                    .with_help("remove one `depends_on` so the roles can start in some order")
                    .into());
            }
        }
    }
    Ok(out)
}

/// Place each process of `role`: `replicas` gangs of `nodes` nodes of `procs` processes,
/// each with a host and a port. With `nodes: 1`, replica *i* runs on host *i* modulo the host
/// count; with more, the hosts are taken in order, one per node, and too few hosts is an
/// error. The processes of one node share its host; process *p* listens on the role's port
/// plus *p* (or a port of its own with `port: auto`).
pub(super) fn place(
    b: &Builder<'_>,
    role: &RoleDef<'_>,
    default_port: u16,
) -> Result<Vec<Placement>, PlanError> {
    let mut hosts = resolve_hosts(b, role.hosts)?;
    let nodes = positive(b, role, role.nodes, "node")?.unwrap_or(1);
    let procs = positive(b, role, role.procs, "process")?;
    let per_node = procs.unwrap_or(1);
    let replicas = positive(b, role, role.replicas.as_ref(), "replica")?
        .unwrap_or_else(|| (hosts.len() / nodes).max(1));
    slurm_slots(b, role, &mut hosts, replicas * nodes)?;
    let shape = super::kubernetes::RoleShape {
        name: &role.name,
        loc: role.loc,
        written: role.hosts,
        has_image: role.image.is_some() || b.task.spec.image.is_some(),
        startup_order: role.startup_order,
    };
    super::kubernetes::check_role(b, &shape, &hosts, nodes)?;
    // A Kubernetes cluster has a pod for every node: one place per node (its processes
    // are pods of their own on the same node).
    if let [HostPlan::Kubernetes(_)] = hosts.as_slice() {
        hosts = vec![hosts[0].clone(); replicas * nodes];
    }
    if nodes > 1 && !role.hosts.is_empty() && hosts.len() < replicas * nodes {
        let loc = role.nodes.map_or(role.loc, |n| n.referenced);
        return Err(b
            .at(
                TASK_SOURCE,
                loc,
                format!(
                    "role `{}` needs {} hosts ({replicas} replica{} x {nodes} nodes, one node per host), but its `hosts` give {}",
                    role.name,
                    replicas * nodes,
                    if replicas == 1 { "" } else { "s" },
                    hosts.len()
                ),
            )
            .with_help("add hosts to `hosts`, or lower `replicas` or `nodes`")
            .into());
    }
    if replicas.saturating_mul(nodes).saturating_mul(per_node) > MAX_PROCESSES {
        let loc = role
            .procs
            .or(role.nodes)
            .map(|n| n.referenced)
            .or(role.replicas.as_ref().map(|r| r.referenced))
            .unwrap_or(role.loc);
        return Err(b
            .at(
                TASK_SOURCE,
                loc,
                format!(
                    "role `{}` would have {} processes ({replicas} replicas x {nodes} nodes{}), more than {MAX_PROCESSES}",
                    role.name,
                    replicas.saturating_mul(nodes).saturating_mul(per_node),
                    if per_node > 1 { format!(" x {per_node} per node") } else { String::new() }
                ),
            )
            .with_help("lower `replicas`, `nodes` or `procs`")
            .into());
    }
    let mut out = Vec::new();
    for replica in 0..replicas {
        for node_rank in 0..nodes {
            let node = replica * nodes + node_rank;
            for proc in 0..per_node {
                let i = node * per_node + proc;
                let mut host = hosts[node % hosts.len()].clone();
                if let HostPlan::Kubernetes(place) = &mut host {
                    place.address = super::types::KubePlace::address_token(&role.name, i);
                }
                let port = process_port(b, role, default_port, proc)?;
                if out
                    .iter()
                    .any(|p: &Placement| p.port == port && p.host.address() == host.address())
                    && !super::kubernetes::own_address(&host)
                {
                    let loc = role.port.map_or(role.loc, |p| p.referenced);
                    return Err(b
                        .at(
                            TASK_SOURCE,
                            loc,
                            format!(
                                "two instances of role `{}` would listen on port {port} of the same host",
                                role.name
                            ),
                        )
                        .with_help("use `port: auto`, or give the role as many hosts as nodes")
                        .into());
                }
                out.push(Placement {
                    host,
                    port,
                    replica,
                    node_rank,
                    // `procs: 1` is one process per node, as without it.
                    proc_rank: procs.filter(|&p| p > 1).map(|_| proc),
                });
            }
        }
    }
    Ok(out)
}

/// The port of process `proc` of a node: `auto` allocates one, a fixed port (or the
/// backend's default) is offset by `proc`.
fn process_port(
    b: &Builder<'_>,
    role: &RoleDef<'_>,
    default_port: u16,
    proc: usize,
) -> Result<u16, PlanError> {
    let base = match role.port.map(|p| p.value) {
        Some(PortValue::Auto) => return b.free_port(),
        Some(PortValue::Fixed(p)) => p,
        None => default_port,
    };
    u16::try_from(usize::from(base) + proc).map_err(|_| {
        let loc = role.port.map_or(role.loc, |p| p.referenced);
        b.at(
            TASK_SOURCE,
            loc,
            format!(
                "role `{}`'s process {proc} on a node would listen on port {base} + {proc}, past 65535",
                role.name
            ),
        )
        .with_help("use a lower `port`, or `port: auto`")
        .into()
    })
}

/// Ray's default GCS port (`ray start --head` without `--port`).
const RAY_DEFAULT_PORT: u16 = 6379;

/// The most processes one role may have: more is a mistake that would take the machine's
/// memory while planning.
const MAX_PROCESSES: usize = 10_000;

/// A count field of a role (`replicas`, `nodes`): at least 1 when set.
fn positive(
    b: &Builder<'_>,
    role: &RoleDef<'_>,
    value: Option<&Spanned<u32>>,
    what: &str,
) -> Result<Option<usize>, PlanError> {
    match value {
        Some(v) if v.value == 0 => Err(b
            .at(
                TASK_SOURCE,
                v.referenced,
                format!("role `{}` needs at least one {what}", role.name),
            )
            .into()),
        Some(v) => Ok(Some(v.value as usize)),
        None => Ok(None),
    }
}

/// A role on a Slurm cluster gets one node per process: `hosts` becomes slots 0..`count` of
/// the cluster (renumbered across the deployment by the builder). A Slurm cluster must be the
/// role's only `hosts` entry, and is run from this machine.
fn slurm_slots(
    b: &Builder<'_>,
    role: &RoleDef<'_>,
    hosts: &mut Vec<HostPlan>,
    count: usize,
) -> Result<(), PlanError> {
    let Some(at) = hosts.iter().position(|h| matches!(h, HostPlan::Slurm(_))) else {
        return Ok(());
    };
    let HostPlan::Slurm(place) = hosts[at].clone() else {
        return Ok(());
    };
    let loc = role.hosts.get(at).map_or(role.loc, |h| h.referenced);
    if hosts.len() > 1 {
        return Err(b
            .at(
                TASK_SOURCE,
                loc,
                format!(
                    "role `{}` names the Slurm cluster `{}` among other hosts",
                    role.name, place.cluster.name
                ),
            )
            .with_help("a Slurm cluster must be the role's only `hosts` entry")
            .into());
    }
    *hosts = (0..count)
        .map(|slot| {
            HostPlan::Slurm(Box::new(super::types::SlurmPlace::planned(
                place.cluster.clone(),
                slot,
            )))
        })
        .collect();
    Ok(())
}

fn resolve_hosts(b: &Builder<'_>, hosts: &[Spanned<String>]) -> Result<Vec<HostPlan>, PlanError> {
    if hosts.is_empty() {
        return Ok(vec![HostPlan::Local]);
    }
    let known: &BTreeMap<String, super::context::HostFacts> = b.hosts();
    let mut out = Vec::new();
    for h in hosts {
        if let Some(cluster) = b.kubernetes().get(&h.value) {
            out.push(HostPlan::Kubernetes(Box::new(super::types::KubePlace {
                cluster: cluster.clone(),
                address: String::new(),
            })));
            continue;
        }
        if let Some(cluster) = b.slurm().get(&h.value) {
            out.push(HostPlan::Slurm(Box::new(
                super::types::SlurmPlace::planned(cluster.clone(), 0),
            )));
            continue;
        }
        if let Some(members) = b.clusters().get(&h.value) {
            for member in members {
                if let Some(facts) = known.get(member) {
                    out.push(HostPlan::Remote {
                        name: member.clone(),
                        address: facts.address.clone(),
                    });
                }
            }
            continue;
        }
        let Some(facts) = known.get(&h.value) else {
            let names: Vec<&str> = known
                .keys()
                .chain(b.clusters().keys())
                .chain(b.slurm().keys())
                .chain(b.kubernetes().keys())
                .map(String::as_str)
                .collect();
            let help = match crate::spec::diagnostic::did_you_mean(&h.value, names.iter().copied())
            {
                Some(near) => format!("did you mean `{near}`?"),
                None if names.is_empty() => {
                    "define it in the hosts file (hosts.yaml or --hosts)".to_string()
                }
                None => format!("hosts defined: {}", names.join(", ")),
            };
            return Err(b
                .at(
                    TASK_SOURCE,
                    h.referenced,
                    format!("unknown host `{}`", h.value),
                )
                .with_help(help)
                .into());
        };
        out.push(HostPlan::Remote {
            name: h.value.clone(),
            address: facts.address.clone(),
        });
    }
    Ok(out)
}

/// With `roles`, the single-server keys must not be set at the top level.
pub(super) fn reject_top_level(
    b: &Builder<'_>,
    key: &str,
    loc: Option<Location>,
) -> Result<(), PlanError> {
    match loc {
        None => Ok(()),
        Some(loc) => Err(if loc.line() > 0 {
            b.at(
                TASK_SOURCE,
                loc,
                format!("`{key}` is set both at the top level and by `roles`"),
            )
        } else {
            Diagnostic::file(
                b.task.path(),
                format!("`{key}` is set both at the top level and by `roles`"),
            )
        }
        .with_help(format!("move `{key}` into each role"))
        .into()),
    }
}

impl Builder<'_> {
    pub(super) fn readiness(&self, r: Option<&ReadinessSpec>) -> Result<ReadinessPlan, PlanError> {
        let default_timeout = std::time::Duration::from_secs(30 * 60);
        let default_interval = std::time::Duration::from_secs(1);
        let Some(ReadinessSpec {
            http,
            tcp,
            status,
            interval,
            timeout,
            generate,
            workers,
            ray,
        }) = r
        else {
            return Ok(ReadinessPlan {
                http: Some(HttpProbePlan {
                    path: "/health".into(),
                    status: 200,
                }),
                generate: false,
                interval: default_interval,
                timeout: default_timeout,
                alive_only: false,
                workers: None,
                ray: None,
            });
        };
        let http_field = http
            .as_ref()
            .map(|h| ("http", h.referenced))
            .or(status.as_ref().map(|s| ("status", s.referenced)));
        if let (true, Some((field, at))) = (*tcp, http_field) {
            return Err(self
                .at(
                    TASK_SOURCE,
                    at,
                    format!("`readiness.{field}` is set, but `tcp: true` probes TCP only"),
                )
                .with_help(
                    "remove `tcp: true` to probe HTTP, or remove `http` and `status` to wait for the port only",
                )
                .into());
        }
        let path = http
            .as_ref()
            .map_or_else(|| "/health".to_string(), |h| h.value.clone());
        if !path.starts_with('/') {
            return Err(Diagnostic::file(
                self.task.path(),
                format!("readiness.http `{path}` must start with /"),
            )
            .into());
        }
        Ok(ReadinessPlan {
            http: (!tcp).then(|| HttpProbePlan {
                path,
                status: status.as_ref().map_or(200, |s| s.value),
            }),
            generate: *generate,
            interval: interval.as_ref().map_or(default_interval, |i| i.value.0),
            timeout: timeout.as_ref().map_or(default_timeout, |t| t.value.0),
            alive_only: false,
            workers: workers.as_ref().map(|w| WorkersPlan {
                enabled: w.enabled.unwrap_or(true),
                prefill: w.prefill.as_ref().map(|n| n.value),
                decode: w.decode.as_ref().map(|n| n.value),
                via: w.via,
                generate: w.generate.unwrap_or(true),
                register: w.register.iter().map(|r| r.value.clone()).collect(),
            }),
            ray: ray.as_ref().map(|r| self.ray(r)).transpose()?,
        })
    }

    /// `readiness.ray` with its defaults (`nodes`: the role's, filled by the caller).
    fn ray(&self, r: &crate::spec::RaySpec) -> Result<RayPlan, PlanError> {
        if let Some(n) = r.nodes.as_ref().filter(|n| n.value == 0) {
            return Err(self
                .at(
                    TASK_SOURCE,
                    n.referenced,
                    "`readiness.ray.nodes` must be at least 1",
                )
                .with_help("leave it out to expect the role's `nodes`")
                .into());
        }
        if let Some(p) = r.port.as_ref().filter(|p| p.value == 0) {
            return Err(self
                .at(
                    TASK_SOURCE,
                    p.referenced,
                    "`readiness.ray.port` cannot be 0",
                )
                .with_help("give the head's `ray start --head --port` (Ray's default is 6379)")
                .into());
        }
        let command = r.command.as_ref().map_or("ray", |c| c.value.as_str());
        if command.trim().is_empty() {
            let at = r.command.as_ref().map(|c| c.referenced);
            return Err(self
                .at(
                    TASK_SOURCE,
                    at.unwrap_or(Location::UNKNOWN),
                    "`readiness.ray.command` is empty",
                )
                .with_help("leave it out to run `ray` from the head's PATH")
                .into());
        }
        Ok(RayPlan {
            port: r.port.as_ref().map_or(RAY_DEFAULT_PORT, |p| p.value),
            nodes: r.nodes.as_ref().map(|n| n.value),
            command: command.to_string(),
        })
    }

    pub(super) fn volume(
        &self,
        raw: &Spanned<String>,
        text: &str,
    ) -> Result<VolumeMount, PlanError> {
        let parts: Vec<&str> = text.split(':').collect();
        let (host, container, read_only) = match parts.as_slice() {
            [h, c] => (h, c, false),
            [h, c, "ro"] => (h, c, true),
            [h, c, "rw"] => (h, c, false),
            _ => {
                return Err(self
                    .at(
                        TASK_SOURCE,
                        raw.referenced,
                        format!("`{text}` is not a volume mount"),
                    )
                    .with_help("write host_path:container_path or host_path:container_path:ro")
                    .into());
            }
        };
        if host.is_empty() || !container.starts_with('/') {
            return Err(self
                .at(
                    TASK_SOURCE,
                    raw.referenced,
                    format!("`{text}` is not a volume mount"),
                )
                .with_help("the container path must be absolute")
                .into());
        }
        Ok(VolumeMount {
            host: host.to_string(),
            container: container.to_string(),
            read_only,
        })
    }
}
