//! Reading a task file into a typed [`Task`]: YAML via serde-saphyr, errors with
//! `file:line:col`, the snippet and a "did you mean", then the profile merge
//! (`benchmark.profile` or `--profile`) and the dstack keys (`spec::dstack`).
//!
//! Owns: file -> `Task`. Does not own: templates, matrix or hosts (plan).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::diagnostic::{Diagnostic, SpecError, from_yaml};
use super::profile;
use super::types::{BenchmarkSpec, TaskSpec};

/// One file that contributed to a task (the task file, then its profile).
#[derive(Debug, Clone)]
pub struct Source {
    pub path: PathBuf,
    pub text: String,
}

/// Index of the task file in [`Task::sources`].
pub const TASK_SOURCE: usize = 0;

/// A parsed task with its profile merged in. Locations point into `sources`.
#[derive(Debug, Clone)]
pub struct Task {
    /// The task as written, with `benchmark` merged over its profile.
    pub spec: TaskSpec,
    /// The task file (index 0) and the profile (index 1) when there is one (`--profile`
    /// or `benchmark.profile`).
    pub sources: Vec<Source>,
    /// Which source each top-level `benchmark` key came from (key -> index into `sources`).
    pub bench_origin: BTreeMap<&'static str, usize>,
    /// sha256 (hex) of the task file and its profile.
    pub hash: String,
    /// What each dstack key of the file became (see `spec::dstack`), for `plan`.
    pub dstack: Vec<super::dstack::Note>,
}

impl Task {
    /// The task file.
    pub fn path(&self) -> &Path {
        &self.sources[TASK_SOURCE].path
    }

    /// A diagnostic at `loc` in source `source`.
    pub fn diag(
        &self,
        source: usize,
        loc: serde_saphyr::Location,
        message: impl Into<String>,
    ) -> Diagnostic {
        let s = &self.sources[source];
        if loc.line() == 0 {
            Diagnostic::file(&s.path, message)
        } else {
            Diagnostic::at(&s.path, &s.text, loc, message)
        }
    }

    /// `--replicas N`: run `n` replicas of the single server, whatever `replicas:` says
    /// (a range's lower bound otherwise). The flag is part of the task's hash.
    pub fn set_replicas(&mut self, n: u32) -> Result<(), SpecError> {
        super::dstack::override_replicas(&mut self.spec, &mut self.dstack, n)
            .map_err(|m| Diagnostic::file(self.path(), m))?;
        let mut hasher = Sha256::new();
        hasher.update(self.hash.as_bytes());
        hasher.update(format!("--replicas {n}").as_bytes());
        self.hash = hex(&hasher.finalize());
        Ok(())
    }

    /// The source a `benchmark` key came from.
    pub fn bench_source(&self, key: &str) -> usize {
        self.bench_origin.get(key).copied().unwrap_or(TASK_SOURCE)
    }
}

/// Read and parse a task file and its profile.
pub fn load(path: &Path) -> Result<Task, SpecError> {
    load_with(path, None)
}

/// Read and parse a task file; `profile` (from the command line, relative to the current
/// directory) replaces the file's `benchmark.profile`, and is what a dstack file, which has
/// no `benchmark` section, needs.
pub fn load_with(path: &Path, profile: Option<&Path>) -> Result<Task, SpecError> {
    let text = read(path)?;
    load_str_with(path, text, profile)
}

/// Parse task-file text as if it were read from `path` (relative profiles resolve from it).
pub fn load_str(path: &Path, text: String) -> Result<Task, SpecError> {
    load_str_with(path, text, None)
}

