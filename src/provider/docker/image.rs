//! Images: used when present on the engine, pulled otherwise (progress on stderr, bounded by
//! a no-progress timeout so a missing registry fails fast and clearly), and described for the
//! manifest (id, tags, repo digests).

use std::time::{Duration, Instant};

use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::connection::Connection;
use super::error::{DockerError, is_not_found};

/// What the manifest records about an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ImageFacts {
    /// The reference the task asked for.
    pub reference: String,
    /// `sha256:...` image id on the engine.
    pub id: String,
    /// `repo@sha256:...` when the image came from a registry (empty for local builds).
    pub repo_digests: Vec<String>,
    pub repo_tags: Vec<String>,
}

/// Facts of `image` when the engine has it, `None` when it does not.
pub(crate) async fn inspect(
    connection: &Connection,
    image: &str,
) -> Result<Option<ImageFacts>, DockerError> {
    match connection.docker.inspect_image(image).await {
        Ok(found) => Ok(Some(ImageFacts {
            reference: image.to_string(),
            id: found.id.unwrap_or_default(),
            repo_digests: found.repo_digests.unwrap_or_default(),
            repo_tags: found.repo_tags.unwrap_or_default(),
        })),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(DockerError::engine("inspect an image")(e)),
    }
}

/// The image, pulled first when the engine does not have it.
pub(crate) async fn ensure(
    connection: &Connection,
    image: &str,
    host: &str,
    idle_timeout: Duration,
    cancel: &CancellationToken,
) -> Result<ImageFacts, DockerError> {
    if let Some(facts) = inspect(connection, image).await? {
        return Ok(facts);
    }
    pull(connection, image, host, idle_timeout, cancel).await?;
    inspect(connection, image)
        .await?
        .ok_or_else(|| DockerError::Pull {
            image: image.to_string(),
            host: host.to_string(),
            source: bollard::errors::Error::DockerStreamError {
                error: "the pull finished but the engine does not list the image".into(),
            },
        })
}

/// `repo[:tag]` / `repo@digest` -> (fromImage, tag); a bare name means `latest`, as with
/// `docker pull` (an empty tag would pull every tag).
pub(crate) fn split_reference(image: &str) -> (&str, &str) {
    if image.contains('@') {
        return (image, "");
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rfind(':') {
        Some(pos) => {
            let cut = image.len() - last.len() + pos;
            (&image[..cut], &image[cut + 1..])
        }
        None => (image, "latest"),
    }
}

async fn pull(
    connection: &Connection,
    image: &str,
    host: &str,
    idle_timeout: Duration,
    cancel: &CancellationToken,
) -> Result<(), DockerError> {
    let (from_image, tag) = split_reference(image);
    let mut options = CreateImageOptionsBuilder::new().from_image(from_image);
    if !tag.is_empty() {
        options = options.tag(tag);
    }
    tracing::info!("pulling image {image} on {host}");
    let mut stream = connection
        .docker
        .create_image(Some(options.build()), None, None);
    let mut last_report = Instant::now();
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => return Err(DockerError::Pull {
                image: image.to_string(),
                host: host.to_string(),
                source: bollard::errors::Error::DockerStreamError { error: "cancelled".into() },
            }),
            next = tokio::time::timeout(idle_timeout, stream.next()) => next,
        };
        match next {
            Err(_) => {
                return Err(DockerError::PullTimeout {
                    image: image.to_string(),
                    host: host.to_string(),
                    after: idle_timeout,
                });
            }
            Ok(None) => return Ok(()),
            Ok(Some(Err(source))) => {
                return Err(DockerError::Pull {
                    image: image.to_string(),
                    host: host.to_string(),
                    source,
                });
            }
            Ok(Some(Ok(info))) => {
                if last_report.elapsed() >= Duration::from_secs(2) {
                    last_report = Instant::now();
                    tracing::info!(
                        "pulling {image}: {} {}",
                        info.status.unwrap_or_default(),
                        info.progress.unwrap_or_default()
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_like_docker_pull() {
        assert_eq!(split_reference("busybox"), ("busybox", "latest"));
        assert_eq!(
            split_reference("rocm/sglang-staging:20250212"),
            ("rocm/sglang-staging", "20250212")
        );
        assert_eq!(
            split_reference("localhost:5000/vllm/vllm-openai"),
            ("localhost:5000/vllm/vllm-openai", "latest")
        );
        assert_eq!(
            split_reference("localhost:5000/vllm:v0.9"),
            ("localhost:5000/vllm", "v0.9")
        );
        assert_eq!(
            split_reference("vllm/vllm-openai@sha256:abc"),
            ("vllm/vllm-openai@sha256:abc", "")
        );
    }
}
