//! Resolution of the hosts file: defaults, `~/.ssh/config`, jump-host references and clusters,
//! into [`HostsFile`], plus lookups by name with "did you mean" hints.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_saphyr::Spanned;

use super::error::HostsError;
use super::file::{ClusterSpec, FilePath, HostSpec, HostsFileSpec};
use super::kubernetes::KubernetesCluster;
use super::slurm::SlurmCluster;
use super::ssh_config::{SshConfig, expand_tilde, home_dir};
use crate::deploy::GpuVendor;
use crate::spec::Diagnostic;

/// How many hops a jump chain may have before it is called a loop.
const MAX_JUMPS: usize = 8;

/// The longest `address` taken: a DNS name has at most 253 characters.
const MAX_ADDRESS: usize = 253;

/// A loaded, resolved hosts file.
#[derive(Debug, Clone, Serialize)]
pub struct HostsFile {
    /// The file it came from.
    pub path: PathBuf,
    /// Host keys are checked against this file.
    pub known_hosts: PathBuf,
    hosts: BTreeMap<String, Host>,
    clusters: BTreeMap<String, Vec<String>>,
    /// Slurm clusters by name (names distinct from `clusters`').
    slurm: BTreeMap<String, SlurmCluster>,
    /// Kubernetes clusters by name (names distinct from the others').
    kubernetes: BTreeMap<String, KubernetesCluster>,
    /// `price_per_gpu_hour` of the hosts and Slurm clusters that set one, by name.
    prices: BTreeMap<String, f64>,
}

/// One host, ready to connect to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Host {
    /// Name in the hosts file (or the jump spec it came from).
    pub name: String,
    /// Host name or IP to connect to (after `~/.ssh/config` `HostName`).
    pub address: String,
    pub port: u16,
    pub user: String,
    /// Private keys to try, in order, before ssh-agent and the default keys.
    pub identity_files: Vec<PathBuf>,
    /// The host to hop through, itself resolved.
    pub jump: Option<Box<Host>>,
    pub gpus: Option<GpuDescription>,
    pub labels: BTreeMap<String, String>,
}

impl Host {
    /// A host reached directly, with the current user and default keys (tests, `--host ADDR`).
    pub fn direct(name: &str, address: &str, port: u16, user: &str) -> Self {
        Self {
            name: name.to_string(),
            address: address.to_string(),
            port,
            user: user.to_string(),
            identity_files: Vec::new(),
            jump: None,
            gpus: None,
            labels: BTreeMap::new(),
        }
    }

    /// `user@address:port` (and the jump chain), for logs and errors.
    pub fn describe(&self) -> String {
        let mut text = format!("{}@{}:{}", self.user, self.address, self.port);
        if let Some(jump) = &self.jump {
            text.push_str(&format!(" via {}", jump.describe()));
        }
        text
    }
}

/// `gpus: 8:H200`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuDescription {
    pub count: u32,
    pub model: String,
    pub vendor: GpuVendor,
}

impl GpuDescription {
    /// Parse `COUNT:MODEL` (or `MODEL:COUNT`); the vendor follows from the model name.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (a, b) = text
            .split_once(':')
            .ok_or_else(|| format!("expected COUNT:MODEL like `8:H200`, got `{text}`"))?;
        let (count, model) = match (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
            (Ok(count), _) => (count, b.trim()),
            (_, Ok(count)) => (count, a.trim()),
            _ => return Err(format!("expected COUNT:MODEL like `8:H200`, got `{text}`")),
        };
        if count == 0 || model.is_empty() {
            return Err(format!(
                "expected a positive count and a model, got `{text}`"
            ));
        }
        let upper = model.to_ascii_uppercase();
        let vendor =
            if upper.starts_with("MI") || upper.contains("RADEON") || upper.contains("INSTINCT") {
                GpuVendor::Amd
            } else {
                GpuVendor::Nvidia
            };
        Ok(Self {
            count,
            model: model.to_string(),
            vendor,
        })
    }
}

/// The default hosts file name, looked up in the working directory.
pub const DEFAULT_FILE: &str = "hosts.yaml";

/// The hosts file a command uses: `--hosts FILE` when given (it must exist), else
/// `./hosts.yaml` when it exists, else none (every task then runs locally).
pub fn discover(explicit: Option<&Path>) -> Result<Option<HostsFile>, HostsError> {
    match explicit {
        Some(path) => load(path).map(Some),
        None if Path::new(DEFAULT_FILE).exists() => load(Path::new(DEFAULT_FILE)).map(Some),
        None => Ok(None),
    }
}

/// Load `path`, honouring `~/.ssh/config`.
pub fn load(path: &Path) -> Result<HostsFile, HostsError> {
    load_with(path, &SshConfig::user_default())
}

