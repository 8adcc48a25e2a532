//! Kubernetes pods' addresses in the commands of an instance about to start. A pod's IP is
//! known only once the pod runs, so the plan renders every pod address as a token
//! ([`KubePlace::address_token`]); before an instance starts, its own token becomes
//! [`KubePlace::ADDRESS`] (the kubelet expands it to the pod's IP) and the tokens of instances
//! already started become their IPs: a gang's ranks get their leader's, a router its
//! workers'. A token of an instance that has not started yet is an error that says so. A
//! started pod's URL, for roles registered with a router, is its IP's (`url_of`).
//!
//! The manifest records the commands with the same replacement (`processes::records`).
//!
//! Owns: the replacement. Does not own: the start order (`gang`), launching (`instances`).

use std::borrow::Cow;

use crate::plan::{EnvValue, InstancePlan, KubePlace, RolePlan};
use crate::provider::Instance;

/// Why an instance's commands name an address that is not known yet.
#[derive(Debug, thiserror::Error)]
#[error(
    "{key} names the address of pod `{named}`, which has not started yet: on Kubernetes an \
     instance can name only its own address and those of instances started before it (a \
     gang's leader, a router's workers)"
)]
pub(super) struct Unplaced {
    /// `<role>-<index>` of the instance about to start.
    pub key: String,
    /// `<role>-<index>` of the instance it names.
    pub named: String,
}

const OPEN: &str = "<k8s:";

/// `planned` with every pod address token replaced; borrowed unchanged when it has none.
pub(super) fn place<'p>(
    role: &RolePlan,
    planned: &'p InstancePlan,
    started: &[(String, Box<dyn Instance>)],
) -> Result<Cow<'p, InstancePlan>, Unplaced> {
    let texts = planned
        .commands
        .iter()
        .map(String::as_str)
        .chain(planned.env.iter().map(|e| match &e.value {
            EnvValue::Plain(v) => v.as_str(),
            EnvValue::Secret { value, .. } => value.as_str(),
        }));
    if !texts.into_iter().any(|t| t.contains(OPEN)) {
        return Ok(Cow::Borrowed(planned));
    }
    let own = format!("{}-{}", role.name, planned.index);
    let ip = |key: &str| {
        started
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, i)| host_of(&i.peer_url()))
    };
    let mut out = planned.clone();
    for text in out.commands.iter_mut() {
        *text = replace(text, &own, &ip)?;
    }
    for var in &mut out.env {
        match &mut var.value {
            EnvValue::Plain(v) => *v = replace(v, &own, &ip)?,
            EnvValue::Secret { value, .. } => *value = replace(value, &own, &ip)?,
        }
    }
    Ok(Cow::Owned(out))
}

/// `text` with its tokens replaced, for instance `own`; `ip` gives a started instance's IP
/// by its key.
fn replace(text: &str, own: &str, ip: &dyn Fn(&str) -> Option<String>) -> Result<String, Unplaced> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let Some(end) = after.find('>') else {
            out.push_str(&rest[at..]);
            return Ok(out);
        };
        let key = &after[..end];
        if key == own {
            out.push_str(KubePlace::ADDRESS);
        } else {
            let Some(ip) = ip(key) else {
                return Err(Unplaced {
                    key: own.to_string(),
                    named: key.to_string(),
                });
            };
            out.push_str(&ip);
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The URL other roles reach a started instance at, `http://ADDRESS:PORT`: its planned
/// `address`, or, for a pod (whose planned address is only a token), its IP from `base_url`,
/// the URL orchestrate reaches the launched instance at.
pub(super) fn url_of(address: &str, port: u16, base_url: &str) -> String {
    if !address.starts_with(OPEN) {
        return format!("http://{address}:{port}");
    }
    let ip = host_of(base_url);
    if ip.contains(':') {
        format!("http://[{ip}]:{port}")
    } else {
        format!("http://{ip}:{port}")
    }
}

/// The host of `http://HOST:PORT` (brackets of an IPv6 host removed).
fn host_of(url: &str) -> String {
    let authority = url.split_once("://").map_or(url, |(_, a)| a);
    let authority = authority.split('/').next().unwrap_or(authority);
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

#[cfg(test)]
#[path = "pod_addresses_tests.rs"]
mod tests;
