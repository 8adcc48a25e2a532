//! `orchestrate plan`: load, validate and resolve task files, then print exactly what a run
//! would do: deployments, rendered commands and env (secrets as `***`), every point's load.
//! Starts nothing.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::{Failure, Outcome};
use crate::dataset::DatasetSpec;
use crate::deploy::Resources;
use crate::load::{Limit, Rate};
use crate::plan::{HostPlan, LoadPlan, Plan, Probe, ProviderKind, RolePlan};
use crate::units::format_duration;

const AFTER_HELP: &str = "\
Exit codes:
  0  every task file is good; its plan is printed
  2  bad input: at least one task file has errors (printed on stderr); nothing is started";

/// Arguments of `orchestrate plan`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Task files to plan (YAML). Each is checked; all errors are reported.
    #[arg(required = true, value_name = "TASK")]
    pub tasks: Vec<PathBuf>,
    /// Output format: `text` for people, `json` for the resolved plans as a JSON array.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// The hosts file (default: ./hosts.yaml when present). See docs/hosts.md.
    #[arg(long, value_name = "FILE", env = "ORCHESTRATE_HOSTS")]
    pub hosts: Option<PathBuf>,
    /// A benchmark profile for every task (replaces `benchmark.profile`); a dstack file,
    /// which has no `benchmark` section, needs one.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Run this many replicas of a single-server task (a dstack `replicas: A..B` range
    /// runs its lower bound otherwise; autoscaling is off during a benchmark).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub replicas: Option<u32>,
}

/// How `plan` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Grouped by deployment: commands, env, then each point and its load.
    Text,
    /// `Plan` values serialized as JSON (secrets redacted).
    Json,
}

pub(super) fn run(args: Args) -> Outcome {
    let hosts = crate::hosts::discover(args.hosts.as_deref()).map_err(Failure::bad_input)?;
    let ctx = super::remote::plan_context(hosts.as_ref());
    let (plans, errors) =
        super::validate::plan_all(&args.tasks, args.profile.as_deref(), args.replicas, &ctx);
    match args.format {
        Format::Text => {
            let mut out = String::new();
            for (i, plan) in plans.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                out.push_str(&render_text(plan));
            }
            print!("{out}");
        }
        Format::Json => {
            let json = serde_json::to_string_pretty(&plans).map_err(|e| {
                Failure::run_failed(anyhow::Error::new(e).context("failed to serialize the plans"))
            })?;
            println!("{json}");
        }
    }
    super::validate::finish(errors)
}

/// The human-readable plan.
pub(super) fn render_text(plan: &Plan) -> String {
    let mut o = String::new();
    let points: usize = plan.deployments.iter().map(|d| d.points.len()).sum();
    let _ = writeln!(o, "task {} ({})", plan.task, plan.source.display());
    if let Some(d) = &plan.description {
        let _ = writeln!(o, "  {}", d.trim());
    }
    let backend = serde_json::to_value(plan.backend)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let _ = writeln!(o, "  backend {backend}, model {}", model_line(&plan.model));
    let _ = writeln!(o, "  sha256 {}", plan.spec_hash);
    if let Some(tag) = &plan.tag {
        let _ = writeln!(o, "  tag {tag}");
    }
    let reach = serde_json::to_value(plan.client.reach)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    if plan.client != crate::plan::ClientPlan::default() {
        let _ = writeln!(
            o,
            "  client on {}, reaches remote servers: {reach}",
            plan.client.host.name()
        );
    }
    let _ = writeln!(
        o,
        "  {} deployment{}, {} point{}{}",
        plan.deployments.len(),
        plural(plan.deployments.len()),
        points,
        plural(points),
        if plan.stop_on_failure {
            ", stop at the first failed point"
        } else {
            ""
        }
    );
    run_settings(&mut o, plan);
    for d in &plan.deployments {
        let axes: Vec<String> = d
            .axes
            .iter()
            .map(|(k, v)| format!("{k}={}", crate::matrix::scalar_text(v)))
            .collect();
        let _ = writeln!(o);
        if axes.is_empty() {
            let _ = writeln!(o, "deployment {}", d.id);
        } else {
            let _ = writeln!(o, "deployment {} ({})", d.id, axes.join(", "));
        }
        if d.name.is_some() {
            let backend = serde_json::to_value(d.backend)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let _ = writeln!(o, "  backend {backend}, model {}", model_line(&d.model));
        }
        // Where the runner writes each process's log (archive::log_path).
        let logs = if plan.deployments.len() > 1 {
            format!("logs/{}/", d.id)
        } else {
            "logs/".to_string()
        };
        render_salloc(&mut o, &plan.task, d);
        for role in &d.roles {
            render_role(&mut o, role, plan.port_auto, &logs);
            for i in &role.instances {
                super::plan_pod::render_pod(&mut o, &plan.task, &d.id, role, i);
            }
        }
        let what = match &plan.search {
            Some(s) => format!("the load each {} level starts from", s.axis.name()),
            None => "points".into(),
        };
        let _ = writeln!(o, "  {what} (traffic to role {}):", d.entry_role);
        for p in &d.points {
            let reps = if p.repetitions > 1 {
                format!(" x{}", p.repetitions)
            } else {
                String::new()
            };
            let _ = writeln!(o, "    {}{reps}", p.id);
            match &p.external {
                Some(e) => {
                    let _ = writeln!(
                        o,
                        "      external ({}, in the {} of {}): {}",
                        e.preset.map_or("custom metrics", |p| p.name()),
                        match e.place {
                            crate::external::Place::Container => "container",
                            crate::external::Place::Host => "host",
                        },
                        e.role,
                        e.command
                    );
                }
                None => {
                    let _ = writeln!(o, "      {}", describe_load(&p.load));
                }
            }
        }
    }
    o
}