/// Load `path` against a given SSH config (tests, `-F`).
pub fn load_with(path: &Path, ssh_config: &SshConfig) -> Result<HostsFile, HostsError> {
    let (text, spec) = super::read::read(path)?;
    Resolver {
        path,
        text: &text,
        spec: &spec,
        ssh_config,
    }
    .resolve()
}

struct Resolver<'a> {
    path: &'a Path,
    /// The file's content (for the snippet of an error).
    text: &'a str,
    spec: &'a HostsFileSpec,
    ssh_config: &'a SshConfig,
}

impl Resolver<'_> {
    fn resolve(&self) -> Result<HostsFile, HostsError> {
        let HostsFileSpec {
            known_hosts,
            hosts,
            clusters,
        } = self.spec;
        let mut resolved = BTreeMap::new();
        let mut prices = BTreeMap::new();
        for (name, spec) in hosts {
            resolved.insert(name.clone(), self.host(name, 0)?);
            if let Some(price) = &spec.price_per_gpu_hour {
                prices.insert(name.clone(), self.price(name, price)?);
            }
        }
        let mut groups = BTreeMap::new();
        let mut slurm = BTreeMap::new();
        let mut kubernetes = BTreeMap::new();
        let host_names: Vec<&String> = hosts.keys().collect();
        for (cluster, spec) in clusters {
            let members = match spec {
                ClusterSpec::Hosts(members) => members,
                ClusterSpec::Slurm(spec) => {
                    if let Some(price) = &spec.price_per_gpu_hour {
                        prices.insert(cluster.clone(), self.price(cluster, price)?);
                    }
                    let resolved =
                        super::slurm::resolve(self.path, self.text, cluster, spec, &host_names)?;
                    slurm.insert(cluster.clone(), resolved);
                    continue;
                }
                ClusterSpec::Kubernetes(spec) => {
                    if let Some(price) = &spec.price_per_gpu_hour {
                        prices.insert(cluster.clone(), self.price(cluster, price)?);
                    }
                    let resolved = super::kubernetes::resolve(self.path, self.text, cluster, spec)?;
                    kubernetes.insert(cluster.clone(), resolved);
                    continue;
                }
            };
            let mut names = Vec::new();
            for member in members {
                if !hosts.contains_key(&member.value) {
                    return Err(self.invalid(
                        member,
                        format!(
                            "cluster `{cluster}` names unknown host `{}`{}",
                            member.value,
                            did_you_mean(&member.value, hosts.keys())
                        ),
                        "a cluster lists names defined under `hosts:`",
                    ));
                }
                names.push(member.value.clone());
            }
            groups.insert(cluster.clone(), names);
        }
        let known_hosts = match known_hosts {
            Some(file) => {
                self.file_path(file, "known_hosts", "a known_hosts file")?;
                expand_tilde(&file.value.text)
            }
            None => home_dir()
                .unwrap_or_else(|| PathBuf::from("/"))
                .join(".ssh/known_hosts"),
        };
        Ok(HostsFile {
            path: self.path.to_path_buf(),
            known_hosts,
            hosts: resolved,
            clusters: groups,
            slurm,
            kubernetes,
            prices,
        })
    }

    fn host(&self, name: &str, depth: usize) -> Result<Host, HostsError> {
        let spec = &self.spec.hosts[name];
        let HostSpec {
            address,
            port,
            user,
            identity_file,
            jump,
            gpus,
            labels,
            price_per_gpu_hour: _,
        } = spec;
        if let Some(a) = address {
            self.address(name, a)?;
        }
        let port = match port {
            Some(p) if (1..=65_535).contains(&p.value) => Some(p.value as u16),
            Some(p) => {
                return Err(self.invalid(
                    p,
                    format!("`hosts.{name}.port` is {}, not a port", p.value),
                    "an SSH port is a whole number from 1 to 65535 (22 unless the host says otherwise)",
                ));
            }
            None => None,
        };
        if let Some(u) = user {
            self.not_empty(u, &u.value, &format!("hosts.{name}.user"), "a login user")?;
        }
        if let Some(f) = identity_file {
            self.file_path(
                f,
                &format!("hosts.{name}.identity_file"),
                "a private key file",
            )?;
        }
        let alias = address.as_ref().map_or(name, |a| a.value.as_str());
        let config = self.ssh_config.lookup(alias);
        let mut identity_files: Vec<PathBuf> = identity_file
            .iter()
            .map(|f| expand_tilde(&f.value.text))
            .collect();
        identity_files.extend(config.identity_files.iter().map(|f| expand_tilde(f)));
        let jump = match jump {
            Some(target) => {
                if !self.spec.hosts.contains_key(&target.value) {
                    return Err(self.invalid(
                        target,
                        format!(
                            "host `{name}` jumps through unknown host `{}`{}",
                            target.value,
                            did_you_mean(&target.value, self.spec.hosts.keys())
                        ),
                        "`jump` names another host of this file",
                    ));
                }
                if depth >= MAX_JUMPS {
                    return Err(self.invalid(
                        target,
                        format!("jump hosts of `{name}` form a loop (more than {MAX_JUMPS} hops)"),
                        "one host of the chain must reach its target directly (no `jump`)",
                    ));
                }
                Some(Box::new(self.host(&target.value, depth + 1)?))
            }
            None => match &config.proxy_jump {
                Some(proxy) => Some(Box::new(self.proxy_jump(proxy, depth + 1)?)),
                None => None,
            },
        };
        let gpus = match gpus {
            Some(text) => Some(GpuDescription::parse(&text.value).map_err(|message| {
                self.invalid(
                    text,
                    format!("bad `gpus` of `{name}`: {message}"),
                    "write the count and the model, `8:H200`",
                )
            })?),
            None => None,
        };
        Ok(Host {
            name: name.to_string(),
            address: config.host_name.unwrap_or_else(|| alias.to_string()),
            port: port.or(config.port).unwrap_or(22),
            user: user
                .as_ref()
                .map(|u| u.value.clone())
                .or(config.user)
                .unwrap_or_else(current_user),
            identity_files,
            jump,
            gpus,
            labels: labels.clone(),
        })
    }

    /// `ProxyJump` from the SSH config: a host of this file, or `[user@]alias[:port]`
    /// (only the first hop of a comma-separated list chain is followed per level).
    fn proxy_jump(&self, proxy: &str, depth: usize) -> Result<Host, HostsError> {
        let hops: Vec<&str> = proxy.split(',').map(str::trim).collect();
        let mut previous: Option<Box<Host>> = None;
        for hop in hops {
            if depth >= MAX_JUMPS {
                return Err(Diagnostic::file(
                    self.path,
                    format!("ProxyJump `{proxy}` in ~/.ssh/config forms a loop"),
                )
                .with_help("set `jump:` on the host in this file, or fix ~/.ssh/config")
                .into());
            }
            let mut host = if self.spec.hosts.contains_key(hop) {
                self.host(hop, depth)?
            } else {
                let (user, rest) = match hop.split_once('@') {
                    Some((u, r)) => (Some(u.to_string()), r),
                    None => (None, hop),
                };
                let (alias, port) = match rest.rsplit_once(':') {
                    Some((a, p)) if p.parse::<u16>().is_ok() => (a, p.parse().ok()),
                    _ => (rest, None),
                };
                let config = self.ssh_config.lookup(alias);
                let jump = match &config.proxy_jump {
                    Some(next) => Some(Box::new(self.proxy_jump(next, depth + 1)?)),
                    None => None,
                };
                Host {
                    name: hop.to_string(),
                    address: config.host_name.unwrap_or_else(|| alias.to_string()),
                    port: port.or(config.port).unwrap_or(22),
                    user: user.or(config.user).unwrap_or_else(current_user),
                    identity_files: config
                        .identity_files
                        .iter()
                        .map(|f| expand_tilde(f))
                        .collect(),
                    jump,
                    gpus: None,
                    labels: BTreeMap::new(),
                }
            };
            if host.jump.is_none() {
                host.jump = previous.take();
            }
            previous = Some(Box::new(host));
        }
        Ok(*previous.expect("ProxyJump has at least one hop"))
    }

    /// A `price_per_gpu_hour`: a finite number above zero.
    fn price(&self, name: &str, price: &Spanned<f64>) -> Result<f64, HostsError> {
        if price.value.is_finite() && price.value > 0.0 {
            Ok(price.value)
        } else {
            Err(self.invalid(
                price,
                format!(
                    "bad `price_per_gpu_hour` of `{name}`: {} (dollars per GPU-hour, above 0)",
                    price.value
                ),
                "write what one GPU costs per hour, in dollars (`2.5`), or leave the key out",
            ))
        }
    }

    /// An `address`: a host name, an IP address or a `~/.ssh/config` alias; never empty,
    /// never longer than a DNS name may be, never with spaces or control characters.
    fn address(&self, name: &str, address: &Spanned<String>) -> Result<(), HostsError> {
        let key = format!("hosts.{name}.address");
        let a = &address.value;
        let help = "write the host name or IP address to connect to (or a Host alias of ~/.ssh/config), or leave the key out to use the host's name";
        let problem = if a.trim().is_empty() {
            "is empty".to_string()
        } else if a.chars().count() > MAX_ADDRESS {
            format!(
                "is {} characters long; a host name has at most {MAX_ADDRESS}",
                a.chars().count()
            )
        } else if a.chars().any(|c| c.is_whitespace() || c.is_control()) {
            "has a space or a control character in it".to_string()
        } else {
            return Ok(());
        };
        Err(self.invalid(address, format!("`{key}` {problem}"), help))
    }

    /// A file path: a string (not a number or a boolean), not empty.
    fn file_path(&self, at: &Spanned<FilePath>, key: &str, what: &str) -> Result<(), HostsError> {
        let path = &at.value;
        if let Some(kind) = path.not_text {
            return Err(self.invalid(
                at,
                format!("`{key}` is `{}`, {kind}, not a file path", path.text),
                &format!(
                    "write the path of {what}; quote a file really named so: `\"{}\"`",
                    path.text
                ),
            ));
        }
        self.not_empty(at, &path.text, key, what)
    }

    /// A value that must not be empty (`key` names it, `what` says what it is).
    fn not_empty<T>(
        &self,
        at: &Spanned<T>,
        value: &str,
        key: &str,
        what: &str,
    ) -> Result<(), HostsError> {
        if value.trim().is_empty() {
            return Err(self.invalid(
                at,
                format!("`{key}` is empty"),
                &format!("write {what}, or leave the key out for the default"),
            ));
        }
        Ok(())
    }

    fn invalid<T>(&self, at: &Spanned<T>, message: String, help: &str) -> HostsError {
        Diagnostic::at(self.path, self.text, at.referenced, message)
            .with_help(help)
            .into()
    }
}

