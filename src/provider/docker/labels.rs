//! The labels every container we start carries, and finding containers by them: what
//! `orchestrate ps` lists and `orchestrate clean` removes after a runner was killed.

use std::collections::HashMap;

use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
use serde::Serialize;

use super::connection::Connection;
use super::error::{DockerError, is_not_found};

pub(crate) const RUN: &str = "orchestrate.run";
pub(crate) const TASK: &str = "orchestrate.task";
pub(crate) const ROLE: &str = "orchestrate.role";
pub(crate) const DEPLOYMENT: &str = "orchestrate.deployment";
pub(crate) const INDEX: &str = "orchestrate.index";
/// Pid of the orchestrate process that started the container (shown by `ps`).
pub(crate) const OWNER_PID: &str = "orchestrate.pid";

/// Which labelled containers to look at; empty fields match everything of ours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelFilter {
    pub run: Option<String>,
    pub task: Option<String>,
}

impl LabelFilter {
    /// The engine-side `label` filters.
    fn engine_filters(&self) -> HashMap<String, Vec<String>> {
        let mut labels = vec![RUN.to_string()];
        if let Some(run) = &self.run {
            labels.push(format!("{RUN}={run}"));
        }
        if let Some(task) = &self.task {
            labels.push(format!("{TASK}={task}"));
        }
        HashMap::from([("label".to_string(), labels)])
    }
}

/// A container carrying our labels (running or not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Leftover {
    pub id: String,
    pub name: String,
    pub run: String,
    pub task: String,
    pub role: String,
    pub index: String,
    pub image: String,
    /// `running`, `exited`, `created`, ...
    pub state: String,
    /// The engine's human status, e.g. `Up 3 minutes`.
    pub status: String,
    /// Pid of the orchestrate process that started it.
    pub owner_pid: String,
}

/// Every container of ours matching `filter`, sorted by run, task, role and index.
pub(crate) async fn list(
    connection: &Connection,
    filter: &LabelFilter,
) -> Result<Vec<Leftover>, DockerError> {
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filter.engine_filters())
        .build();
    let summaries = connection
        .docker
        .list_containers(Some(options))
        .await
        .map_err(DockerError::engine("list containers"))?;
    let mut found: Vec<Leftover> = summaries
        .into_iter()
        .map(|summary| {
            let labels = summary.labels.unwrap_or_default();
            let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
            Leftover {
                id: summary.id.unwrap_or_default(),
                name: summary
                    .names
                    .unwrap_or_default()
                    .first()
                    .map(|n| n.trim_start_matches('/').to_string())
                    .unwrap_or_default(),
                run: label(RUN),
                task: label(TASK),
                role: label(ROLE),
                index: label(INDEX),
                image: summary.image.unwrap_or_default(),
                state: summary.state.map(|s| s.to_string()).unwrap_or_default(),
                status: summary.status.unwrap_or_default(),
                owner_pid: label(OWNER_PID),
            }
        })
        .collect();
    found.sort_by(|a, b| {
        (&a.run, &a.task, &a.role, index_key(&a.index)).cmp(&(
            &b.run,
            &b.task,
            &b.role,
            index_key(&b.index),
        ))
    });
    Ok(found)
}

fn index_key(index: &str) -> u64 {
    index.parse().unwrap_or(u64::MAX)
}

/// Force-remove every container of ours matching `filter`; returns what was removed.
/// A container that disappears meanwhile counts as removed.
pub(crate) async fn remove_all(
    connection: &Connection,
    filter: &LabelFilter,
) -> Result<Vec<Leftover>, DockerError> {
    let found = list(connection, filter).await?;
    for leftover in &found {
        let options = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match connection
            .docker
            .remove_container(&leftover.id, Some(options))
            .await
        {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(DockerError::container("remove", &leftover.name)(e)),
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_always_require_our_run_label() {
        let all = LabelFilter::default().engine_filters();
        assert_eq!(all["label"], vec!["orchestrate.run"]);
        let narrow = LabelFilter {
            run: Some("r1".into()),
            task: Some("t".into()),
        }
        .engine_filters();
        assert_eq!(
            narrow["label"],
            vec![
                "orchestrate.run",
                "orchestrate.run=r1",
                "orchestrate.task=t"
            ]
        );
    }
}
