//! dstack's replica groups (a service's `replicas:` as a list, or its `groups:`) and the
//! router in front of them, as roles: each group a role of `count` replicas (the lower
//! bound of a range), the router a role that is the entry, checked for its workers.
//!
//! How dstack runs them, and so orchestrate: a replica group with `router: {type: sglang}`
//! runs its own commands (the SGLang router / Model Gateway), and the workers are registered
//! with it (`POST /workers`, the type each worker's `GET /server_info` reports); the
//! service-level `router: {type: sglang, pd_disaggregation: true}` of dstack 0.20.10 has no
//! router group, so orchestrate starts `python3 -m sglang_router.launch_router` as dstack's
//! gateway did and registers the workers the same way. A group with `router: {type: dynamo}`
//! runs the Dynamo frontend, which discovers its workers; they start after it and get
//! `DSTACK_ROUTER_INTERNAL_IP`. Prefill and decode groups are told apart by their launch
//! command's `--disaggregation-mode`, which is what the worker reports in `/server_info`.

use serde_saphyr::{Location, Spanned};

use super::container::{
    DEFAULT_PYTHON, base_image, boolean, empty_container, python_version, spanned, venv_commands,
};
use super::keys::Note;
use super::launch::{flag_value, infer_from};
use super::ranges::{check_scaling, plural};
use crate::spec::diagnostic::Diagnostic;
use crate::spec::types::dstack_groups::{GroupSpec, ReplicasSpec, RouterKind, RouterSpec};
use crate::spec::values::{EnvEntry, EnvList};
use crate::spec::{ReadinessSpec, RoleSpec, RolesSpec, TaskSpec, WorkersSpec, WorkersVia};

/// The SGLang router policies dstack accepts (`SGLangServiceRouterConfig.policy`).
const POLICIES: &[&str] = &["random", "round_robin", "cache_aware", "power_of_two"];

/// The replica groups taken out of a service, and where they are written.
pub(super) struct Taken {
    groups: Vec<GroupSpec>,
    loc: Location,
}

/// What a worker group's launch command says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Prefill,
    Decode,
    /// No `--disaggregation-mode`: a regular worker (routers count it with decode).
    Regular,
}

/// A group on its way to a role.
struct Group {
    name: String,
    loc: Location,
    mode: Mode,
    count: u32,
    router: Option<(RouterKind, Location)>,
    role: RoleSpec,
}

/// What the groups ask of the service's containers.
#[derive(Default)]
struct Needs {
    /// A group runs in dstack's base image: bash runs the commands.
    base: bool,
    /// A group asks for privileged containers.
    privileged: bool,
}

