//! The hosts file as written: types that mirror the YAML. Resolution (defaults, SSH config,
//! references between hosts) is in `resolve`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

/// The whole hosts file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostsFileSpec {
    /// The known_hosts file host keys are checked against (default `~/.ssh/known_hosts`).
    #[serde(default)]
    pub known_hosts: Option<String>,
    /// Hosts by name.
    pub hosts: BTreeMap<String, HostSpec>,
    /// Clusters: a name and the names of its hosts.
    #[serde(default)]
    pub clusters: BTreeMap<String, Vec<Spanned<String>>>,
}

/// One host as written; every field but the name is optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Address or `~/.ssh/config` alias to connect to (default: the host's name).
    #[serde(default)]
    pub address: Option<String>,
    /// SSH port (default: from `~/.ssh/config`, else 22).
    #[serde(default)]
    pub port: Option<u16>,
    /// Login user (default: from `~/.ssh/config`, else the current user).
    #[serde(default)]
    pub user: Option<String>,
    /// Private key file (default: `IdentityFile` from `~/.ssh/config`, then ssh-agent, then
    /// `~/.ssh/id_ed25519`, `~/.ssh/id_ecdsa`, `~/.ssh/id_rsa`).
    #[serde(default)]
    pub identity_file: Option<String>,
    /// The host to hop through: the name of another host in this file.
    #[serde(default)]
    pub jump: Option<Spanned<String>>,
    /// The GPUs the host has, `COUNT:MODEL` (e.g. `8:H200`, `8:MI300X`).
    #[serde(default)]
    pub gpus: Option<Spanned<String>>,
    /// Free-form labels (rack, owner, ...), copied into the manifest.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}
