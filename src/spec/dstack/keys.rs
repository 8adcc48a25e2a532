//! Every key of dstack's task and service reference, what orchestrate does with it and
//! why, and the [`Note`] that says, for `plan`, what a written key became.

use std::fmt;

use serde::Serialize;

/// What orchestrate does with one key of dstack's reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// It means here what it means under dstack (or the nearest thing; the note says).
    Honored,
    /// Accepted and ignored: it chooses cloud capacity or dstack's own services.
    Ignored,
    /// Accepted only in the form that does not change what runs; other values are errors.
    Refused,
}

/// Every top-level key of dstack's task and service reference (dstack 0.20,
/// `TaskConfiguration` and `ServiceConfiguration`), what orchestrate does with it and why.
/// docs/task-file.md's dstack table lists the same keys (a test keeps them equal); `nodes`,
/// `replicas` are the multi-node keys of the topology section (`replicas` as a list: replica
/// groups, like `groups`).
pub const KEYS: &[(&str, Treatment, &str)] = &[
    (
        "type",
        Treatment::Honored,
        "`task` or `service`; both run and are benchmarked the same way",
    ),
    (
        "name",
        Treatment::Honored,
        "optional: the file name without `.dstack.yml`/`.yaml`",
    ),
    (
        "image",
        Treatment::Honored,
        "the container image (none: commands run as processes on the host)",
    ),
    (
        "commands",
        Treatment::Honored,
        "run in order in one `sh -c`",
    ),
    (
        "env",
        Treatment::Honored,
        "list or map; `- NAME` passes NAME through from orchestrate's environment",
    ),
    (
        "port",
        Treatment::Honored,
        "the server port; `80:8000` listens on 8000",
    ),
    (
        "ports",
        Treatment::Honored,
        "the first is the server port (when `port` is unset); the others are published too (Docker)",
    ),
    (
        "model",
        Treatment::Honored,
        "the model id sent in requests; a string or `{name, format}`",
    ),
    (
        "resources",
        Treatment::Honored,
        "gpu chooses among the hosts; cpu, memory and free disk are pre-flight minimums on remote hosts; shm_size sizes /dev/shm",
    ),
    (
        "volumes",
        Treatment::Honored,
        "instance volumes `/host/path:/container/path` (Docker)",
    ),
    (
        "working_dir",
        Treatment::Honored,
        "the commands start with `cd` into it",
    ),
    (
        "probes",
        Treatment::Honored,
        "the first probe becomes readiness (GET: its url; POST: a test completion)",
    ),
    (
        "startup_order",
        Treatment::Honored,
        "order of a multi-node role's nodes; one node has nothing to order",
    ),
    (
        "stop_criteria",
        Treatment::Honored,
        "validated; servers run until the sweep ends, then every node stops",
    ),
    (
        "shell",
        Treatment::Honored,
        "the commands run with `<shell> -c` (`sh`, `bash` or an absolute path); containers only",
    ),
    (
        "privileged",
        Treatment::Honored,
        "the containers run privileged; containers only (Docker)",
    ),
    (
        "user",
        Treatment::Honored,
        "the commands run as this user (`docker run --user`); containers only (Docker)",
    ),
    (
        "entrypoint",
        Treatment::Honored,
        "replaces the image's entrypoint, the commands its arguments; containers only (Docker)",
    ),
    (
        "docker",
        Treatment::Honored,
        "`true`: dstack's `dstackai/dind` image, privileged, `start-dockerd` first; Docker only",
    ),
    (
        "groups",
        Treatment::Honored,
        "a service's replica groups (as `replicas:` as a list) or a task's node groups: each group becomes a role",
    ),
    (
        "router",
        Treatment::Honored,
        "the service-level SGLang router (dstack 0.20.10): orchestrate starts `python3 -m sglang_router.launch_router` and registers the workers",
    ),
    (
        "python",
        Treatment::Honored,
        "without `image:`, dstack's base image `dstackai/base:0.15-base-ubuntu24.04` with a venv of that Python (Docker only); with `image:` no effect",
    ),
    (
        "nvcc",
        Treatment::Honored,
        "without `image:`, dstack's base image `dstackai/base:0.15-devel-ubuntu24.04` (Docker only); with `image:` no effect",
    ),
    (
        "repos",
        Treatment::Ignored,
        "nothing is cloned; commands see the image's (or host's) files",
    ),
    (
        "files",
        Treatment::Ignored,
        "nothing is copied; commands see the image's (or host's) files",
    ),
    (
        "registry_auth",
        Treatment::Ignored,
        "images are pulled with the host's own Docker credentials",
    ),
    (
        "single_branch",
        Treatment::Ignored,
        "applies to `repos`, which are not cloned",
    ),
    (
        "setup",
        Treatment::Ignored,
        "deprecated by dstack; it has no effect for tasks and services",
    ),
    (
        "home_dir",
        Treatment::Ignored,
        "deprecated by dstack; it has no effect",
    ),
    (
        "dstack",
        Treatment::Ignored,
        "there is no dstack server to reach",
    ),
    (
        "priority",
        Treatment::Ignored,
        "tasks sharing a host queue in the order given",
    ),
    ("backends", Treatment::Ignored, "cloud provisioning"),
    ("regions", Treatment::Ignored, "cloud provisioning"),
    (
        "availability_zones",
        Treatment::Ignored,
        "cloud provisioning",
    ),
    ("instance_types", Treatment::Ignored, "cloud provisioning"),
    ("reservation", Treatment::Ignored, "cloud provisioning"),
    ("spot_policy", Treatment::Ignored, "cloud provisioning"),
    ("max_price", Treatment::Ignored, "cloud provisioning"),
    ("backend_options", Treatment::Ignored, "cloud provisioning"),
    (
        "creation_policy",
        Treatment::Ignored,
        "fleet instances are the hosts of the hosts file",
    ),
    (
        "fleets",
        Treatment::Ignored,
        "fleet instances are the hosts of the hosts file; use `hosts:`",
    ),
    (
        "instances",
        Treatment::Ignored,
        "fleet instances are the hosts of the hosts file; use `hosts:`",
    ),
    (
        "idle_duration",
        Treatment::Ignored,
        "nothing is provisioned, so nothing idles",
    ),
    (
        "retry",
        Treatment::Ignored,
        "a failed point is recorded; `orchestrate run --resume` finishes a run",
    ),
    (
        "utilization_policy",
        Treatment::Ignored,
        "a benchmark is not stopped for low GPU utilization",
    ),
    (
        "max_duration",
        Treatment::Ignored,
        "a run lasts as long as its sweep",
    ),
    (
        "stop_duration",
        Treatment::Ignored,
        "teardown stops instances at once",
    ),
    (
        "schedule",
        Treatment::Ignored,
        "runs start when `orchestrate run` is called",
    ),
    (
        "tags",
        Treatment::Ignored,
        "cloud resource tags; the run index label is `tag:`",
    ),
    (
        "gateway",
        Treatment::Ignored,
        "the client talks to the server port directly",
    ),
    (
        "strip_prefix",
        Treatment::Ignored,
        "the client talks to the server port directly",
    ),
    (
        "https",
        Treatment::Ignored,
        "the client talks to the server port directly",
    ),
    (
        "auth",
        Treatment::Ignored,
        "the client talks to the server port directly",
    ),
    (
        "rate_limits",
        Treatment::Ignored,
        "the load shape is `benchmark:`'s",
    ),
    (
        "scaling",
        Treatment::Ignored,
        "autoscaling is off during the measurement: a `replicas` range runs a fixed count (checked as dstack checks it)",
    ),
];

/// What a dstack key became, for `plan`: `honored port (line 4): ...`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    pub key: String,
    /// Where the key is written (0 when it is not written, e.g. an inferred name).
    pub line: u64,
    pub honored: bool,
    pub text: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.honored { "honored" } else { "ignored" };
        if self.line > 0 {
            write!(f, "{what} {} (line {}): {}", self.key, self.line, self.text)
        } else {
            write!(f, "{what} {}: {}", self.key, self.text)
        }
    }
}