/// Take a service's replica groups out of `replicas:` or `groups:`, checking what dstack
/// checks at the top level. Runs before the container keys (which lead the commands).
pub(super) fn take(
    spec: &mut TaskSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<Option<Taken>, Diagnostic> {
    let is_service = spec.kind.as_ref().is_some_and(|k| k.value == "service");
    let listed = match spec.replicas.take() {
        Some(Spanned {
            value: ReplicasSpec::Groups(groups),
            referenced,
            ..
        }) => Some((groups, referenced)),
        other => {
            spec.replicas = other;
            None
        }
    };
    let grouped = if is_service {
        spec.groups.take().map(|g| (g.value, g.referenced))
    } else {
        None
    };
    let (groups, loc) = match (listed, grouped) {
        (Some(_), Some((_, loc))) => {
            return Err(at(
                loc,
                "`replicas` and `groups` are mutually exclusive (as in dstack)".into(),
            )
            .with_help("write the replica groups once, as a list under `replicas:`"));
        }
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => {
            if let Some(r) = &spec.router {
                return Err(at(
                    r.referenced,
                    "`router` fronts replica groups, and this service has none".into(),
                )
                .with_help("write the prefill and decode workers as a list under `replicas:` (`- count: 1` with their commands), as dstack's PD examples do"));
            }
            return Ok(None);
        }
    };
    if !is_service {
        return Err(at(
            loc,
            "a list of replica groups is a service's (`type: service`)".into(),
        )
        .with_help("write `type: service`, or a task's node groups under `groups:`"));
    }
    if groups.is_empty() {
        return Err(at(loc, "the list of replica groups is empty".into())
            .with_help("write one entry per group: `- count: 1` with its `commands`"));
    }
    let top_level: [(&str, Option<Location>); 3] = [
        ("commands", spec.commands.first().map(|c| c.referenced)),
        ("scaling", spec.scaling.as_ref().map(|s| s.referenced)),
        ("roles", spec.roles.as_ref().and(Some(loc))),
    ];
    for (key, written) in top_level {
        if let Some(l) = written {
            return Err(at(
                l,
                format!(
                    "top-level `{key}` with replica groups: each group has its own (as in dstack)"
                ),
            )
            .with_help(format!("move `{key}` into each replica group")));
        }
    }
    Ok(Some(Taken { groups, loc }))
}

/// Turn the taken groups into roles, the router into the entry role, and note each group.
/// Runs after the container keys and `probes` (their commands lead each role's, their
/// readiness is each role's).
pub(super) fn roles(
    spec: &mut TaskSpec,
    taken: Taken,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
) -> Result<(), Diagnostic> {
    let leading = std::mem::take(&mut spec.commands);
    let readiness = spec.readiness.take();
    let port = spec.port.take();
    let mut groups = Vec::new();
    let mut needs = Needs::default();
    for (i, g) in taken.groups.into_iter().enumerate() {
        let group = group(spec, i, g, &leading, at, notes, &mut needs)?;
        if groups.iter().any(|o: &Group| o.name == group.name) {
            return Err(at(
                group.loc,
                format!("two replica groups are named `{}`", group.name),
            )
            .with_help("give each replica group its own `name`"));
        }
        groups.push(group);
    }
    let Needs { base, privileged } = needs;
    if base || privileged {
        let c = spec.container.get_or_insert_with(empty_container);
        if base && c.shell.is_none() {
            c.shell = Some(spanned("/bin/bash".into(), taken.loc));
        }
        if privileged && c.privileged.is_none() {
            c.privileged = Some(spanned(true, taken.loc));
            notes.push(Note {
                key: "privileged".into(),
                line: taken.loc.line(),
                honored: true,
                text: "a replica group runs privileged (`docker: true` or `privileged: true`): orchestrate's container settings are the service's, so every group's containers run privileged (Docker only)".into(),
            });
        }
    }
    let router = router(spec, &mut groups, taken.loc, at, notes)?;
    infer(spec, &groups, notes);
    let prefill: u32 = groups
        .iter()
        .filter(|g| g.router.is_none() && g.mode == Mode::Prefill)
        .map(|g| g.count)
        .sum();
    let decode: u32 = groups
        .iter()
        .filter(|g| g.router.is_none() && g.mode != Mode::Prefill)
        .map(|g| g.count)
        .sum();
    let workers: Vec<String> = groups
        .iter()
        .filter(|g| g.router.is_none())
        .map(|g| g.name.clone())
        .collect();
    let (router_name, kind) = (router.name.clone(), router.kind);
    let mut list: Vec<(Spanned<String>, RoleSpec)> = Vec::new();
    if kind == RouterKind::Dynamo {
        // The frontend (with etcd and NATS) first: the workers find it.
        list.push(router_role(
            &router,
            &readiness,
            port.clone(),
            prefill,
            decode,
            &[],
        ));
    }
    for g in groups.into_iter().filter(|g| g.router.is_none()) {
        let mut role = g.role;
        role.port = port.clone().unwrap_or(role.port);
        role.readiness.clone_from(&readiness);
        if kind == RouterKind::Dynamo {
            role.depends_on = vec![spanned(router_name.clone(), g.loc)];
            role.env.0.push(EnvEntry {
                name: "DSTACK_ROUTER_INTERNAL_IP".into(),
                value: spanned(format!("{{{{ roles.{router_name}.addresses[0] }}}}"), g.loc),
            });
        }
        list.push((spanned(g.name, g.loc), role));
    }
    if kind == RouterKind::Sglang {
        list.push(router_role(
            &router, &readiness, port, prefill, decode, &workers,
        ));
    }
    spec.entry_role = Some(spanned(router_name, router.loc));
    spec.roles = Some(RolesSpec(list));
    Ok(())
}

/// The router the service runs: a router group's role, or the one orchestrate adds for a
/// service-level `router`.
struct Router {
    name: String,
    loc: Location,
    kind: RouterKind,
    /// The router group's role; `None`: orchestrate's own (`python3 -m sglang_router...`).
    role: Option<RoleSpec>,
    /// The policy and PD mode of the router orchestrate adds.
    launch: String,
}

fn router(
    spec: &mut TaskSpec,
    groups: &mut Vec<Group>,
    loc: Location,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
) -> Result<Router, Diagnostic> {
    let in_groups: Vec<usize> = (0..groups.len())
        .filter(|&i| groups[i].router.is_some())
        .collect();
    if let Some(&second) = in_groups.get(1) {
        return Err(at(
            groups[second].loc,
            "a second replica group with `router`: dstack allows one".into(),
        )
        .with_help("keep `router` in one replica group"));
    }
    let top = spec.router.take();
    match (in_groups.first(), top) {
        (Some(_), Some(t)) => Err(at(
            t.referenced,
            "both a router replica group and a service-level `router`".into(),
        )
        .with_help("keep the replica group with `router:` (dstack's current form) and remove the service-level `router`")),
        (Some(&i), None) => {
            let g = groups.remove(i);
            let (kind, rloc) = g.router.unwrap_or((RouterKind::Sglang, g.loc));
            notes.push(Note {
                key: "router".into(),
                line: rloc.line(),
                honored: true,
                text: match kind {
                    RouterKind::Sglang => format!(
                        "group `{}` runs the SGLang router with its commands; once the workers are ready orchestrate registers each with it (POST /workers, the type its GET /server_info reports), as dstack does",
                        g.name
                    ),
                    RouterKind::Dynamo => format!(
                        "group `{}` runs the Dynamo frontend with its commands, first; the workers start once it is ready, with DSTACK_ROUTER_INTERNAL_IP, and it must list them (GET /health)",
                        g.name
                    ),
                },
            });
            Ok(Router {
                name: g.name,
                loc: g.loc,
                kind,
                role: Some(g.role),
                launch: String::new(),
            })
        }
        (None, Some(t)) => service_router(&t, groups, at, notes),
        (None, None) => Err(at(
            loc,
            "replica groups without a router: the benchmark sends its load to one endpoint".into(),
        )
        .with_help("add a router replica group, as dstack's PD examples do (`- count: 1` with `router: {type: sglang}` and the router's commands), or the service-level `router: {type: sglang, pd_disaggregation: true}`")),
    }
}

/// dstack 0.20.10's service-level `router:`: orchestrate starts the SGLang router as dstack's
/// gateway did, in the service's image (or on the host), and registers the workers.
fn service_router(
    t: &Spanned<RouterSpec>,
    groups: &[Group],
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
) -> Result<Router, Diagnostic> {
    if let Some(k) = t
        .value
        .kind
        .as_ref()
        .filter(|k| k.value == RouterKind::Dynamo)
    {
        return Err(at(
            k.referenced,
            "a service-level `router` is SGLang's only (dstack 0.20.10)".into(),
        )
        .with_help("run the Dynamo frontend as a replica group: `- count: 1` with `router: {type: dynamo}` and its commands"));
    }
    let policy = match &t.value.policy {
        Some(p) if !POLICIES.contains(&p.value.as_str()) => {
            return Err(at(
                p.referenced,
                format!("`{}` is not an SGLang router policy", p.value),
            )
            .with_help(crate::spec::diagnostic::suggest(&p.value, POLICIES)));
        }
        Some(p) => p.value.clone(),
        None => "cache_aware".into(),
    };
    let pd = t.value.pd_disaggregation.as_ref().is_some_and(|p| p.value);
    let mut name = "router".to_string();
    while groups.iter().any(|g| g.name == name) {
        name.push_str("-0");
    }
    let launch = format!(
        "exec python3 -m sglang_router.launch_router --host {{{{ host_address }}}} --port {{{{ port }}}} --prometheus-host {{{{ host_address }}}} --prometheus-port {{{{ port + 10000 }}}} --policy {policy}{}",
        if pd { " --pd-disaggregation" } else { "" }
    );
    notes.push(Note {
        key: "router".into(),
        line: t.referenced.line(),
        honored: true,
        text: format!(
            "role `{name}` runs `python3 -m sglang_router.launch_router --policy {policy}{}` (in the service's image, or from the PATH on the host) as dstack's gateway did; once the workers are ready orchestrate registers each with it (POST /workers, the type its GET /server_info reports)",
            if pd { " --pd-disaggregation" } else { "" }
        ),
    });
    Ok(Router {
        name,
        loc: t.referenced,
        kind: RouterKind::Sglang,
        role: None,
        launch,
    })
}

/// The router's role: its group's, or the one orchestrate adds, on `port` (an auto port for
/// orchestrate's own), checked for `prefill` and `decode` workers.
fn router_role(
    router: &Router,
    readiness: &Option<ReadinessSpec>,
    port: Option<Spanned<crate::spec::values::PortValue>>,
    prefill: u32,
    decode: u32,
    register: &[String],
) -> (Spanned<String>, RoleSpec) {
    let loc = router.loc;
    let workers = WorkersSpec {
        enabled: Some(true),
        prefill: Some(spanned(prefill, loc)),
        decode: Some(spanned(decode, loc)),
        via: Some(match router.kind {
            RouterKind::Sglang => WorkersVia::Router,
            RouterKind::Dynamo => WorkersVia::Dynamo,
        }),
        generate: None,
        register: register.iter().map(|r| spanned(r.clone(), loc)).collect(),
    };
    let role = match &router.role {
        Some(role) => {
            // The service's probes, but no completion: the router has no worker before the
            // topology check registers them.
            let mut r = readiness.clone().unwrap_or_else(empty_readiness);
            r.generate = false;
            r.workers = Some(workers);
            RoleSpec {
                port: port.unwrap_or(role.port.clone()),
                readiness: Some(r),
                depends_on: register.iter().map(|w| spanned(w.clone(), loc)).collect(),
                ..role.clone()
            }
        }
        None => RoleSpec {
            commands: vec![spanned(router.launch.clone(), loc)],
            replicas: None,
            hosts: Vec::new(),
            port: spanned(crate::spec::values::PortValue::Auto, loc),
            readiness: Some(ReadinessSpec {
                workers: Some(workers),
                ..empty_readiness()
            }),
            env: EnvList::default(),
            depends_on: register.iter().map(|w| spanned(w.clone(), loc)).collect(),
            image: None,
            nodes: None,
            procs: None,
            startup_order: None,
            resources: None,
            volumes: Vec::new(),
        },
    };
    (spanned(router.name.clone(), loc), role)
}

fn empty_readiness() -> ReadinessSpec {
    ReadinessSpec {
        http: None,
        tcp: false,
        status: None,
        interval: None,
        timeout: None,
        generate: false,
        workers: None,
        ray: None,
    }
}

/// One replica group, checked as dstack checks it, as a role (port and readiness are the
/// service's, set by the caller).
#[expect(
    clippy::too_many_lines,
    reason = "dstack's checks of a replica group, in its order"
)]
fn group(
    spec: &TaskSpec,
    index: usize,
    g: GroupSpec,
    leading: &[Spanned<String>],
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
    needs: &mut Needs,
) -> Result<Group, Diagnostic> {
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
    let loc = name
        .as_ref()
        .map(|n| n.referenced)
        .or(count.as_ref().or(replicas.as_ref()).map(|c| c.referenced))
        .or(commands.first().map(|c| c.referenced))
        .unwrap_or(Location::UNKNOWN);
    for (key, written, help) in [
        (
            "nodes",
            nodes.as_ref().map(|n| n.referenced),
            "a replica group has `count`; node groups are a task's `groups:`",
        ),
        (
            "ports",
            ports.first().map(|p| p.referenced),
            "a service's replicas listen on its `port`",
        ),
    ] {
        if let Some(l) = written {
            return Err(at(
                l,
                format!("`{key}` in a replica group is not supported here"),
            )
            .with_help(help));
        }
    }
    if let Some(n) = &name
        && !valid_name(&n.value)
    {
        return Err(at(
            n.referenced,
            format!("`{}` is not a replica group name", n.value),
        )
        .with_help(
            "use lowercase letters, digits and `-`, starting with a letter or digit (at most 40)",
        ));
    }
    let Some(written) = replicas.or(count) else {
        return Err(at(loc, "a replica group without `count`".into())
            .with_help("write `count: 1` (or a range with `scaling`, e.g. `count: 1..4`)"));
    };
    match (&scaling, written.value.is_range()) {
        (None, true) => {
            return Err(at(
                written.referenced,
                format!(
                    "`count: {}` is a range, which dstack autoscales: it needs `scaling`",
                    written.value
                ),
            )
            .with_help(
                "add `scaling: {metric: rps, target: 10}` to the group, or write a fixed count",
            ));
        }
        (Some(s), false) => {
            return Err(
                at(s.referenced, "`scaling` needs `count` to be a range".into())
                    .with_help("write `count: 1..4`, or remove `scaling`"),
            );
        }
        (Some(s), true) => check_scaling(&s.value, at)?,
        (None, false) => {}
    }
    let count = written.value.count();
    let mode = match flag_value(&commands, "--disaggregation-mode") {
        Some((m, _)) if m == "prefill" => Mode::Prefill,
        Some((m, _)) if m == "decode" => Mode::Decode,
        _ => Mode::Regular,
    };
    let router = match router {
        Some(r) => {
            if written.value != crate::spec::dstack::Replicas::fixed(1) {
                return Err(at(
                    written.referenced,
                    "the router group must have `count: 1` (as in dstack)".into(),
                )
                .with_help("write `count: 1`"));
            }
            for (key, l) in [
                ("policy", r.value.policy.as_ref().map(|p| p.referenced)),
                (
                    "pd_disaggregation",
                    r.value.pd_disaggregation.as_ref().map(|p| p.referenced),
                ),
            ] {
                if let Some(l) = l {
                    return Err(at(l, format!("`router.{key}` is a service-level router's key; a replica group's `router` has only `type`"))
                        .with_help("remove it: the router's commands set its policy and PD mode"));
                }
            }
            Some((
                r.value.kind.map_or(RouterKind::Sglang, |k| k.value),
                r.referenced,
            ))
        }
        None => None,
    };
    let name_text = match &name {
        Some(n) => n.value.clone(),
        None if router.is_some() => "router".into(),
        None => match mode {
            Mode::Prefill => "prefill".into(),
            Mode::Decode => "decode".into(),
            Mode::Regular => format!("worker-{index}"),
        },
    };
    let mut role_commands: Vec<Spanned<String>> = leading.to_vec();
    let (dind_image, wants_privileged) = dind(
        spec, &name_text, docker, privileged, &image, &python, &nvcc, at, notes,
    )?;
    needs.privileged |= wants_privileged;
    let image = match dind_image {
        Some(dind) => {
            role_commands.push(spanned("start-dockerd".into(), dind.referenced));
            Some(dind)
        }
        None => group_image(
            spec,
            &name_text,
            image,
            python,
            nvcc,
            at,
            notes,
            &mut role_commands,
            &mut needs.base,
        )?,
    };
    role_commands.extend(commands);
    for (key, v) in [("spot_policy", &spot_policy), ("reservation", &reservation)] {
        if let Some(v) = v {
            notes.push(Note {
                key: key.into(),
                line: v.referenced.line(),
                honored: false,
                text: format!(
                    "in group `{name_text}`: orchestrate runs on your own hosts; cloud provisioning"
                ),
            });
        }
    }
    if router.is_none() {
        let what = match mode {
            Mode::Prefill => "prefill workers (`--disaggregation-mode prefill`)",
            Mode::Decode => "decode workers (`--disaggregation-mode decode`)",
            Mode::Regular => "workers (no `--disaggregation-mode`: regular)",
        };
        let mut text = format!("group `{name_text}`: {what}, role `{name_text}` of ");
        if written.value.is_range() {
            text.push_str(&format!(
                "a fixed {count} replica{} (the lower bound of `{}`); autoscaling is off during the measurement",
                plural(count),
                written.value
            ));
        } else {
            text.push_str(&format!("{count} replica{}", plural(count)));
        }
        notes.push(Note {
            key: "replicas".into(),
            line: written.referenced.line(),
            honored: true,
            text,
        });
    }
    Ok(Group {
        name: name_text,
        loc,
        mode,
        count,
        router,
        role: RoleSpec {
            commands: role_commands,
            replicas: Some(spanned(count, written.referenced)),
            hosts: Vec::new(),
            port: spanned(crate::spec::values::PortValue::Auto, loc),
            readiness: None,
            env: EnvList::default(),
            depends_on: Vec::new(),
            image,
            nodes: None,
            procs: None,
            startup_order: None,
            resources,
            volumes: Vec::new(),
        },
    })
}