/// The `salloc` of each Slurm cluster the deployment uses (the run id is known at run time).
/// `check`'s thresholds, `metric limit` comma-separated.
fn thresholds(plan: &Plan) -> String {
    let t: Vec<String> = plan
        .thresholds
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    t.join(", ")
}

fn render_salloc(o: &mut String, task: &str, d: &crate::plan::DeploymentPlan) {
    for (cluster, nodes, per_node) in crate::fleet::slurm::clusters(d).into_values() {
        let comment = crate::slurm::commands::comment("<run>", task, &d.id, 0)
            .replace("owner=0", "owner=<pid>");
        let argv = crate::slurm::commands::salloc(
            &cluster,
            (nodes, per_node),
            &crate::slurm::commands::job_name(task),
            &comment,
        );
        let _ = writeln!(
            o,
            "  slurm cluster {}{}: $ {}",
            cluster.name,
            on_login(&cluster),
            crate::slurm::commands::display(&argv)
        );
    }
}

/// The `srun` that starts instance `i` on its Slurm node (its commands as above).
fn render_srun(o: &mut String, role: &RolePlan, i: &crate::plan::InstancePlan) {
    let HostPlan::Slurm(place) = &i.host else {
        return;
    };
    let container = role
        .image
        .as_ref()
        .map(|image| crate::slurm::commands::StepContainer::new(image, &role.volumes));
    let argv = crate::slurm::commands::srun(
        &place.cluster,
        "<job>",
        &place.name,
        i.proc_rank
            .map(|_| role.resources_of(i).gpu.as_ref().map_or(0, |g| g.count)),
        container.as_ref(),
        "<commands>",
    );
    let via = match &place.cluster.login {
        Some(login) => format!("via login host {login}:"),
        None => "via".to_string(),
    };
    let _ = writeln!(
        o,
        "      {via} $ {}",
        crate::slurm::commands::display(&argv)
    );
}

/// ` on login host NAME` when `cluster`'s Slurm commands run there (over SSH), else nothing.
fn on_login(cluster: &crate::hosts::SlurmCluster) -> String {
    cluster
        .login
        .as_ref()
        .map(|login| format!(" on login host {login}"))
        .unwrap_or_default()
}

/// The container keys a role sets beyond the wiring (`privileged, user 1000, ...`).
fn container_line(c: &crate::deploy::ContainerOptions) -> Option<String> {
    let mut keys = Vec::new();
    if c.privileged {
        keys.push("privileged".to_string());
    }
    if let Some(user) = &c.user {
        keys.push(format!("user {user}"));
    }
    if let Some(shell) = &c.shell {
        keys.push(format!("shell {shell}"));
    }
    if let Some(words) = &c.entrypoint {
        let words: Vec<String> = words.iter().map(|w| crate::units::shell_quote(w)).collect();
        keys.push(format!("entrypoint {}", words.join(" ")));
    }
    (!keys.is_empty()).then(|| keys.join(", "))
}

