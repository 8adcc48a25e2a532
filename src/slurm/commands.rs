//! The argv of every Slurm command orchestrate runs, and parsers of their output. Pure: the
//! plan prints these lines, the allocation and provider run them.

use std::collections::BTreeMap;

use crate::hosts::{SlurmCluster, SlurmContainer};
use crate::units::shell_quote;

/// Prefix of every job's `--comment`; `ps` and `clean` look for it.
pub const COMMENT_PREFIX: &str = "orchestrate ";

/// `squeue` columns `ps`/`clean` read: id, name, comment, state, nodes, reason.
pub const SQUEUE_FORMAT: &str = "%i|%j|%k|%T|%N|%r";

/// The job name of a task's allocations: `orchestrate-<task>`.
pub fn job_name(task: &str) -> String {
    format!("orchestrate-{task}")
}

/// The job comment: `orchestrate run=<run> task=<task> deployment=<d> owner=<pid>`.
pub fn comment(run: &str, task: &str, deployment: &str, owner: u32) -> String {
    format!("{COMMENT_PREFIX}run={run} task={task} deployment={deployment} owner={owner}")
}

/// The `key=value` fields of one of our comments; `None` when it is not ours.
pub fn parse_comment(comment: &str) -> Option<BTreeMap<String, String>> {
    let rest = comment.trim().strip_prefix(COMMENT_PREFIX.trim_end())?;
    Some(
        rest.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// The GPU request of every allocation and step of `cluster`: `--gres` when set, else
/// `--gpus-per-node` when positive, else nothing.
pub fn gpu_flags(cluster: &SlurmCluster) -> Vec<String> {
    match (&cluster.gres, cluster.gpus_per_node) {
        (Some(gres), _) => vec![format!("--gres={gres}")],
        (None, 0) => Vec::new(),
        (None, n) => vec![format!("--gpus-per-node={n}")],
    }
}

/// `salloc --no-shell`: `nodes` nodes of `cluster`'s partition under `name` and `comment`,
/// with room for `per_node` steps of one CPU each on a node (`--ntasks-per-node`) when a role
/// runs several processes per node.
pub fn salloc(
    cluster: &SlurmCluster,
    (nodes, per_node): (usize, usize),
    name: &str,
    comment: &str,
) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        "salloc".into(),
        "--no-shell".into(),
        format!("--nodes={nodes}"),
        format!("--partition={}", cluster.partition),
        format!("--time={}", cluster.time_limit),
        format!("--job-name={name}"),
        format!("--comment={comment}"),
    ];
    if per_node > 1 {
        argv.push(format!("--ntasks-per-node={per_node}"));
    }
    if let Some(account) = &cluster.account {
        argv.push(format!("--account={account}"));
    }
    if let Some(qos) = &cluster.qos {
        argv.push(format!("--qos={qos}"));
    }
    argv.extend(gpu_flags(cluster));
    argv
}

/// A container for a pyxis step: the image and `host:container[:ro]` mounts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepContainer {
    pub image: String,
    pub mounts: Vec<String>,
}

impl StepContainer {
    /// `image` with a role's volumes as pyxis mounts.
    pub fn new(image: &str, volumes: &[crate::deploy::VolumeMount]) -> Self {
        Self {
            image: image.to_string(),
            mounts: volumes
                .iter()
                .map(|v| {
                    format!(
                        "{}:{}{}",
                        v.host,
                        v.container,
                        if v.read_only { ":ro" } else { "" }
                    )
                })
                .collect(),
        }
    }
}

/// `srun` of one instance: one task on `node` of job `job`, overlapping the other steps,
/// with the cluster's GPU request and, under pyxis, the container; runs `script` in
/// `sh -e -c`. One of several processes of a node asks `share` GPUs with `--exact` instead
/// of overlapping: Slurm then binds each such step to GPUs (and a CPU) of its own, which
/// overlapping steps would share.
pub fn srun(
    cluster: &SlurmCluster,
    job: &str,
    node: &str,
    share: Option<u32>,
    container: Option<&StepContainer>,
    script: &str,
) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        "srun".into(),
        format!("--jobid={job}"),
        format!("--nodelist={node}"),
        "--nodes=1".into(),
        "--ntasks=1".into(),
    ];
    match share {
        None => {
            argv.push("--overlap".into());
            argv.extend(gpu_flags(cluster));
        }
        Some(n) => {
            argv.push("--exact".into());
            if n > 0 {
                argv.push(format!("--gpus-per-node={n}"));
            }
        }
    }
    if let (SlurmContainer::Pyxis, Some(c)) = (cluster.container, container) {
        argv.push(format!("--container-image={}", c.image));
        if !c.mounts.is_empty() {
            argv.push(format!("--container-mounts={}", c.mounts.join(",")));
        }
    }
    argv.extend(["sh".into(), "-e".into(), "-c".into(), script.to_string()]);
    argv
}

