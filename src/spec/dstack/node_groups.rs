//! A dstack task's node groups (`groups:`), as dstack runs them: one multi-node run whose
//! nodes are numbered across the groups in order (group 0's nodes first), each node running
//! its group's commands. Here that is one gang of `nodes` = the groups' total: node *k*
//! runs the commands of the group *k* falls in (a `{% if node_rank ... %}` around each),
//! and so gets dstack's own variables (`DSTACK_NODE_RANK` = *k*, `DSTACK_NODES_NUM` = the
//! total, `DSTACK_MASTER_NODE_IP` = group 0's first node, `DSTACK_NODES_IPS` = every
//! node). Each group's `resources` are its own nodes' (`TaskSpec::node_resources`), and so
//! is `DSTACK_GPUS_PER_NODE`. `${{ groups[i].nodes[j].IP_ADDRESS }}` becomes that node's address. The first
//! port of the groups is the server port (the leader, node 0, is probed; the others are
//! ready when alive). A group that starts a Ray head (`ray start --head`) makes the gang a
//! Ray gang: `readiness.ray` counts every node and the head starts first.

use serde_saphyr::{Location, Spanned};

use super::container::spanned;
use super::keys::Note;
use super::launch::flag_value;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::dstack::StartupOrder;
use crate::spec::types::dstack_groups::GroupSpec;
use crate::spec::{RaySpec, ReadinessSpec, ResourcesSpec, TaskSpec};

/// A node group checked, with its ports and resources.
type Checked = (
    Group,
    Vec<Spanned<crate::spec::values::PortValue>>,
    Option<ResourcesSpec>,
);

/// One node group, checked.
struct Group {
    name: String,
    nodes: u32,
    commands: Vec<Spanned<String>>,
}

/// Turn a task's `groups:` into one gang. Runs before the container keys (which lead the
/// commands) and `ports`.
pub(super) fn node_groups(
    spec: &mut TaskSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
) -> Result<(), Diagnostic> {
    let Some(written) = spec.groups.take() else {
        return Ok(());
    };
    let loc = written.referenced;
    if spec.kind.as_ref().is_none_or(|k| k.value != "task") {
        return Err(at(loc, "`groups:` is a dstack key of `type: task` or `type: service`".into())
            .with_help("write `type: task` (node groups) or `type: service` (replica groups), or orchestrate's `roles:`"));
    }
    if written.value.is_empty() {
        return Err(at(loc, "`groups` is empty".into()).with_help(
            "write one entry per node group: `- name: head\n    nodes: 1\n    commands: [...]`",
        ));
    }
    let top_level: [(&str, Option<Location>); 4] = [
        ("nodes", spec.nodes.as_ref().map(|n| n.referenced)),
        ("commands", spec.commands.first().map(|c| c.referenced)),
        ("ports", spec.ports.first().map(|p| p.referenced)),
        ("entrypoint", spec.entrypoint.as_ref().map(|e| e.referenced)),
    ];
    for (key, l) in top_level {
        if let Some(l) = l {
            let help = if key == "nodes" {
                "`nodes` and `groups` are mutually exclusive (as in dstack): give each group its `nodes`".to_string()
            } else {
                format!(
                    "top-level `{key}` is not allowed with `groups` (as in dstack): move it into each group"
                )
            };
            return Err(at(l, format!("top-level `{key}` with node groups")).with_help(help));
        }
    }
    let mut groups: Vec<Group> = Vec::new();
    let mut ports = Vec::new();
    let mut resources: Vec<Option<ResourcesSpec>> = Vec::new();
    for (i, g) in written.value.into_iter().enumerate() {
        let (group, group_ports, group_resources) = group(spec, i, g, loc, at)?;
        if groups.iter().any(|o| o.name == group.name) {
            return Err(
                at(loc, format!("two node groups are named `{}`", group.name))
                    .with_help("give each node group its own `name`"),
            );
        }
        ports.extend(group_ports);
        resources.push(group_resources);
        groups.push(group);
    }
    let total: u32 = groups.iter().map(|g| g.nodes).sum();
    let mut commands = Vec::new();
    let mut first = 0u32;
    for (i, g) in groups.iter().enumerate() {
        let last = first + g.nodes;
        for c in &g.commands {
            let text = addresses(c, &groups, at)?;
            commands.push(Spanned {
                value: format!(
                    "{{% if node_rank >= {first} and node_rank < {last} %}}{text}{{% endif %}}"
                ),
                referenced: c.referenced,
                defined: c.defined,
            });
        }
        notes.push(Note {
            key: "groups".into(),
            line: loc.line(),
            honored: true,
            text: format!(
                "group {i} `{}`: node{} {} of {total} (DSTACK_NODE_RANK), running its commands",
                g.name,
                if g.nodes == 1 { "" } else { "s" },
                if g.nodes == 1 {
                    first.to_string()
                } else {
                    format!("{first}..{}", last - 1)
                }
            ),
        });
        first = last;
    }
    group_resources(spec, &groups, resources, loc, notes);
    ray(spec, &groups, total, loc, notes);
    spec.commands = commands;
    spec.ports = ports;
    spec.nodes = Some(spanned(total, loc));
    Ok(())
}

