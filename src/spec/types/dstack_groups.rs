//! dstack's groups as written: `replicas:` as a count, a range or a list of replica groups,
//! the `groups:` of a task (node groups) or service (replica groups), and the `router:` that
//! fronts a service's replica groups. What they become (roles) is `spec::dstack`'s.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::deployment::ResourcesSpec;
use super::dstack_values::{Replicas, ReplicasVisitor, ScalingSpec};
use crate::spec::values::PortValue;

/// `replicas:`: a count or an autoscaling range of one server, or dstack's list of replica
/// groups (the form of its PD-disaggregated services; the same as a service's `groups:`).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ReplicasSpec {
    /// `2`, `1..4`, `..3`, `{min, max}`.
    Count(Replicas),
    /// `- count: 1..4\n  commands: [...]`, one entry per replica group.
    Groups(Vec<GroupSpec>),
}

impl ReplicasSpec {
    /// The count or range of a single server; `None` for replica groups.
    pub fn count(&self) -> Option<Replicas> {
        match self {
            ReplicasSpec::Count(r) => Some(*r),
            ReplicasSpec::Groups(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for ReplicasSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ReplicasSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a replica count (`2`), a range (`1..4`, {min, max}) or a list of replica groups",
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ReplicasSpec, E> {
                ReplicasVisitor.visit_u64(v).map(ReplicasSpec::Count)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ReplicasSpec, E> {
                ReplicasVisitor.visit_i64(v).map(ReplicasSpec::Count)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ReplicasSpec, E> {
                ReplicasVisitor.visit_str(v).map(ReplicasSpec::Count)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ReplicasSpec, A::Error> {
                ReplicasVisitor.visit_map(map).map(ReplicasSpec::Count)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ReplicasSpec, A::Error> {
                let mut groups = Vec::new();
                while let Some(g) = seq.next_element::<GroupSpec>()? {
                    groups.push(g);
                }
                Ok(ReplicasSpec::Groups(groups))
            }
        }
        d.deserialize_any(V)
    }
}

/// One entry of `groups:` or of `replicas:` as a list: dstack's `NodeGroup` (a task's:
/// `name`, `nodes`, `resources`, `commands`, `ports`) and `ReplicaGroup` (a service's:
/// `name`, `count`, `scaling`, `resources`, `commands`, `image`, `python`, `nvcc`, `docker`,
/// `privileged`, `router`, and the cloud keys `spot_policy`, `reservation`). Which keys a
/// group may have depends on the file's `type`; `spec::dstack` checks it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// The group's name (`^[a-z0-9][a-z0-9-]{0,39}$`); default: its position, `0`, `1`, ...
    #[serde(default)]
    pub name: Option<Spanned<String>>,
    /// Nodes of a node group (default 1).
    #[serde(default)]
    pub nodes: Option<Spanned<u32>>,
    /// Replicas of a replica group: a count or a range with `scaling`.
    #[serde(default)]
    pub count: Option<Spanned<Replicas>>,
    /// dstack's other spelling of `count`.
    #[serde(default)]
    pub replicas: Option<Spanned<Replicas>>,
    /// Autoscaling of a replica group whose count is a range.
    #[serde(default)]
    pub scaling: Option<Spanned<ScalingSpec>>,
    /// The group's hardware (it does not inherit the top-level `resources`).
    #[serde(default)]
    pub resources: Option<ResourcesSpec>,
    /// The group's commands.
    #[serde(default)]
    pub commands: Vec<Spanned<String>>,
    /// Ports of a node group; the first is its server port.
    #[serde(default)]
    pub ports: Vec<Spanned<PortValue>>,
    /// The image of a replica group.
    #[serde(default)]
    pub image: Option<Spanned<String>>,
    /// The Python of dstack's base image for a replica group without `image`.
    #[serde(default)]
    pub python: Option<Spanned<serde_json::Value>>,
    /// dstack's base image with NVCC for a replica group without `image`.
    #[serde(default)]
    pub nvcc: Option<Spanned<serde_json::Value>>,
    /// Docker-in-Docker for a replica group.
    #[serde(default)]
    pub docker: Option<Spanned<serde_json::Value>>,
    /// Privileged containers for a replica group.
    #[serde(default)]
    pub privileged: Option<Spanned<serde_json::Value>>,
    /// This group runs the service's router.
    #[serde(default)]
    pub router: Option<Spanned<RouterSpec>>,
    /// Spot or on-demand instances for the group (cloud provisioning).
    #[serde(default)]
    pub spot_policy: Option<Spanned<serde_json::Value>>,
    /// A cloud reservation for the group.
    #[serde(default)]
    pub reservation: Option<Spanned<serde_json::Value>>,
}

/// `router:` of a replica group (dstack's `ReplicaGroupRouterConfig`: `type`), or of the
/// whole service, as dstack 0.20.10 to 0.20.x wrote it (`type: sglang`, `policy`,
/// `pd_disaggregation`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouterSpec {
    /// `sglang` (default) or `dynamo`.
    #[serde(rename = "type", default)]
    pub kind: Option<Spanned<RouterKind>>,
    /// The SGLang router's policy: `random`, `round_robin`, `cache_aware` (default),
    /// `power_of_two` (service-level router only).
    #[serde(default)]
    pub policy: Option<Spanned<String>>,
    /// Prefill/decode disaggregation (service-level router only).
    #[serde(default)]
    pub pd_disaggregation: Option<Spanned<bool>>,
}

/// The router implementations dstack runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RouterKind {
    /// The SGLang router (SGLang Model Gateway); dstack registers the workers with it.
    Sglang,
    /// NVIDIA Dynamo's frontend, which discovers the workers itself.
    Dynamo,
}