/// `scancel JOB`.
pub fn scancel(job: &str) -> Vec<String> {
    vec!["scancel".into(), job.to_string()]
}

/// `squeue` of our jobs' columns ([`SQUEUE_FORMAT`]), every job.
pub fn squeue_all() -> Vec<String> {
    vec!["squeue".into(), "-h".into(), format!("-o{SQUEUE_FORMAT}")]
}

/// `scontrol -o show job JOB`: one line of `Key=Value` fields.
pub fn show_job(job: &str) -> Vec<String> {
    ["scontrol", "-o", "show", "job", job]
        .map(String::from)
        .to_vec()
}

/// `scontrol show hostnames LIST`: a node list (`n[1-2]`) expanded, one name a line.
pub fn hostnames(list: &str) -> Vec<String> {
    ["scontrol", "show", "hostnames", list]
        .map(String::from)
        .to_vec()
}

/// `scontrol -o show node NODE`.
pub fn show_node(node: &str) -> Vec<String> {
    ["scontrol", "-o", "show", "node", node]
        .map(String::from)
        .to_vec()
}

/// An argv as a shell line, for `plan` and logs.
pub fn display(argv: &[String]) -> String {
    argv.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The job id in a line salloc prints (`salloc: Granted job allocation 12`,
/// `salloc: Pending job allocation 12`).
pub fn parse_allocation_line(line: &str) -> Option<String> {
    let (_, rest) = line.split_once("job allocation ")?;
    let id: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!id.is_empty()).then_some(id)
}

/// The `Key=Value` fields of a one-line `scontrol -o show ...` answer. Values run to the
/// next ` Key=` (a `Comment` may hold spaces and `=`).
pub fn parse_fields(line: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut key: Option<String> = None;
    let mut value = String::new();
    for word in line.split(' ') {
        let new_key = word.split_once('=').and_then(|(k, v)| {
            let is_key = !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '/' || c == ':' || c == '_')
                && k.chars().next().is_some_and(|c| c.is_ascii_uppercase());
            is_key.then(|| (k.to_string(), v.to_string()))
        });
        match new_key {
            Some((k, v)) if key.as_deref() != Some("Comment") || known_key(&k) => {
                if let Some(done) = key.take() {
                    out.insert(done, value.trim_end().to_string());
                }
                key = Some(k);
                value = v;
            }
            _ => {
                if key.is_some() {
                    value.push(' ');
                    value.push_str(word);
                }
            }
        }
    }
    if let Some(done) = key {
        out.insert(done, value.trim_end().to_string());
    }
    out
}

/// Keys that end a `Comment` value (what scontrol prints after it).
fn known_key(key: &str) -> bool {
    matches!(
        key,
        "StdErr"
            | "StdIn"
            | "StdOut"
            | "Power"
            | "Command"
            | "WorkDir"
            | "TresPerNode"
            | "MailUser"
            | "MailType"
    )
}

/// How a job stands, for errors: `JobState=CANCELLED Reason=None`.
pub fn describe_state(fields: &BTreeMap<String, String>) -> String {
    format!(
        "JobState={} Reason={}",
        fields.get("JobState").map_or("?", String::as_str),
        fields.get("Reason").map_or("?", String::as_str)
    )
}

/// One `squeue` line in [`SQUEUE_FORMAT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedJob {
    pub id: String,
    pub name: String,
    pub comment: String,
    pub state: String,
    pub nodes: String,
    pub reason: String,
}