/// Each group's `resources` for its own nodes, as in dstack (a group does not inherit the
/// top-level `resources`): the leader's group's become the task's, and where the groups
/// differ, every node's are its group's (`TaskSpec::node_resources`). With no group's
/// `resources`, the top-level ones apply to every node.
fn group_resources(
    spec: &mut TaskSpec,
    groups: &[Group],
    resources: Vec<Option<ResourcesSpec>>,
    loc: Location,
    notes: &mut Vec<Note>,
) {
    let Some(from) = resources.iter().position(Option::is_some) else {
        return;
    };
    if spec.resources.is_some() {
        notes.push(Note {
            key: "resources".into(),
            line: 0,
            honored: false,
            text: format!(
                "with `groups`, each group's resources apply to its nodes (group `{}`'s first), as in dstack",
                groups[from].name
            ),
        });
    }
    spec.resources = resources[0].clone();
    if groups.len() == 1 {
        return;
    }
    let mut first = 0u32;
    for (g, r) in groups.iter().zip(&resources) {
        let last = first + g.nodes;
        let nodes = if g.nodes == 1 {
            format!("node {first}")
        } else {
            format!("nodes {first}..{}", last - 1)
        };
        notes.push(Note {
            key: "groups".into(),
            line: loc.line(),
            honored: true,
            text: match r {
                Some(_) => format!(
                    "group `{}`'s resources apply to its {nodes}: their hosts, containers and DSTACK_GPUS_PER_NODE",
                    g.name
                ),
                None => format!(
                    "group `{}` has no `resources`: its {nodes} ask for none (a group does not inherit the top-level `resources`, as in dstack)",
                    g.name
                ),
            },
        });
        first = last;
    }
    spec.node_resources = groups
        .iter()
        .zip(resources)
        .flat_map(|(g, r)| std::iter::repeat_n(r, g.nodes as usize))
        .collect();
}