/// `docker: true` in a group: dstack's Docker-in-Docker image (the caller adds
/// `start-dockerd`), and whether the group asks for privileged containers (`docker: true`,
/// or `privileged: true` alone).
#[expect(
    clippy::too_many_arguments,
    reason = "the group's image keys, each checked against the others"
)]
fn dind(
    spec: &TaskSpec,
    group: &str,
    docker: Option<Spanned<serde_json::Value>>,
    privileged: Option<Spanned<serde_json::Value>>,
    image: &Option<Spanned<String>>,
    python: &Option<Spanned<serde_json::Value>>,
    nvcc: &Option<Spanned<serde_json::Value>>,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
) -> Result<(Option<Spanned<String>>, bool), Diagnostic> {
    let privileged_on = match &privileged {
        Some(p) => Some((boolean("privileged", p, at)?, p.referenced)),
        None => None,
    };
    let Some(d) = docker else {
        // `privileged: true` alone: the caller makes the containers privileged.
        return Ok((None, matches!(privileged_on, Some((true, _)))));
    };
    if !boolean("docker", &d, at)? {
        return Ok((None, matches!(privileged_on, Some((true, _)))));
    }
    for (other, l) in [
        ("image", image.as_ref().map(|i| i.referenced)),
        ("python", python.as_ref().map(|i| i.referenced)),
        ("nvcc", nvcc.as_ref().map(|i| i.referenced)),
    ] {
        if let Some(l) = l {
            return Err(at(l, format!("`{other}` and `docker` are mutually exclusive within a replica group (as in dstack)"))
                .with_help("remove one of them"));
        }
    }
    if let Some((false, l)) = privileged_on {
        return Err(at(l, "`privileged: false` is incompatible with `docker: true` within a replica group (as in dstack)".into())
            .with_help("remove `privileged: false`: Docker-in-Docker runs privileged"));
    }
    if let Some(top) = &spec.image {
        return Err(at(
            d.referenced,
            format!(
                "`docker: true` in group `{group}` and a service-level image (line {})",
                top.referenced.line()
            ),
        )
        .with_help("set the image source in one place only, as dstack requires"));
    }
    notes.push(Note {
        key: "docker".into(),
        line: d.referenced.line(),
        honored: true,
        text: format!("group `{group}` runs in `dstackai/dind` with dockerd started first (`start-dockerd`), as dstack does; needs a Docker host"),
    });
    Ok((
        Some(spanned("dstackai/dind".to_string(), d.referenced)),
        true,
    ))
}

