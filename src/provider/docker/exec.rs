//! `Instance::exec` for containers: the command runs through the engine's exec API (so it
//! works for a remote engine reached through a tunnel too), its output streamed as it comes.
//! The engine cannot kill an exec, so the command's shell writes its pid to a file first and
//! a second exec kills that process and its descendants (walking /proc with POSIX sh only,
//! as minimal images have no `pkill`): when the command is abandoned (the guard's drop:
//! timeout, Ctrl-C) and when it ends (nothing it started in the background outlives it).
//! Removing the container at the end of the deployment is the backstop.

use bollard::Docker;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_util::StreamExt;

use crate::provider::exec::Capture;
use crate::provider::{ExecOutput, ExecRequest, ExitInfo, ProviderError};

/// Candidate directories of the pid file: minimal images may lack /tmp.
const PID_DIRS: &str = r#"/tmp /var/tmp /dev/shm """#;

/// Records its pid in the file named "$1" (in the first writable of [`PID_DIRS`]), then
/// becomes the command ("$2").
fn wrapper() -> String {
    format!(
        r#"for d in {PID_DIRS}; do {{ echo $$ > "$d/$1"; }} 2>/dev/null && break; done; exec /bin/sh -c "$2""#
    )
}

/// Kills the process whose pid is in the file named "$1" and all its descendants.
fn kill_tree_script() -> String {
    format!(
        r#"p=; for d in {PID_DIRS}; do if [ -s "$d/$1" ]; then read -r p < "$d/$1"; f="$d/$1"; break; fi; done
[ -n "$p" ] || exit 0
kids() {{ for s in /proc/[0-9]*/stat; do read -r a b c pp r 2>/dev/null < "$s" || continue; [ "$pp" = "$1" ] && echo "$a"; done; }}
tree() {{ echo "$1"; for k in $(kids "$1"); do tree "$k"; done; }}
kill -9 $(tree "$p") 2>/dev/null
: > "$f""#
    )
}

fn docker_error(action: &'static str, container: &str, e: bollard::errors::Error) -> ProviderError {
    ProviderError::ContainerExec {
        action,
        container: container.to_string(),
        source: e,
    }
}

/// Kills the exec's process tree when dropped unless disarmed.
struct TreeGuard {
    docker: Docker,
    container: String,
    pidfile: String,
    armed: bool,
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (docker, container, pidfile) = (
            self.docker.clone(),
            self.container.clone(),
            self.pidfile.clone(),
        );
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    if let Err(e) = kill_tree(&docker, &container, &pidfile).await {
                        tracing::warn!("could not kill an abandoned command: {e}");
                    }
                });
            }
            Err(_) => tracing::warn!(
                "an abandoned command in container {container} is left to the container's removal"
            ),
        }
    }
}

async fn kill_tree(docker: &Docker, container: &str, pidfile: &str) -> Result<(), ProviderError> {
    let exec = docker
        .create_exec(
            container,
            ExecConfig {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    kill_tree_script(),
                    "sh".into(),
                    pidfile.into(),
                ]),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| docker_error("create the kill exec", container, e))?;
    if let StartExecResults::Attached { mut output, .. } =
        docker
            .start_exec(&exec.id, None)
            .await
            .map_err(|e| docker_error("start the kill exec", container, e))?
    {
        while let Some(item) = output.next().await {
            if item.is_err() {
                break;
            }
        }
    }
    Ok(())
}

/// Run `request.command` in `container`.
pub(crate) async fn exec_in_container(
    docker: &Docker,
    container: &str,
    request: ExecRequest,
) -> Result<ExecOutput, ProviderError> {
    let pidfile = format!(
        ".orchestrate-exec-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    );
    let env: Vec<String> = request
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let exec = docker
        .create_exec(
            container,
            ExecConfig {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                env: Some(env),
                cmd: Some(vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    wrapper(),
                    "sh".into(),
                    pidfile.clone(),
                    request.command.clone(),
                ]),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| docker_error("create an exec", container, e))?;
    let mut guard = TreeGuard {
        docker: docker.clone(),
        container: container.to_string(),
        pidfile: pidfile.clone(),
        armed: true,
    };
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: Some(64 * 1024),
            }),
        )
        .await
        .map_err(|e| docker_error("start an exec", container, e))?;
    let capture = Capture::default();
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(item) = output.next().await {
            match item {
                Ok(bollard::container::LogOutput::StdErr { message }) => {
                    capture.push(true, &message, &request.log);
                }
                Ok(other) => capture.push(false, &other.into_bytes(), &request.log),
                Err(e) => {
                    request
                        .log
                        .line(&format!("[orchestrate] exec output stream broke: {e}"));
                    break;
                }
            }
        }
    }
    let inspect = docker
        .inspect_exec(&exec.id)
        .await
        .map_err(|e| docker_error("inspect an exec", container, e))?;
    // Leftovers of a finished command go too.
    guard.armed = false;
    kill_tree(docker, container, &pidfile).await?;
    let code = inspect.exit_code.map(|c| c as i32);
    let exit = match code {
        // The shell reports a signal death as 128 + signal.
        Some(c) if c > 128 && c < 160 => ExitInfo {
            code: Some(c),
            signal: Some(c - 128),
        },
        code => ExitInfo { code, signal: None },
    };
    Ok(capture.finish(exit))
}
