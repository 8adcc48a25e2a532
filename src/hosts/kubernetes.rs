//! Kubernetes clusters of the hosts file (`clusters: {k8s: {kubernetes: {...}}}`): the keys as
//! written and resolved, checked against Kubernetes' own rules for names, label keys and
//! quantities so that a typo is an error naming the hosts-file line, not an API rejection
//! mid-run. What `crate::provider::kubernetes` needs to place pods on the cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::HostsError;
use super::file::{KubernetesSpec, TolerationSpec};
use super::ssh_config::expand_tilde;
use crate::spec::Diagnostic;

/// The GPU resource asked for when `gpu_resource` is not given.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";

/// The namespace used when `namespace` is not given.
pub const DEFAULT_NAMESPACE: &str = "default";

/// One toleration, checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Toleration {
    pub key: Option<String>,
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
    pub toleration_seconds: Option<i64>,
}

/// One Kubernetes cluster, ready to use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KubernetesCluster {
    /// The cluster's name in the hosts file (what a task's `hosts:` names).
    pub name: String,
    /// `None`: the usual kubeconfig resolution (`KUBECONFIG`, `~/.kube/config`, in-cluster).
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: String,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub gpu_resource: String,
    /// Extra resources by name, as quantities.
    pub resources: BTreeMap<String, String>,
    pub service_account: Option<String>,
    pub image_pull_secrets: Vec<String>,
    pub host_network: bool,
    /// `Always`, `IfNotPresent` or `Never`.
    pub image_pull_policy: String,
    /// `file:line:col` of the cluster's `kubernetes:` values, by key (errors at run time,
    /// e.g. a namespace that does not exist, point there); the cluster's first key otherwise.
    pub places: BTreeMap<String, String>,
}

impl KubernetesCluster {
    /// The hosts-file key of a field, `clusters.<name>.kubernetes.<field>`.
    pub fn key(&self, field: &str) -> String {
        format!("clusters.{}.kubernetes.{field}", self.name)
    }

    /// `file:line:col` of a field, when the file gives it.
    pub fn at(&self, field: &str) -> Option<&str> {
        self.places.get(field).map(String::as_str)
    }
}