impl HostsFile {
    /// The `price_per_gpu_hour` a host or a Slurm cluster of this file sets (dollars), if
    /// any. A plain cluster (a list of hosts) has none of its own: its hosts carry it.
    pub fn price_per_gpu_hour(&self, host_or_cluster: &str) -> Option<f64> {
        self.prices.get(host_or_cluster).copied()
    }

    /// A host by name.
    pub fn host(&self, name: &str) -> Result<&Host, HostsError> {
        self.hosts.get(name).ok_or_else(|| HostsError::UnknownHost {
            path: self.path.clone(),
            name: name.to_string(),
            hint: did_you_mean(name, self.hosts.keys().chain(self.clusters.keys())),
        })
    }

    /// The hosts of a cluster, in the order the file lists them.
    pub fn cluster(&self, name: &str) -> Result<Vec<&Host>, HostsError> {
        let members = self
            .clusters
            .get(name)
            .ok_or_else(|| HostsError::UnknownCluster {
                path: self.path.clone(),
                name: name.to_string(),
                hint: did_you_mean(name, self.clusters.keys().chain(self.hosts.keys())),
            })?;
        Ok(members.iter().map(|m| &self.hosts[m]).collect())
    }

    /// A host or a cluster by name (a task's `hosts: [...]` entries): one host, or the cluster's.
    pub fn select(&self, name: &str) -> Result<Vec<&Host>, HostsError> {
        if let Some(host) = self.hosts.get(name) {
            return Ok(vec![host]);
        }
        if self.clusters.contains_key(name) {
            return self.cluster(name);
        }
        Err(HostsError::UnknownHost {
            path: self.path.clone(),
            name: name.to_string(),
            hint: did_you_mean(name, self.hosts.keys().chain(self.clusters.keys())),
        })
    }