/// One node group: checked, named, its ports and resources.
fn group(
    spec: &TaskSpec,
    index: usize,
    g: GroupSpec,
    loc: Location,
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<Checked, Diagnostic> {
    let GroupSpec {
        name,
        nodes,
        count,
        replicas,
        scaling,
        resources,
        commands,
        ports,
        image,
        python,
        nvcc,
        docker,
        privileged,
        router,
        spot_policy,
        reservation,
    } = g;
    let replica_keys: [(&str, Option<Location>); 11] = [
        ("count", count.as_ref().map(|c| c.referenced)),
        ("replicas", replicas.as_ref().map(|c| c.referenced)),
        ("scaling", scaling.as_ref().map(|c| c.referenced)),
        ("image", image.as_ref().map(|c| c.referenced)),
        ("python", python.as_ref().map(|c| c.referenced)),
        ("nvcc", nvcc.as_ref().map(|c| c.referenced)),
        ("docker", docker.as_ref().map(|c| c.referenced)),
        ("privileged", privileged.as_ref().map(|c| c.referenced)),
        ("router", router.as_ref().map(|c| c.referenced)),
        ("spot_policy", spot_policy.as_ref().map(|c| c.referenced)),
        ("reservation", reservation.as_ref().map(|c| c.referenced)),
    ];
    for (key, l) in replica_keys {
        if let Some(l) = l {
            return Err(at(l, format!("`{key}` is a service's replica group key, not a task's node group's"))
                .with_help("a node group has `name`, `nodes`, `resources`, `commands` and `ports`; set the image at the top level"));
        }
    }
    let name = match name {
        Some(n) if !super::replica_groups::valid_name(&n.value) => {
            return Err(at(n.referenced, format!("`{}` is not a node group name", n.value))
                .with_help("use lowercase letters, digits and `-`, starting with a letter or digit (at most 40)"));
        }
        Some(n) => n.value,
        None => index.to_string(),
    };
    let nodes = match nodes {
        Some(n) if n.value == 0 => {
            return Err(at(
                n.referenced,
                "`nodes: 0`: a node group has at least one node".into(),
            )
            .with_help("write `nodes: 1` or more"));
        }
        Some(n) => n.value,
        None => 1,
    };
    if commands.is_empty() && spec.image.is_none() {
        return Err(at(
            loc,
            format!("node group `{name}` has no `commands`, and the task no `image`"),
        )
        .with_help(
            "give the group its `commands` (or the task an `image` whose own command runs)",
        ));
    }
    Ok((
        Group {
            name,
            nodes,
            commands,
        },
        ports,
        resources,
    ))
}

/// `${{ groups[i].nodes[j].IP_ADDRESS }}` in `c` as the address of that node of the gang.
fn addresses(
    c: &Spanned<String>,
    groups: &[Group],
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<String, Diagnostic> {
    let mut out = String::new();
    let mut rest = c.value.as_str();
    while let Some(start) = rest.find("${{") {
        let Some(len) = rest[start..].find("}}") else {
            break;
        };
        let inner = rest[start + 3..start + len].trim();
        out.push_str(&rest[..start]);
        match node_ref(inner) {
            Some((gi, nj)) => {
                if groups.get(gi).is_none_or(|g| nj >= g.nodes as usize) {
                    return Err(at(
                        c.referenced,
                        format!(
                            "`{inner}` names no node: the task has {} group(s){}",
                            groups.len(),
                            groups.get(gi).map_or(String::new(), |g| format!(
                                ", group {gi} has {} node(s)",
                                g.nodes
                            ))
                        ),
                    )
                    .with_help("groups and nodes are numbered from 0"));
                }
                let k: usize = groups[..gi].iter().map(|g| g.nodes as usize).sum::<usize>() + nj;
                out.push_str(&format!(
                    "{{{{ roles.server.addresses[replica * nnodes + {k}] }}}}"
                ));
            }
            None => out.push_str(&rest[start..start + len + 2]),
        }
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `groups[i].nodes[j].IP_ADDRESS` -> (i, j).
fn node_ref(inner: &str) -> Option<(usize, usize)> {
    let rest = inner.strip_prefix("groups[")?;
    let (i, rest) = rest.split_once(']')?;
    let rest = rest.strip_prefix(".nodes[")?;
    let (j, rest) = rest.split_once(']')?;
    (rest == ".IP_ADDRESS").then_some(())?;
    Some((i.trim().parse().ok()?, j.trim().parse().ok()?))
}

/// A group that starts a Ray head makes the gang a Ray gang: every node counted before the
/// leader is probed, the head first (when it is node 0 and no `startup_order` is written).
fn ray(spec: &mut TaskSpec, groups: &[Group], total: u32, loc: Location, notes: &mut Vec<Note>) {
    let Some((head, port)) = groups.iter().enumerate().find_map(|(i, g)| {
        g.commands
            .iter()
            .find_map(|c| head_port(&c.value))
            .map(|p| (i, p))
    }) else {
        return;
    };
    if spec.readiness.as_ref().is_some_and(|r| r.ray.is_some()) {
        return;
    }
    let ray = RaySpec {
        port: Some(spanned(port, loc)),
        nodes: Some(spanned(total, loc)),
        command: None,
    };
    match &mut spec.readiness {
        Some(r) => r.ray = Some(ray),
        None => {
            spec.readiness = Some(ReadinessSpec {
                http: None,
                tcp: false,
                status: None,
                interval: None,
                timeout: None,
                generate: false,
                workers: None,
                ray: Some(ray),
            });
        }
    }
    let mut text = format!(
        "group {head} starts a Ray head: readiness counts {total} alive Ray nodes (`ray status` on the head, port {port}) before the leader is probed"
    );
    if head == 0 && groups[0].nodes == 1 && spec.startup_order.is_none() {
        spec.startup_order = Some(spanned(StartupOrder::MasterFirst, loc));
        text.push_str("; the head starts first (`startup_order: master-first`)");
    }
    notes.push(Note {
        key: "groups".into(),
        line: loc.line(),
        honored: true,
        text,
    });
}

/// The GCS port of a `ray start --head` in `command` (its `--port`, else Ray's 6379); `None`
/// when it starts no head.
fn head_port(command: &str) -> Option<u16> {
    let at = command.find("ray start")?;
    let rest = &command[at..];
    let end = ["&&", ";", "\n", "|", " & "]
        .iter()
        .filter_map(|s| rest.find(s))
        .min()
        .unwrap_or(rest.len());
    let words = &rest[..end];
    words.split_whitespace().any(|w| w == "--head").then(|| {
        let line = spanned(words.to_string(), Location::UNKNOWN);
        flag_value(std::slice::from_ref(&line), "--port")
            .and_then(|(p, _)| p.parse().ok())
            .unwrap_or(6379)
    })
}

#[cfg(test)]
mod tests {
    use super::{head_port, node_ref};

    #[test]
    fn the_ray_head_port_is_its_own_flag() {
        assert_eq!(
            head_port("ray start --head --port=6380 --block"),
            Some(6380)
        );
        assert_eq!(
            head_port("ray start --head && vllm serve m --port 8000"),
            Some(6379)
        );
        assert_eq!(head_port("ray start --address=h:6379 --block"), None);
        assert_eq!(head_port("vllm serve m"), None);
    }

    #[test]
    fn node_references_read_as_dstack_writes_them() {
        assert_eq!(node_ref("groups[0].nodes[1].IP_ADDRESS"), Some((0, 1)));
        assert_eq!(node_ref("groups[ 2 ].nodes[0].IP_ADDRESS"), Some((2, 0)));
        assert_eq!(node_ref("groups[0].replicas[0].IP_ADDRESS"), None);
        assert_eq!(node_ref("secrets.HF_TOKEN"), None);
    }
}
