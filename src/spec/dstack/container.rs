//! dstack's container keys, run as dstack runs them: `docker: true` (its Docker-in-Docker
//! image, privileged, dockerd started first), `python`/`nvcc` without `image` (its base image
//! with a Python virtual environment made first), and `privileged`, `user`, `entrypoint` and
//! `shell`, which become `container:`'s keys. Whether the chosen provider can honor them is
//! the plan's check (a role without an image runs processes, which have none of them).

use serde_json::Value;
use serde_saphyr::{Location, Spanned};

use super::keys::Note;
use crate::spec::ContainerSpec;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::types::TaskSpec;

/// dstack's base image (`settings.DSTACK_DOCKER_BASE_IMAGE`).
const BASE_IMAGE: &str = "dstackai/base";
/// Its version and Ubuntu release as dstack 0.20 pins them (`version.docker_base_image`,
/// `docker_base_image_ubuntu_version`).
const BASE_IMAGE_VERSION: &str = "0.15";
const BASE_IMAGE_UBUNTU: &str = "24.04";
/// dstack's Docker-in-Docker image (`settings.DSTACK_DIND_IMAGE`).
const DIND_IMAGE: &str = "dstackai/dind";
/// The Python dstack's base image gets when only `nvcc` is written (dstack takes its own
/// client's version; a file does not say which that was).
pub(super) const DEFAULT_PYTHON: &str = "3.12";
/// The Python versions dstack accepts (`PythonVersion`).
const PYTHONS: &[&str] = &["3.9", "3.10", "3.11", "3.12", "3.13", "3.14"];

/// dstack's base image: `dstackai/base:0.15-base-ubuntu24.04`, `-devel-` with `nvcc`.
pub(super) fn base_image(nvcc: bool) -> String {
    let flavour = if nvcc { "devel" } else { "base" };
    format!("{BASE_IMAGE}:{BASE_IMAGE_VERSION}-{flavour}-ubuntu{BASE_IMAGE_UBUNTU}")
}

/// The commands dstack runs before a base image's own: a virtual environment of `python` in
/// /dstack/venv, activated for every later shell.
pub(super) fn venv_commands(python: &str) -> Vec<String> {
    vec![
        "eval $(echo 'export DSTACK_VENV_DIR=/dstack/venv' | sudo tee -a /dstack/profile)".into(),
        "sudo rm -rf $DSTACK_VENV_DIR".into(),
        "sudo mkdir $DSTACK_VENV_DIR".into(),
        "sudo chown $(id -u):$(id -g) $DSTACK_VENV_DIR".into(),
        format!("uv venv -q --prompt dstack -p {python} --seed $DSTACK_VENV_DIR"),
        "eval $(echo '. $DSTACK_VENV_DIR/bin/activate' | sudo tee -a /dstack/profile)".into(),
    ]
}

/// A value at `loc`.
pub(super) fn spanned<T>(value: T, loc: Location) -> Spanned<T> {
    Spanned {
        value,
        referenced: loc,
        defined: loc,
    }
}

/// Set (not `null`, not `false`).
fn asks(v: &Option<Spanned<Value>>) -> Option<&Spanned<Value>> {
    v.as_ref()
        .filter(|v| !matches!(v.value, Value::Null | Value::Bool(false)))
}