    /// Every host, by name.
    pub fn hosts(&self) -> impl Iterator<Item = &Host> {
        self.hosts.values()
    }

    /// Every Slurm cluster, by name.
    pub fn slurm_clusters(&self) -> impl Iterator<Item = &SlurmCluster> {
        self.slurm.values()
    }

    /// A Slurm cluster by name.
    pub fn slurm(&self, name: &str) -> Option<&SlurmCluster> {
        self.slurm.get(name)
    }

    /// Every Kubernetes cluster, by name.
    pub fn kubernetes_clusters(&self) -> impl Iterator<Item = &KubernetesCluster> {
        self.kubernetes.values()
    }

    /// A Kubernetes cluster by name.
    pub fn kubernetes(&self, name: &str) -> Option<&KubernetesCluster> {
        self.kubernetes.get(name)
    }

    /// Every cluster: name and member host names.
    pub fn clusters(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.clusters
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
    }
}

/// ` (did you mean `x`?)` when a known name is close, else empty.
fn did_you_mean<'a>(name: &str, known: impl Iterator<Item = &'a String>) -> String {
    known
        .map(|k| (strsim::jaro_winkler(name, k), k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default()
}

/// `$USER`, else `$LOGNAME`, else `root`.
pub(crate) fn current_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "root".to_string())
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