/// A DNS-1123 label: lower-case alphanumerics and `-`, at most 63, alphanumeric at both ends
/// (namespaces).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 (names of most objects).
pub(super) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A qualified name (`prefix/name` or `name`): label keys and resource names.
pub(super) fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    name_ok && prefix.is_none_or(is_dns_subdomain)
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_`, `.`, alphanumeric at the ends.
pub(super) fn is_label_value(s: &str) -> bool {
    s.is_empty() || (is_qualified_name(s) && !s.contains('/'))
}

/// A quantity Kubernetes takes: a decimal number with an optional suffix (`m`, `k`, `M`, `G`,
/// `T`, `P`, `E`, `Ki`..`Ei`, or an exponent `e3`).
pub(super) fn is_quantity(s: &str) -> bool {
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let number_ok = !number.is_empty()
        && number != "."
        && number.matches('.').count() <= 1
        && number.bytes().any(|b| b.is_ascii_digit());
    let suffix_ok = matches!(
        suffix,
        "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"
    ) || (suffix.len() > 1
        && (suffix.starts_with('e') || suffix.starts_with('E'))
        && suffix[1..].bytes().all(|b| b.is_ascii_digit()));
    number_ok && suffix_ok
}

/// The place of a cluster's keys, for errors that name the key and the line.
struct Checker<'a> {
    path: &'a Path,
    text: &'a str,
    name: &'a str,
}

impl Checker<'_> {
    fn at(&self, loc: serde_saphyr::Location) -> String {
        format!("{}:{}:{}", self.path.display(), loc.line(), loc.column())
    }

    fn invalid(&self, loc: serde_saphyr::Location, message: String, help: &str) -> HostsError {
        HostsError::from(Diagnostic::at(self.path, self.text, loc, message).with_help(help))
    }

    fn key(&self, field: &str) -> String {
        format!("clusters.{}.kubernetes.{field}", self.name)
    }
}

/// Resolve `spec` (cluster `name` of the file at `path`, whose content is `text`).
pub(super) fn resolve(
    path: &Path,
    text: &str,
    name: &str,
    spec: &KubernetesSpec,
) -> Result<KubernetesCluster, HostsError> {
    let chk = Checker { path, text, name };
    let mut places = BTreeMap::new();
    let kubeconfig = match &spec.kubeconfig {
        None => None,
        Some(file) => {
            if let Some(what) = file.value.not_text {
                return Err(chk.invalid(
                    file.referenced,
                    format!("`{}` is {what}, not a file path", chk.key("kubeconfig")),
                    "give the kubeconfig file's path, or leave the key out for KUBECONFIG or ~/.kube/config",
                ));
            }
            if file.value.text.trim().is_empty() {
                return Err(chk.invalid(
                    file.referenced,
                    format!("`{}` is empty", chk.key("kubeconfig")),
                    "give the kubeconfig file's path, or leave the key out for KUBECONFIG or ~/.kube/config",
                ));
            }
            places.insert("kubeconfig".to_string(), chk.at(file.referenced));
            Some(expand_tilde(&file.value.text))
        }
    };
    let context = match &spec.context {
        Some(c) if c.value.trim().is_empty() => {
            return Err(chk.invalid(
                c.referenced,
                format!("`{}` is empty", chk.key("context")),
                "name a context of the kubeconfig (`kubectl config get-contexts`), or leave the key out for its current context",
            ));
        }
        Some(c) => {
            places.insert("context".to_string(), chk.at(c.referenced));
            Some(c.value.clone())
        }
        None => None,
    };
    let namespace = match &spec.namespace {
        Some(ns) if !is_dns_label(&ns.value) => {
            return Err(chk.invalid(
                ns.referenced,
                format!(
                    "`{}` is `{}`, which is not a namespace name",
                    chk.key("namespace"),
                    ns.value
                ),
                "a namespace is at most 63 lower-case letters, digits and `-`, starting and ending with a letter or digit",
            ));
        }
        Some(ns) => {
            places.insert("namespace".to_string(), chk.at(ns.referenced));
            ns.value.clone()
        }
        None => DEFAULT_NAMESPACE.to_string(),
    };
    let (node_selector, tolerations, gpu_resource) = scheduling(&chk, spec, &mut places)?;
    let (resources, service_account, image_pull_secrets, image_pull_policy) =
        pod_settings(&chk, spec)?;
    Ok(KubernetesCluster {
        name: name.to_string(),
        kubeconfig,
        context,
        namespace,
        node_selector,
        tolerations,
        gpu_resource,
        resources,
        service_account,
        image_pull_secrets,
        host_network: spec.host_network.as_ref().is_some_and(|h| h.value),
        image_pull_policy,
        places,
    })
}

/// `node_selector`, `tolerations` and `gpu_resource`, checked.
fn scheduling(
    chk: &Checker<'_>,
    spec: &KubernetesSpec,
    places: &mut BTreeMap<String, String>,
) -> Result<Scheduling, HostsError> {
    let mut node_selector = BTreeMap::new();
    for (label, value) in &spec.node_selector {
        if !is_qualified_name(label) {
            return Err(chk.invalid(
                value.referenced,
                format!(
                    "`{}` has `{label}`, which is not a label key",
                    chk.key("node_selector")
                ),
                "a label key is `name` or `prefix/name` (e.g. `nvidia.com/gpu.product`)",
            ));
        }
        if !is_label_value(&value.value) {
            return Err(chk.invalid(
                value.referenced,
                format!(
                    "`{}.{label}` is `{}`, which is not a label value",
                    chk.key("node_selector"),
                    value.value
                ),
                "a label value is at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit",
            ));
        }
        places
            .entry("node_selector".to_string())
            .or_insert_with(|| chk.at(value.referenced));
        node_selector.insert(label.clone(), value.value.clone());
    }
    let mut tolerations = Vec::new();
    for t in &spec.tolerations {
        tolerations.push(toleration(&t.value).map_err(|(message, help)| {
            chk.invalid(
                t.referenced,
                format!("a toleration of `{}` {message}", chk.key("tolerations")),
                help,
            )
        })?);
    }
    let gpu_resource = match &spec.gpu_resource {
        Some(g) if !g.value.contains('/') || !is_qualified_name(&g.value) => {
            return Err(chk.invalid(
                g.referenced,
                format!(
                    "`{}` is `{}`, which is not an extended resource name",
                    chk.key("gpu_resource"),
                    g.value
                ),
                "write the device plugin's resource, `domain/name`: `nvidia.com/gpu` or `amd.com/gpu`",
            ));
        }
        Some(g) => {
            places.insert("gpu_resource".to_string(), chk.at(g.referenced));
            g.value.clone()
        }
        None => DEFAULT_GPU_RESOURCE.to_string(),
    };
    Ok((node_selector, tolerations, gpu_resource))
}

/// Node selector, tolerations, GPU resource.
type Scheduling = (BTreeMap<String, String>, Vec<Toleration>, String);

/// Extra resources, service account, image pull secrets, pull policy.
type PodSettings = (
    BTreeMap<String, String>,
    Option<String>,
    Vec<String>,
    String,
);

/// What every pod carries: extra `resources`, `service_account`, `image_pull_secrets`,
/// `image_pull_policy`, checked.
fn pod_settings(chk: &Checker<'_>, spec: &KubernetesSpec) -> Result<PodSettings, HostsError> {
    let mut resources = BTreeMap::new();
    for (resource, quantity) in &spec.resources {
        if !is_qualified_name(resource) {
            return Err(chk.invalid(
                quantity.referenced,
                format!(
                    "`{}` has `{resource}`, which is not a resource name",
                    chk.key("resources")
                ),
                "a resource is `name` or `domain/name` (e.g. `rdma/hca`)",
            ));
        }
        if !is_quantity(&quantity.value.0) {
            return Err(chk.invalid(
                quantity.referenced,
                format!(
                    "`{}.{resource}` is `{}`, which is not a quantity",
                    chk.key("resources"),
                    quantity.value.0
                ),
                "write a number with an optional suffix: `1`, `500m`, `16Gi`",
            ));
        }
        resources.insert(resource.clone(), quantity.value.0.clone());
    }
    let service_account = match &spec.service_account {
        Some(sa) if !is_dns_subdomain(&sa.value) => {
            return Err(chk.invalid(
                sa.referenced,
                format!(
                    "`{}` is `{}`, which is not a service account name",
                    chk.key("service_account"),
                    sa.value
                ),
                "a service account name is lower-case letters, digits, `-` and `.`",
            ));
        }
        Some(sa) => Some(sa.value.clone()),
        None => None,
    };
    let mut image_pull_secrets = Vec::new();
    for secret in &spec.image_pull_secrets {
        if !is_dns_subdomain(&secret.value) {
            return Err(chk.invalid(
                secret.referenced,
                format!(
                    "`{}` has `{}`, which is not a Secret name",
                    chk.key("image_pull_secrets"),
                    secret.value
                ),
                "name Secrets of the namespace (`kubectl get secrets`): lower-case letters, digits, `-` and `.`",
            ));
        }
        image_pull_secrets.push(secret.value.clone());
    }
    let image_pull_policy = match &spec.image_pull_policy {
        Some(p) if !matches!(p.value.as_str(), "Always" | "IfNotPresent" | "Never") => {
            return Err(chk.invalid(
                p.referenced,
                format!(
                    "`{}` is `{}`: expected `Always`, `IfNotPresent` or `Never`",
                    chk.key("image_pull_policy"),
                    p.value
                ),
                "`Never` runs only images already on the node; leave the key out for `IfNotPresent`",
            ));
        }
        Some(p) => p.value.clone(),
        None => "IfNotPresent".to_string(),
    };
    Ok((
        resources,
        service_account,
        image_pull_secrets,
        image_pull_policy,
    ))
}

/// A toleration checked as the API server would, or `(message, help)`.
fn toleration(spec: &TolerationSpec) -> Result<Toleration, (String, &'static str)> {
    let operator = spec.operator.as_deref();
    if !matches!(operator, None | Some("Equal") | Some("Exists")) {
        return Err((
            format!("has operator `{}`", operator.unwrap_or_default()),
            "write `operator: Equal` (the default) or `operator: Exists`",
        ));
    }
    if operator == Some("Exists") && spec.value.as_deref().is_some_and(|v| !v.is_empty()) {
        return Err((
            "has a value with operator `Exists`".to_string(),
            "`Exists` matches any value: leave `value` out, or write `operator: Equal`",
        ));
    }
    if let Some(key) = spec.key.as_deref().filter(|k| !is_qualified_name(k)) {
        return Err((
            format!("has key `{key}`, which is not a taint key"),
            "a taint key is `name` or `prefix/name` (e.g. `nvidia.com/gpu`)",
        ));
    }
    let effect = spec.effect.as_deref();
    if !matches!(
        effect,
        None | Some("") | Some("NoSchedule") | Some("PreferNoSchedule") | Some("NoExecute")
    ) {
        return Err((
            format!("has effect `{}`", effect.unwrap_or_default()),
            "write `NoSchedule`, `PreferNoSchedule` or `NoExecute`, or leave `effect` out for all",
        ));
    }
    Ok(Toleration {
        key: spec.key.clone(),
        operator: spec.operator.clone(),
        value: spec.value.clone(),
        effect: spec.effect.clone(),
        toleration_seconds: spec.toleration_seconds,
    })
}

#[cfg(test)]
#[path = "kubernetes_tests.rs"]
mod tests;