/// `key: true|false` as a bool.
pub(super) fn boolean(
    key: &str,
    v: &Spanned<Value>,
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<bool, Diagnostic> {
    v.value.as_bool().ok_or_else(|| {
        at(v.referenced, format!("`{key}` must be `true` or `false`"))
            .with_help(format!("write `{key}: true`"))
    })
}

/// A string (or, for `user`, a number such as a uid) as text.
fn text(
    key: &str,
    v: &Spanned<Value>,
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<String, Diagnostic> {
    match &v.value {
        Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        Value::Number(n) if key == "user" => Ok(n.to_string()),
        _ => Err(
            at(v.referenced, format!("`{key}` must be a non-empty string")).with_help(match key {
                "user" => "write `user: name`, `user: 1000` or `user: name:group`",
                "shell" => "write `shell: sh`, `shell: bash` or an absolute path",
                _ => "write the entrypoint as a shell would, e.g. `entrypoint: python3 -m server`",
            }),
        ),
    }
}

/// The container key `key` of `container:`, which a dstack key fills: an error when both
/// are written.
fn slot<'a, T>(
    slot: &'a mut Option<Spanned<T>>,
    key: &str,
    loc: Location,
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<&'a mut Option<Spanned<T>>, Diagnostic> {
    if let Some(written) = slot {
        return Err(at(
            loc,
            format!(
                "`{key}` is written twice: here and as `container.{key}` (line {})",
                written.referenced.line()
            ),
        )
        .with_help(format!("keep one of the two `{key}`")));
    }
    Ok(slot)
}

/// A `container:` that sets nothing.
pub(super) fn empty_container() -> ContainerSpec {
    ContainerSpec {
        network: None,
        ipc: None,
        gpu_ids: Vec::new(),
        privileged: None,
        user: None,
        entrypoint: None,
        shell: None,
    }
}

/// Turn dstack's container keys into `image`, `container:` and leading commands.
pub(super) fn container(
    spec: &mut TaskSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
) -> Result<(), Diagnostic> {
    let mut c = spec.container.take().unwrap_or_else(empty_container);
    privileged(spec, &mut c, at, notes)?;
    let mut leading: Vec<Spanned<String>> = Vec::new();
    dind(spec, &mut c, at, notes, &mut leading)?;
    base(spec, &mut c, at, notes, &mut leading)?;
    user_entrypoint_shell(spec, &mut c, at, notes)?;
    if !leading.is_empty() {
        leading.append(&mut spec.commands);
        spec.commands = leading;
    }
    let written = c.network.is_some()
        || c.ipc.is_some()
        || !c.gpu_ids.is_empty()
        || c.privileged.is_some()
        || c.user.is_some()
        || c.entrypoint.is_some()
        || c.shell.is_some();
    spec.container = written.then_some(c);
    Ok(())
}

/// An honored key that only a Docker container can honor.
fn honored(key: &str, v: &Spanned<Value>, text: &str) -> Note {
    plain(key, v, &format!("{text} (Docker only)"))
}

/// An honored key.
fn plain(key: &str, v: &Spanned<Value>, text: &str) -> Note {
    Note {
        key: key.into(),
        line: v.referenced.line(),
        honored: true,
        text: text.to_string(),
    }
}

/// `python: "3.12"` (or the number 3.12; 3.1 is 3.10, as dstack reads it).
pub(super) fn python_version(
    v: &Spanned<Value>,
    at: &impl Fn(Location, String) -> Diagnostic,
) -> Result<String, Diagnostic> {
    let version = match &v.value {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) if n.to_string() == "3.1" => "3.10".to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    };
    if PYTHONS.contains(&version.as_str()) {
        return Ok(version);
    }
    Err(at(
        v.referenced,
        format!("`python: {}` is not a Python dstack offers", v.value),
    )
    .with_help(format!(
        "write one of {}, quoted (`python: \"3.12\"`)",
        PYTHONS.join(", ")
    )))
}

/// `privileged: true|false`.
fn privileged(
    spec: &mut TaskSpec,
    c: &mut ContainerSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
) -> Result<(), Diagnostic> {
    if let Some(v) = spec.privileged.as_ref() {
        let on = boolean("privileged", v, at)?;
        if on {
            *slot(&mut c.privileged, "privileged", v.referenced, at)? =
                Some(spanned(true, v.referenced));
            notes.push(honored("privileged", v, "the containers run privileged"));
        } else {
            notes.push(plain(
                "privileged",
                v,
                "`false`: the containers run unprivileged",
            ));
        }
    }
    Ok(())
}

/// `docker: true`: dstack's Docker-in-Docker image, privileged, `start-dockerd` first.
fn dind(
    spec: &mut TaskSpec,
    c: &mut ContainerSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
    leading: &mut Vec<Spanned<String>>,
) -> Result<(), Diagnostic> {
    if let Some(v) = asks(&spec.docker) {
        boolean("docker", v, at)?;
        for (other, written) in [
            ("image", spec.image.as_ref().map(|i| i.referenced)),
            ("python", asks(&spec.python).map(|p| p.referenced)),
            ("nvcc", asks(&spec.nvcc).map(|p| p.referenced)),
        ] {
            if let Some(loc) = written {
                return Err(at(
                    loc,
                    format!("`{other}` and `docker: true` are mutually exclusive (as in dstack)"),
                )
                .with_help(format!(
                    "remove `{other}`: `docker: true` runs dstack's Docker-in-Docker image `{DIND_IMAGE}`"
                )));
            }
        }
        spec.image = Some(spanned(DIND_IMAGE.to_string(), v.referenced));
        // dstack: `docker` overrides `privileged`.
        c.privileged = Some(spanned(true, v.referenced));
        leading.push(spanned("start-dockerd".into(), v.referenced));
        notes.push(Note {
            key: "docker".into(),
            line: v.referenced.line(),
            honored: true,
            text: format!(
                "runs in `{DIND_IMAGE}`, privileged, with dockerd started first (`start-dockerd`), as dstack does; needs a Docker host"
            ),
        });
    } else if let Some(v) = spec.docker.as_ref() {
        boolean("docker", v, at)?;
        notes.push(plain("docker", v, "`false`: no Docker-in-Docker"));
    }
    Ok(())
}