/// How a role's instances run: `local processes`, `docker image X`, `slurm job steps`,
/// `kubernetes pods, image X`.
fn how_it_runs(role: &RolePlan) -> String {
    let on_slurm = role
        .instances
        .iter()
        .any(|i| matches!(i.host, HostPlan::Slurm(_)));
    let on_kubernetes = role
        .instances
        .iter()
        .any(|i| matches!(i.host, HostPlan::Kubernetes(_)));
    match (&role.provider, &role.image) {
        (_, Some(image)) if on_kubernetes => format!("kubernetes pods, image {image}"),
        (_, Some(image)) if on_slurm => format!("slurm job steps, image {image}"),
        (_, None) if on_slurm => "slurm job steps".to_string(),
        (ProviderKind::Docker, Some(image)) => format!("docker image {image}"),
        (ProviderKind::Docker, None) => "docker".to_string(),
        (ProviderKind::Local, _) => "local processes".to_string(),
    }
}

/// `gpu 8 h100 (nvidia)`, `shm 16GB`: what `resources` asks for, as `plan` prints it after a
/// role or an instance (none when it asks for none of these).
fn describe_resources(resources: &Resources) -> Vec<String> {
    let mut res = Vec::new();
    if let Some(g) = resources.gpu.as_ref().filter(|g| g.count > 0) {
        let names = if g.names.is_empty() {
            String::new()
        } else {
            format!(" {}", g.names.join("|"))
        };
        res.push(format!("gpu {}{names} ({:?})", g.count, g.vendor).to_lowercase());
    }
    if let Some(shm) = resources.shm_size {
        res.push(format!("shm {}", format_size(shm)));
    }
    if let Some(disk) = resources.disk {
        res.push(format!("disk {} free", format_size(disk)));
    }
    res
}

fn render_role(o: &mut String, role: &RolePlan, port_auto: bool, logs: &str) {
    let how = how_it_runs(role);
    let res: String = describe_resources(&role.resources)
        .iter()
        .map(|r| format!(", {r}"))
        .collect();
    let _ = writeln!(o, "  role {}: {how}{res}", role.name);
    if let Some(line) = container_line(&role.container) {
        let _ = writeln!(o, "    container: {line}");
    }
    let r = &role.readiness;
    let probe = match &r.http {
        Some(h) => format!(
            "GET {} -> {} every {}",
            h.path,
            h.status,
            format_duration(r.interval)
        ),
        None => format!("TCP connect every {}", format_duration(r.interval)),
    };
    let generate = if r.generate {
        ", then one completion"
    } else {
        ""
    };
    let ray = r.ray.as_ref().map_or(String::new(), |ray| {
        format!(
            "after `{} status` on node 0 counts {} Ray nodes (port {}), ",
            ray.command,
            ray.nodes.unwrap_or(1),
            ray.port
        )
    });
    let _ = writeln!(
        o,
        "    ready: {ray}{probe}{generate}, timeout {}",
        format_duration(r.timeout)
    );
    if role.startup_order != crate::spec::dstack::StartupOrder::Any {
        let order = serde_json::to_value(role.startup_order).unwrap_or_default();
        let _ = writeln!(
            o,
            "    start order: {} (each replica's processes)",
            order.as_str().unwrap_or_default()
        );
    }
    for v in &role.volumes {
        let _ = writeln!(
            o,
            "    volume {}:{}{}",
            v.host,
            v.container,
            if v.read_only { ":ro" } else { "" }
        );
    }
    let gangs = role.instances.iter().any(|i| i.node_rank > 0);
    for i in &role.instances {
        let host = match &i.host {
            HostPlan::Local => "local".to_string(),
            HostPlan::Remote { name, address } => format!("{name} ({address})"),
            HostPlan::Slurm(slurm) => format!("slurm {} node {}", slurm.cluster.name, slurm.name),
            HostPlan::Kubernetes(place) => format!(
                "kubernetes {} namespace {}",
                place.cluster.name, place.cluster.namespace
            ),
        };
        let auto = if port_auto { " (auto)" } else { "" };
        let rank = match (gangs, i.proc_rank, i.probe) {
            (_, Some(p), _) => {
                let gpus = if i.gpu_ids.is_empty() {
                    String::new()
                } else {
                    format!(", GPUs {}", i.gpu_ids.join(","))
                };
                format!(
                    " (replica {} node {} process {p}{gpus})",
                    i.replica, i.node_rank
                )
            }
            (false, None, _) => String::new(),
            (true, None, Probe::Role) => {
                format!(" (replica {} node {}, leader)", i.replica, i.node_rank)
            }
            (true, None, Probe::Alive) => format!(
                " (replica {} node {}, headless: ready when alive)",
                i.replica, i.node_rank
            ),
        };
        // A node with resources of its own (dstack's node groups) says what it asks for.
        let own = match i.resources.as_ref().map(describe_resources) {
            Some(none) if none.is_empty() => ", own resources: no GPUs".to_string(),
            Some(some) => format!(", own resources: {}", some.join(", ")),
            None => String::new(),
        };
        let _ = writeln!(
            o,
            "    instance {}{rank} on {host}, port {}{auto}{own}, log {logs}{}.log",
            i.index,
            i.port,
            i.name(&role.name)
        );
        render_srun(o, role, i);
        for c in &i.commands {
            let mut lines = c.lines();
            let _ = writeln!(o, "      $ {}", lines.next().unwrap_or_default());
            for l in lines {
                let _ = writeln!(o, "        {l}");
            }
        }
        for e in &i.env {
            // One line per variable: a multi-line value (DSTACK_NODES_IPS) shows `\n`.
            let value = e.value.to_string().replace('\n', "\\n");
            let _ = writeln!(o, "      {}={value}", e.name);
        }
    }
}