/// [`load_str`] with a profile from the command line (see [`load_with`]).
pub fn load_str_with(path: &Path, text: String, profile: Option<&Path>) -> Result<Task, SpecError> {
    let mut spec: TaskSpec =
        parse(path, &text).map_err(|e| kind_error(path, &text).unwrap_or(e))?;
    let mut sources = vec![Source {
        path: path.to_path_buf(),
        text,
    }];
    let bench_given = !is_empty(&spec.benchmark);
    let profile_path = match (profile, &spec.benchmark.profile) {
        (Some(p), _) => Some(p.to_path_buf()),
        (None, Some(r)) => Some(path.parent().unwrap_or(Path::new(".")).join(&r.value)),
        (None, None) => None,
    };
    if profile_path.is_none() && !bench_given {
        return Err(Diagnostic::file(
            path,
            "no `benchmark` section: nothing says how to load the server",
        )
        .with_help(
            "pass a profile: `orchestrate plan FILE --profile tasks/profiles/r1-online.yaml` (a dstack file has no `benchmark` section), or add `benchmark:`",
        )
        .into());
    }
    let mut bench_origin = BTreeMap::new();
    if let Some(ppath) = profile_path {
        let ptext = read(&ppath).map_err(|e| match (e, &spec.benchmark.profile, profile) {
            (SpecError::Read { source, .. }, Some(r), None) => Diagnostic::at(
                path,
                &sources[TASK_SOURCE].text,
                r.referenced,
                format!("cannot read profile {}: {source}", ppath.display()),
            )
            .into(),
            (other, ..) => other,
        })?;
        let pspec: BenchmarkSpec = parse(&ppath, &ptext)?;
        if let Some(nested) = &pspec.profile {
            return Err(Diagnostic::at(
                &ppath,
                &ptext,
                nested.referenced,
                "a profile cannot name another profile",
            )
            .into());
        }
        sources.push(Source {
            path: ppath,
            text: ptext,
        });
        let task_bench = std::mem::take(&mut spec.benchmark);
        let (merged, origin) = profile::merge(task_bench, pspec, TASK_SOURCE, 1);
        spec.benchmark = merged;
        bench_origin = origin;
    }
    let dstack = super::dstack::normalize(&mut spec, path, &sources[TASK_SOURCE].text)?;
    let mut hasher = Sha256::new();
    for s in &sources {
        hasher.update(s.text.as_bytes());
    }
    let hash = hex(&hasher.finalize());
    Ok(Task {
        spec,
        sources,
        bench_origin,
        hash,
        dstack,
    })
}

/// A dstack configuration type orchestrate does not run (`dev-environment`, `fleet`, ...)
/// is the first thing to say about a file, before its unknown keys.
fn kind_error(path: &Path, text: &str) -> Option<SpecError> {
    #[derive(serde::Deserialize)]
    struct Kind {
        #[serde(rename = "type", default)]
        kind: Option<serde_saphyr::Spanned<String>>,
    }
    let kind = serde_saphyr::from_str::<Kind>(text).ok()?.kind?;
    if kind.value == "task" || kind.value == "service" {
        return None;
    }
    let mut spec: TaskSpec = serde_saphyr::from_str("{}").ok()?;
    spec.kind = Some(kind);
    super::dstack::normalize(&mut spec, path, text)
        .err()
        .map(SpecError::from)
}

/// A `benchmark` section that says nothing (absent, or `benchmark: {}`).
fn is_empty(b: &BenchmarkSpec) -> bool {
    serde_json::to_value(b)
        .ok()
        .and_then(|v| {
            v.as_object()
                .map(|m| m.values().all(serde_json::Value::is_null))
        })
        .unwrap_or(false)
}

/// The largest task or profile file read (8 MiB): a task file is a page of YAML, and a
/// larger one would cost memory and time before any error is found.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

fn read(path: &Path) -> Result<String, SpecError> {
    use std::io::Read;
    let read_err = |source| SpecError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut text = String::new();
    // One byte over the limit is enough to know it is too large.
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(Diagnostic::file(
            path,
            format!(
                "the file is larger than {} MiB; a task file is a page of YAML, split it or shorten it",
                MAX_FILE_BYTES / (1024 * 1024)
            ),
        )
        .into());
    }
    Ok(text)
}

fn parse<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, SpecError> {
    serde_saphyr::from_str(text).map_err(|e| from_yaml(path, text, &e).into())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK: &str = "name: t\nmodel: m\nbenchmark:\n  profile: p.yaml\n  num_prompts: 5\n";

    #[test]
    fn profile_keys_are_defaults_and_their_origin_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("p.yaml"),
            "duration: 1m\nignore_eos: true\n",
        )
        .unwrap();
        let task = load_str(&dir.path().join("t.yaml"), TASK.to_string()).unwrap();
        let b = &task.spec.benchmark;
        assert_eq!(b.ignore_eos, Some(true));
        // The task chose num_prompts, which replaces the profile's duration.
        assert!(b.duration.is_none());
        assert_eq!(task.bench_source("ignore_eos"), 1);
        assert_eq!(task.bench_source("num_prompts"), TASK_SOURCE);
        assert_eq!(task.sources.len(), 2);
    }

    #[test]
    fn a_profile_may_not_name_another_profile() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.yaml"), "profile: q.yaml\n").unwrap();
        let err = load_str(&dir.path().join("t.yaml"), TASK.to_string()).unwrap_err();
        assert!(
            err.to_string()
                .contains("p.yaml:1:10: a profile cannot name another profile"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_profile_is_reported_where_it_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = load_str(&dir.path().join("t.yaml"), TASK.to_string()).unwrap_err();
        assert!(
            err.to_string().contains("t.yaml:4:12: cannot read profile"),
            "{err}"
        );
    }
}
