//! `container:` as the providers take it (defaults where the task says nothing, the task's
//! other dstack `ports` published too), and the check that each role's provider can honor
//! the keys that only a container has (privileged, user, entrypoint, shell): a role without
//! an image runs processes, and a Slurm cluster's pyxis containers take none of them.

use serde_saphyr::Location;

use crate::deploy::ContainerOptions;
use crate::plan::render::Builder;
use crate::plan::role::Placement;
use crate::plan::types::{HostPlan, PlanError};
use crate::spec::values::PortValue;
use crate::spec::{ContainerSpec, TASK_SOURCE, TaskSpec};

impl Builder<'_> {
    /// The task's container options, with `shell` as a path and `entrypoint` split into words.
    pub(super) fn container_options(&self, spec: &TaskSpec) -> Result<ContainerOptions, PlanError> {
        let server = spec.port.as_ref().map(|p| p.value);
        let ports: Vec<u16> = spec
            .ports
            .iter()
            .filter_map(|p| match p.value {
                PortValue::Fixed(n) if Some(p.value) != server => Some(n),
                _ => None,
            })
            .collect();
        let Some(c) = spec.container.as_ref() else {
            return Ok(ContainerOptions {
                ports,
                ..ContainerOptions::default()
            });
        };
        let shell = match &c.shell {
            None => None,
            Some(s) => match s.value.trim() {
                "sh" | "/bin/sh" => None,
                "bash" => Some("/bin/bash".to_string()),
                path if path.starts_with('/') => Some(path.to_string()),
                other => {
                    return Err(self
                        .at(
                            TASK_SOURCE,
                            s.referenced,
                            format!(
                                "`shell: {other}` is neither `sh`, `bash` nor an absolute path"
                            ),
                        )
                        .with_help("write `shell: bash` or the shell's path, e.g. `/usr/bin/zsh`")
                        .into());
                }
            },
        };
        let entrypoint = match &c.entrypoint {
            None => None,
            Some(e) => Some(split_words(&e.value).map_err(|why| {
                PlanError::from(
                    self.at(TASK_SOURCE, e.referenced, format!("`entrypoint`: {why}"))
                        .with_help(
                            "quote as a shell would, e.g. `entrypoint: sh -c 'exec server'`",
                        ),
                )
            })?),
        };
        Ok(ContainerOptions {
            network: c.network.unwrap_or_default(),
            ipc: c.ipc.unwrap_or_default(),
            gpu_ids: c.gpu_ids.clone(),
            ports,
            privileged: c.privileged.as_ref().is_some_and(|p| p.value),
            user: c.user.as_ref().map(|u| u.value.clone()),
            entrypoint,
            shell,
        })
    }

    /// An error at the first container-only key of `spec` when role `role` cannot honor it:
    /// it has no image (processes), or one of its instances is on a Slurm node.
    pub(super) fn check_container_keys(
        &self,
        spec: &TaskSpec,
        role: &str,
        image: Option<&str>,
        places: &[Placement],
    ) -> Result<(), PlanError> {
        let Some((key, loc)) = spec.container.as_ref().and_then(container_only) else {
            return Ok(());
        };
        if image.is_none() {
            let host = match places.first().map(|p| &p.host) {
                Some(HostPlan::Remote { name, .. }) => format!("host `{name}`"),
                Some(HostPlan::Slurm(s)) => format!("Slurm cluster `{}`", s.cluster.name),
                Some(HostPlan::Kubernetes(k)) => format!("Kubernetes cluster `{}`", k.cluster.name),
                _ => "this machine".to_string(),
            };
            return Err(self
                .at(
                    TASK_SOURCE,
                    loc,
                    format!(
                        "`{key}` needs a container, but role `{role}` has no `image`: its commands run as processes on {host}"
                    ),
                )
                .with_help(format!("add `image:` to run it in Docker, or remove `{key}`"))
                .into());
        }
        if let Some(HostPlan::Slurm(s)) = places
            .iter()
            .map(|p| &p.host)
            .find(|h| matches!(h, HostPlan::Slurm(_)))
        {
            return Err(self
                .at(
                    TASK_SOURCE,
                    loc,
                    format!(
                        "`{key}` cannot be honored on Slurm cluster `{}`: its containers run through pyxis, which has no such setting",
                        s.cluster.name
                    ),
                )
                .with_help(format!(
                    "run role `{role}` on hosts of the hosts file (Docker), or remove `{key}`"
                ))
                .into());
        }
        Ok(())
    }
}

/// The first key written that only a container can honor, and where.
fn container_only(c: &ContainerSpec) -> Option<(&'static str, Location)> {
    let shell = c
        .shell
        .as_ref()
        .filter(|s| !matches!(s.value.trim(), "sh" | "/bin/sh"));
    [
        (
            "privileged",
            c.privileged
                .as_ref()
                .filter(|p| p.value)
                .map(|p| p.referenced),
        ),
        ("user", c.user.as_ref().map(|u| u.referenced)),
        ("entrypoint", c.entrypoint.as_ref().map(|e| e.referenced)),
        ("shell", shell.map(|s| s.referenced)),
    ]
    .into_iter()
    .find_map(|(key, loc)| loc.map(|l| (key, l)))
}

/// `text` split into words as a POSIX shell would: blanks separate, single quotes keep
/// everything, double quotes keep all but `\"` and `\\`, a backslash outside quotes keeps
/// the next character.
fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("a single quote is not closed".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("a double quote is not closed".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("a double quote is not closed".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err("it ends with a lone backslash".into()),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("it is empty".into());
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::split_words;

    #[test]
    fn words_split_as_a_shell_splits_them() {
        assert_eq!(
            split_words(r#"python3 -m  srv --name 'a b' "c \"d\"" e\ f ''"#).unwrap(),
            [
                "python3", "-m", "srv", "--name", "a b", "c \"d\"", "e f", ""
            ]
        );
        assert_eq!(split_words("/bin/bash").unwrap(), ["/bin/bash"]);
        assert!(
            split_words("sh -c 'oops")
                .unwrap_err()
                .contains("single quote")
        );
        assert!(split_words("  ").unwrap_err().contains("empty"));
    }
}