/// The dataset of a point, as `plan` prints it.
fn describe_dataset(dataset: &DatasetSpec) -> String {
    match dataset {
        DatasetSpec::Random {
            input_len,
            output_len,
            range_ratio,
            prefix_len,
        } => {
            let mut s = format!("random {input_len} in / {output_len} out");
            if *range_ratio > 0.0 {
                let _ = write!(s, " ±{}%", range_ratio * 100.0);
            }
            if *prefix_len > 0 {
                let _ = write!(s, ", shared prefix {prefix_len}");
            }
            s
        }
        DatasetSpec::ShareGpt {
            path,
            input_len,
            output_len,
        } => format!(
            "sharegpt {}{}{}",
            path.display(),
            input_len.map(|v| format!(", {v} in")).unwrap_or_default(),
            output_len.map(|v| format!(", {v} out")).unwrap_or_default()
        ),
        DatasetSpec::Text {
            path,
            input_len,
            output_len,
        } => {
            format!("text {} {input_len} in / {output_len} out", path.display())
        }
        DatasetSpec::SharedPrefix {
            num_groups,
            prompts_per_group,
            system_prompt_len,
            question_len,
            output_len,
        } => format!(
            "shared_prefix {num_groups} groups x {prompts_per_group}, prefix {system_prompt_len} + question {question_len} in / {output_len} out"
        ),
        DatasetSpec::Jsonl { path, output_len } => format!(
            "jsonl {}{}",
            path.display(),
            output_len.map(|v| format!(", {v} out")).unwrap_or_default()
        ),
        DatasetSpec::Weka { path, speedup } => {
            format!("weka agentic trace {} (speedup {speedup})", path.display())
        }
        DatasetSpec::Mooncake { path, replay } => format!(
            "mooncake trace {} (blocks of {}, speedup {}, from {}{})",
            path.display(),
            replay.block_size,
            replay.speedup,
            format_duration(replay.start),
            replay
                .duration
                .map(|d| format!(" for {}", format_duration(d)))
                .unwrap_or_default()
        ),
        DatasetSpec::Conversation(c) => c.describe(),
    }
}