/// The lines of `squeue -h -o SQUEUE_FORMAT` (malformed lines are left out).
pub fn parse_squeue(text: &str) -> Vec<QueuedJob> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.splitn(6, '|').collect();
            (f.len() == 6).then(|| QueuedJob {
                id: f[0].trim().to_string(),
                name: f[1].to_string(),
                comment: f[2].to_string(),
                state: f[3].to_string(),
                nodes: f[4].to_string(),
                reason: f[5].to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> SlurmCluster {
        SlurmCluster {
            name: "gpu".into(),
            partition: "batch".into(),
            account: Some("perf".into()),
            qos: None,
            time_limit: "1:00:00".into(),
            gpus_per_node: 8,
            gres: None,
            container: SlurmContainer::None,
            login: None,
            partition_at: "hosts.yaml:4:18".into(),
            time_limit_at: "hosts.yaml:5:19".into(),
            gpus_per_node_at: "hosts.yaml:6:22".into(),
            gres_at: None,
        }
    }

    #[test]
    fn salloc_asks_for_the_nodes_under_our_name_and_comment() {
        let argv = salloc(
            &cluster(),
            (2, 1),
            "orchestrate-t",
            &comment("R1", "t", "d1", 7),
        );
        assert_eq!(
            display(&argv),
            "salloc --no-shell --nodes=2 --partition=batch --time=1:00:00 \
             --job-name=orchestrate-t '--comment=orchestrate run=R1 task=t deployment=d1 owner=7' \
             --account=perf --gpus-per-node=8"
        );
        let mut gres = cluster();
        gres.gres = Some("gpu:h100:8".into());
        gres.qos = Some("high".into());
        let line = display(&salloc(&gres, (1, 1), "n", "c"));
        assert!(line.ends_with("--qos=high --gres=gpu:h100:8"), "{line}");
        let mut none = cluster();
        none.gpus_per_node = 0;
        assert!(!display(&salloc(&none, (1, 1), "n", "c")).contains("gpu"));
        // Room for 8 one-CPU steps on each node, for 8 processes per node.
        assert!(display(&salloc(&none, (2, 8), "n", "c")).contains("--ntasks-per-node=8"));
    }

    #[test]
    fn srun_runs_one_task_on_its_node_with_the_container_under_pyxis() {
        let plain = srun(&cluster(), "12", "n2", None, None, "echo hi");
        assert_eq!(
            display(&plain),
            "srun --jobid=12 --nodelist=n2 --nodes=1 --ntasks=1 --overlap --gpus-per-node=8 sh -e -c 'echo hi'"
        );
        let mut pyxis = cluster();
        pyxis.container = SlurmContainer::Pyxis;
        let c = StepContainer {
            image: "vllm/vllm-openai:latest".into(),
            mounts: vec!["/data:/data:ro".into(), "/m:/models".into()],
        };
        let line = display(&srun(&pyxis, "12", "n2", None, Some(&c), "serve"));
        assert!(
            line.contains(
                "--container-image=vllm/vllm-openai:latest --container-mounts=/data:/data:ro,/m:/models sh"
            ),
            "{line}"
        );
        // No container asked: no pyxis flags even on a pyxis cluster.
        assert!(!display(&srun(&pyxis, "1", "n1", None, None, "x")).contains("container"));
        // One of several processes of a node asks its share of the node's GPUs.
        let share = display(&srun(&cluster(), "12", "n2", Some(2), None, "x"));
        assert!(
            share.contains("--ntasks=1 --exact --gpus-per-node=2 sh"),
            "{share}"
        );
        assert!(!display(&srun(&cluster(), "12", "n2", Some(0), None, "x")).contains("gpus"));
    }

    #[test]
    fn parses_what_slurm_prints() {
        assert_eq!(
            parse_allocation_line("salloc: Granted job allocation 42"),
            Some("42".into())
        );
        assert_eq!(
            parse_allocation_line("salloc: Pending job allocation 7"),
            Some("7".into())
        );
        assert_eq!(parse_allocation_line("salloc: error: nope"), None);
        let line = "JobId=2 JobName=orchestrate-t UserId=root(0) JobState=CANCELLED Reason=TimeLimit Dependency=(null) NodeList=n[1-2] Comment=orchestrate run=R1 task=t owner=1 Power= TresPerNode=gres:gpu:1";
        let f = parse_fields(line);
        assert_eq!(f["JobState"], "CANCELLED");
        assert_eq!(f["NodeList"], "n[1-2]");
        assert_eq!(f["Comment"], "orchestrate run=R1 task=t owner=1");
        assert_eq!(f["TresPerNode"], "gres:gpu:1");
        assert_eq!(describe_state(&f), "JobState=CANCELLED Reason=TimeLimit");
        let node = parse_fields(
            "NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.0.0.7 NodeHostName=a",
        );
        assert_eq!(node["NodeAddr"], "10.0.0.7");
        let c = parse_comment(&comment("R 1", "t", "d1", 9)).unwrap();
        assert_eq!(c["task"], "t");
        assert_eq!(c["owner"], "9");
        assert_eq!(parse_comment("someone else's job"), None);
        let q =
            parse_squeue("12|orchestrate-t|orchestrate run=R task=t|RUNNING|n[1-2]|None\nbad\n");
        assert_eq!(q.len(), 1);
        assert_eq!(q[0].nodes, "n[1-2]");
    }
}