/// A group's image: its `image`, or dstack's base image (a venv made first) for `python` or
/// `nvcc` without one; `None`: the service's.
#[expect(
    clippy::too_many_arguments,
    reason = "the group's image keys, each checked against the others"
)]
fn group_image(
    spec: &TaskSpec,
    group: &str,
    image: Option<Spanned<String>>,
    python: Option<Spanned<serde_json::Value>>,
    nvcc: Option<Spanned<serde_json::Value>>,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
    commands: &mut Vec<Spanned<String>>,
    base: &mut bool,
) -> Result<Option<Spanned<String>>, Diagnostic> {
    let python = python.filter(|p| !p.value.is_null());
    let nvcc = match nvcc {
        Some(v) => boolean("nvcc", &v, at)?.then_some(v),
        None => None,
    };
    if let Some(i) = &image {
        if let Some(p) = python.as_ref().or(nvcc.as_ref()) {
            return Err(at(
                p.referenced,
                "`image` and `python`/`nvcc` are mutually exclusive within a replica group (as in dstack)".into(),
            )
            .with_help("keep `image`, or remove it to run in dstack's base image"));
        }
        if let Some(top) = &spec.image {
            return Err(at(
                i.referenced,
                format!("`image` in group `{group}` and at the service level (line {}, from `image`, `python` or `docker`)", top.referenced.line()),
            )
            .with_help("set the image in one place only, as dstack requires"));
        }
        return Ok(image);
    }
    let Some(first) = python.as_ref().or(nvcc.as_ref()) else {
        return Ok(None);
    };
    if let Some(top) = &spec.image {
        return Err(at(
            first.referenced,
            format!(
                "`python`/`nvcc` in group `{group}` and a service-level image (line {})",
                top.referenced.line()
            ),
        )
        .with_help("set the image source in one place only, as dstack requires"));
    }
    let version = match &python {
        Some(v) => python_version(v, at)?,
        None => DEFAULT_PYTHON.to_string(),
    };
    let image = base_image(nvcc.is_some());
    commands.extend(
        venv_commands(&version)
            .into_iter()
            .map(|c| spanned(c, first.referenced)),
    );
    *base = true;
    notes.push(Note {
        key: if python.is_some() { "python" } else { "nvcc" }.into(),
        line: first.referenced.line(),
        honored: true,
        text: format!(
            "group `{group}` runs in dstack's base image `{image}` with a virtual environment of Python {version}, as dstack does; needs a Docker host"
        ),
    });
    Ok(Some(spanned(image, first.referenced)))
}

/// dstack's group names: `^[a-z0-9][a-z0-9-]{0,39}$`.
pub(super) fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.len() <= 40
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The backend and model the workers' launch commands name, when the file does not.
fn infer(spec: &mut TaskSpec, groups: &[Group], notes: &mut Vec<Note>) {
    let commands: Vec<Spanned<String>> = groups
        .iter()
        .filter(|g| g.router.is_none())
        .flat_map(|g| g.role.commands.iter().cloned())
        .collect();
    infer_from(
        spec,
        &commands,
        "replicas",
        "the workers' launch command",
        notes,
    );
}

#[cfg(test)]
mod tests {
    use super::valid_name;

    #[test]
    fn group_names_follow_dstacks_pattern() {
        assert!(valid_name("prefill"));
        assert!(valid_name("0"));
        assert!(valid_name("decode-2"));
        assert!(!valid_name("Prefill"));
        assert!(!valid_name("-x"));
        assert!(!valid_name(""));
        assert!(!valid_name(&"a".repeat(41)));
    }
}