/// One line describing a point's load.
pub(super) fn describe_load(l: &LoadPlan) -> String {
    let mut parts = vec![describe_dataset(&l.dataset)];
    let s = &l.shape;
    parts.push(match s.limit {
        Limit::Requests(n) => format!("{n} requests"),
        Limit::Duration(d) => format!("for {}", format_duration(d)),
    });
    parts.push(match s.max_concurrency {
        Some(c) => format!("concurrency {c}"),
        None => "no concurrency cap".to_string(),
    });
    parts.push(match &s.rate {
        Rate::Unlimited => "rate inf".to_string(),
        Rate::Constant { rps } => format!("rate {rps}/s constant"),
        Rate::Poisson { rps } => format!("rate {rps}/s poisson"),
        Rate::Gamma { rps, burstiness } => format!("rate {rps}/s gamma {burstiness}"),
    });
    if let Some(r) = &s.ramp_up {
        parts
            .push(format!("ramp {:?} {}->{}/s", r.strategy, r.start_rps, r.end_rps).to_lowercase());
    }
    if !s.warmup.is_zero() || !s.cooldown.is_zero() {
        parts.push(format!(
            "warmup {} cooldown {}",
            format_duration(s.warmup),
            format_duration(s.cooldown)
        ));
    }
    parts.push(l.endpoint.path().to_string());
    if l.ignore_eos {
        parts.push("ignore_eos".into());
    }
    if let Some(t) = &l.tokenizer {
        parts.push(format!("tokenizer {t}"));
    }
    if l.seed != 0 {
        parts.push(format!("seed {}", l.seed));
    }
    if !l.extra_body.is_empty() {
        parts.push(format!(
            "extra_body {}",
            serde_json::Value::Object(l.extra_body.clone())
        ));
    }
    if let Some(t) = l.request_timeout {
        parts.push(format!("request timeout {}", format_duration(t)));
    }
    if !l.goodput.is_empty() {
        parts.push(format!(
            "goodput {}",
            crate::load::describe_slos(&l.goodput)
        ));
    }
    // The default block size (16, vLLM's) goes unsaid, like seed 0.
    if l.prefix_block_size != crate::load::DEFAULT_PREFIX_BLOCK_TOKENS {
        parts.push(format!("prefix blocks of {} tokens", l.prefix_block_size));
    }
    // The default (5m) goes unsaid, like seed 0.
    match l.stall_timeout {
        Some(t) if t == crate::load::DEFAULT_STALL_TIMEOUT => {}
        Some(t) => parts.push(format!("stall timeout {}", format_duration(t))),
        None => parts.push("stall timeout off".to_string()),
    }
    parts.extend(describe_timeseries(l));
    parts.join(", ")
}

/// The time-series interval, when not the default (1s, unsaid like seed 0).
fn describe_timeseries(l: &LoadPlan) -> Option<String> {
    match l.timeseries_interval {
        Some(t) if t == crate::load::DEFAULT_TIMESERIES_INTERVAL => None,
        Some(t) => Some(format!("time series every {}", format_duration(t))),
        None => Some("time series off".to_string()),
    }
}

/// Bytes the way task files write them (`32GB`, `16Gi`), else a byte count.
fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (1 << 40, "Ti"),
        (1_000_000_000_000, "TB"),
        (1 << 30, "Gi"),
        (1_000_000_000, "GB"),
        (1 << 20, "Mi"),
        (1_000_000, "MB"),
    ];
    for (size, unit) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The model as `plan` prints it: the id, or where the run will read it.
fn model_line(model: &str) -> &str {
    if model.is_empty() {
        "(none named: read from the server's /v1/models once it is ready)"
    } else {
        model
    }
}

/// The run-wide lines of `plan`: check thresholds, validity, telemetry, the capacity search,
/// what each dstack key became.
fn run_settings(o: &mut String, plan: &Plan) {
    if !plan.thresholds.is_empty() {
        let _ = writeln!(o, "  check thresholds: {}", thresholds(plan));
    }
    let _ = writeln!(
        o,
        "  validity: error rate <= {}, output length within {}%",
        plan.validity.max_error_rate,
        plan.validity.length_tolerance * 100.0
    );
    match plan.validity.over_saturation {
        crate::load::OverSaturation::Off => {}
        crate::load::OverSaturation::Monitor => {
            let _ = writeln!(
                o,
                "  over-saturation judged per point (in flight and TTFT both rising: invalid)"
            );
        }
        crate::load::OverSaturation::Stop => {
            let _ = writeln!(
                o,
                "  over-saturation judged per point; the sweep stops escalating at the first over-saturated point"
            );
        }
    }
    if let Some(t) = &plan.telemetry {
        let _ = writeln!(o, "  {}", crate::telemetry::sampler::describe(t));
    }
    for line in plan
        .search
        .iter()
        .flat_map(crate::load::search::SearchSpec::describe)
    {
        let _ = writeln!(o, "  {line}");
    }
    if !plan.dstack.is_empty() {
        let _ = writeln!(o, "  dstack keys:");
        for note in &plan.dstack {
            let _ = writeln!(o, "    {note}");
        }
    }
}