/// `python`/`nvcc` without `image`: dstack's base image, bash, a venv made first.
fn base(
    spec: &mut TaskSpec,
    c: &mut ContainerSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
    leading: &mut Vec<Spanned<String>>,
) -> Result<(), Diagnostic> {
    let python = asks(&spec.python);
    let nvcc = match asks(&spec.nvcc) {
        Some(v) => boolean("nvcc", v, at)?.then_some(v),
        None => None,
    };
    if let Some(first) = python.or(nvcc) {
        if spec.image.is_some() {
            for (key, v) in [("python", python), ("nvcc", nvcc)] {
                if let Some(v) = v {
                    notes.push(Note {
                        key: key.into(),
                        line: v.referenced.line(),
                        honored: false,
                        text: "`image:` is set, so dstack's base image is not used".into(),
                    });
                }
            }
        } else {
            let version = match python {
                Some(v) => python_version(v, at)?,
                None => DEFAULT_PYTHON.to_string(),
            };
            let image = base_image(nvcc.is_some());
            spec.image = Some(spanned(image.clone(), first.referenced));
            if c.shell.is_none() && asks(&spec.shell).is_none() {
                c.shell = Some(spanned("/bin/bash".into(), first.referenced));
            }
            leading.extend(
                venv_commands(&version)
                    .into_iter()
                    .map(|cmd| spanned(cmd, first.referenced)),
            );
            let python_note = if python.is_some() {
                format!("Python {version}")
            } else {
                format!("Python {version} (dstack's client version; write `python:` to choose)")
            };
            notes.push(Note {
                key: if python.is_some() { "python" } else { "nvcc" }.into(),
                line: first.referenced.line(),
                honored: true,
                text: format!(
                    "no `image:`: runs in dstack's base image `{image}` with bash and a virtual environment of {python_note} in /dstack/venv, as dstack does; needs a Docker host"
                ),
            });
        }
    }
    Ok(())
}

/// `user`, `entrypoint` and `shell`.
fn user_entrypoint_shell(
    spec: &mut TaskSpec,
    c: &mut ContainerSpec,
    at: &impl Fn(Location, String) -> Diagnostic,
    notes: &mut Vec<Note>,
) -> Result<(), Diagnostic> {
    if let Some(v) = spec.user.as_ref() {
        let user = text("user", v, at)?;
        *slot(&mut c.user, "user", v.referenced, at)? = Some(spanned(user.clone(), v.referenced));
        notes.push(honored("user", v, &format!("the commands run as `{user}`")));
    }
    if let Some(v) = spec.entrypoint.as_ref() {
        let entrypoint = text("entrypoint", v, at)?;
        if let Some(dir) = &spec.working_dir {
            return Err(at(
                dir.referenced,
                "`working_dir` with `entrypoint` cannot be honored here: the commands are the entrypoint's arguments, so no `cd` can lead them".into(),
            )
            .with_help("change directory in the entrypoint, e.g. `entrypoint: sh -c 'cd /dir && exec server \"$@\"' sh`"));
        }
        *slot(&mut c.entrypoint, "entrypoint", v.referenced, at)? =
            Some(spanned(entrypoint.clone(), v.referenced));
        notes.push(honored(
            "entrypoint",
            v,
            &format!("replaces the image's entrypoint with `{entrypoint}`; the commands are its arguments"),
        ));
    }
    if let Some(v) = spec.shell.as_ref() {
        let shell = text("shell", v, at)?;
        if matches!(shell.trim(), "sh" | "/bin/sh") {
            notes.push(plain(
                "shell",
                v,
                "the commands run with `sh -c`, as everywhere here",
            ));
        } else {
            notes.push(honored(
                "shell",
                v,
                &format!("the commands run with `{shell} -c`"),
            ));
            *slot(&mut c.shell, "shell", v.referenced, at)? = Some(spanned(shell, v.referenced));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_images_follow_dstacks_name_and_tag_scheme() {
        assert_eq!(base_image(false), "dstackai/base:0.15-base-ubuntu24.04");
        assert_eq!(base_image(true), "dstackai/base:0.15-devel-ubuntu24.04");
    }

    #[test]
    fn the_venv_is_made_with_the_python_asked_for() {
        let commands = venv_commands("3.11");
        assert!(
            commands
                .iter()
                .any(|c| c.contains("uv venv") && c.contains("-p 3.11"))
        );
        assert!(commands.last().unwrap().contains("bin/activate"));
    }
}
