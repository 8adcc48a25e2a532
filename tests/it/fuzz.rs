//! Task-file text fuzzed with a fixed seed: the project's task files and spec fixtures
//! mutated (byte flips, deleted and duplicated lines, swapped keys, blown-up numbers, deep
//! nesting, huge strings, alias bombs, shifted indentation) plus random bytes. In process,
//! through the validate entry point (`spec::load_str` then `plan::build`), no case may panic
//! or take longer than its bound; through the built binary, `orchestrate validate` must exit
//! 0 (still valid) or 2 (bad input) within its time bound and under a 2 GiB address-space
//! limit. Either way an error names the file and shows no Rust or library internals.
//!
//! A failing case names its number, its source file and its mutations; the mutated text is
//! written to the test's output so it can be replayed.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{bin, repo};

const SEED: u64 = 0x7a5c_f11e;
const IN_PROCESS_CASES: usize = 3000;
const BINARY_CASES: usize = 120;
/// One in-process case: parse and plan a page of YAML.
const CASE_BOUND: Duration = Duration::from_secs(5);
/// One `orchestrate validate` (process start included, on a loaded machine).
const BINARY_BOUND: Duration = Duration::from_secs(20);
/// The child's address-space limit.
const MEMORY_LIMIT: u64 = 2 << 30;

/// The seed corpus: every task file and run/spec fixture, with its path relative to the
/// repository (relative references in it resolve from there).
fn corpus() -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for dir in [
        "tasks",
        "tasks/profiles",
        "tests/fixtures/spec",
        "tests/fixtures/run",
    ] {
        let mut names: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        names.sort();
        for path in names {
            let rel = path.strip_prefix(repo()).unwrap().to_path_buf();
            files.push((rel, std::fs::read(&path).unwrap()));
        }
    }
    assert!(
        files.len() > 40,
        "the corpus is the repository's task files"
    );
    files
}

/// Numbers that overflow, underflow or mean nothing as counts and durations.
const NUMBERS: &[&str] = &[
    "99999999999999999999",
    "18446744073709551616",
    "9223372036854775808",
    "4294967296",
    "-1",
    "0",
    "-0",
    "1e308",
    "1e-300",
    "-1e308",
    ".inf",
    "-.inf",
    ".nan",
    "0x7fffffffffffffff",
    "99999999999999999999d",
    "1e400s",
    "0.0000000001ms",
    "18446744073709551615ms",
    "1ZiB",
];

/// One mutation of `text`; the name says what it did.
fn mutate(rng: &mut StdRng, text: &mut Vec<u8>) -> &'static str {
    let mut lines: Vec<Vec<u8>> = text.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    let pick = |rng: &mut StdRng, n: usize| rng.random_range(0..n.max(1));
    let name = match rng.random_range(0..10) {
        0 => {
            for _ in 0..rng.random_range(1..4) {
                if !text.is_empty() {
                    let at = pick(rng, text.len());
                    text[at] = if rng.random_bool(0.5) {
                        text[at] ^ (1 << rng.random_range(0..8))
                    } else {
                        rng.random()
                    };
                }
            }
            return "byte flips";
        }
        1 => {
            let at = pick(rng, lines.len());
            if at < lines.len() {
                lines.remove(at);
            }
            "line deleted"
        }
        2 => {
            let at = pick(rng, lines.len());
            if let Some(line) = lines.get(at).cloned() {
                for _ in 0..rng.random_range(1..4) {
                    lines.insert(at, line.clone());
                }
            }
            "line duplicated"
        }
        3 => {
            let keyed: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].contains(&b':'))
                .collect();
            if keyed.len() >= 2 {
                let a = keyed[pick(rng, keyed.len())];
                let b = keyed[pick(rng, keyed.len())];
                let key = |l: &[u8]| l.iter().position(|&c| c == b':').unwrap();
                let (ka, kb) = (key(&lines[a]), key(&lines[b]));
                let (la, lb) = (lines[a].clone(), lines[b].clone());
                lines[a] = [&lb[..kb], &la[ka..]].concat();
                lines[b] = [&la[..ka], &lb[kb..]].concat();
            }
            "keys swapped"
        }
        4 => {
            blow_up_number(rng, &mut lines);
            "number blown up"
        }
        5 => {
            let depth = [64, 1_000, 20_000, 200_000][pick(rng, 4)];
            let (open, close) = if rng.random_bool(0.5) {
                ("[", "]")
            } else {
                ("{a: ", "}")
            };
            let value = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            replace_value(rng, &mut lines, value.as_bytes());
            "deep nesting"
        }
        6 => {
            let len = [1_000, 100_000, 1_000_000][pick(rng, 3)];
            let value = "x".repeat(len);
            if rng.random_bool(0.8) {
                replace_value(rng, &mut lines, value.as_bytes());
            } else {
                lines.push(format!("{value}: 1").into_bytes());
            }
            "huge string"
        }
        7 => {
            // The billion laughs: nine levels of nine aliases of the level below.
            lines.push(b"bomb0: &b0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]".to_vec());
            for level in 1..9 {
                let refs = vec![format!("*b{}", level - 1); 9].join(", ");
                lines.push(format!("bomb{level}: &b{level} [{refs}]").into_bytes());
            }
            "alias bomb"
        }
        8 => {
            let at = pick(rng, lines.len());
            if let Some(line) = lines.get_mut(at) {
                if rng.random_bool(0.5) {
                    line.splice(0..0, b"  ".iter().copied());
                } else {
                    line.insert(0, b'\t');
                }
            }
            "indentation shifted"
        }
        _ => {
            insert_syntax(rng, &mut lines);
            "syntax inserted"
        }
    };
    *text = lines.join(&b'\n');
    name
}

/// Insert a piece of YAML syntax (or a byte-order mark) at a random column of a random line.
fn insert_syntax(rng: &mut StdRng, lines: &mut [Vec<u8>]) {
    let at = rng.random_range(0..lines.len().max(1));
    let junk: &[&[u8]] = &[
        b"- ",
        b"? ",
        b"&",
        b"*",
        b"!!binary ",
        b"{{ ",
        b"${{ secrets.",
        b"%YAML 1.1",
        b"---",
        b"...",
        b"\"",
        b"'",
        b"#",
        b"|",
        b">-",
        b"<<: *x",
        b"\xef\xbb\xbf",
        b"\xff\xfe",
    ];
    let piece = junk[rng.random_range(0..junk.len())];
    if let Some(line) = lines.get_mut(at) {
        let col = rng.random_range(0..=line.len());
        line.splice(col..col, piece.iter().copied());
    }
}

/// Replace the first number of some line with one of [`NUMBERS`] (nothing when no line has one).
fn blow_up_number(rng: &mut StdRng, lines: &mut [Vec<u8>]) {
    let numbered: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].iter().any(u8::is_ascii_digit))
        .collect();
    let Some(&at) = numbered.get(rng.random_range(0..numbered.len().max(1))) else {
        return;
    };
    let line = &lines[at];
    let start = line.iter().position(u8::is_ascii_digit).unwrap();
    let end = line[start..]
        .iter()
        .position(|c| !c.is_ascii_digit() && *c != b'.')
        .map_or(line.len(), |n| start + n);
    let number = NUMBERS[rng.random_range(0..NUMBERS.len())];
    lines[at].splice(start..end, number.bytes());
}

/// Replace the value of one `key: value` line with `value`.
fn replace_value(rng: &mut StdRng, lines: &mut Vec<Vec<u8>>, value: &[u8]) {
    let keyed: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].windows(2).any(|w| w == b": "))
        .collect();
    if keyed.is_empty() {
        lines.push([b"x: ".as_slice(), value].concat());
        return;
    }
    let at = keyed[rng.random_range(0..keyed.len())];
    let colon = lines[at].windows(2).position(|w| w == b": ").unwrap();
    lines[at].truncate(colon + 2);
    lines[at].extend_from_slice(value);
}

/// One fuzz case: where its text claims to come from, what was done to it, the text.
struct Case {
    source: PathBuf,
    mutations: Vec<&'static str>,
    text: Vec<u8>,
}

impl Case {
    fn describe(&self, n: usize) -> String {
        let shown = String::from_utf8_lossy(&self.text);
        let shown: String = shown.chars().take(2000).collect();
        format!(
            "case {n} (seed {SEED:#x}): {} {:?}\n--- text (first 2000 chars) ---\n{shown}\n---",
            self.source.display(),
            self.mutations
        )
    }
}

/// The `n` cases of the fixed seed: one in ten is random bytes, the rest 1-3 mutations of a
/// corpus file.
fn cases(seed: u64, n: usize) -> Vec<Case> {
    let corpus = corpus();
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            if rng.random_ratio(1, 10) {
                let len = rng.random_range(0..4096);
                let text: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                return Case {
                    source: PathBuf::from("tasks/random.yaml"),
                    mutations: vec!["random bytes"],
                    text,
                };
            }
            let (source, text) = &corpus[rng.random_range(0..corpus.len())];
            let mut text = text.clone();
            let mutations = (0..rng.random_range(1..4))
                .map(|_| mutate(&mut rng, &mut text))
                .collect();
            Case {
                source: source.clone(),
                mutations,
                text,
            }
        })
        .collect()
}

/// What the in-process validation of one case did.
enum Verdict {
    Valid,
    /// The error, as `validate` prints it.
    Invalid(String),
    Panicked(String),
}

fn validate_in_process(case: &Case) -> Verdict {
    let path = repo().join(&case.source);
    let text = String::from_utf8_lossy(&case.text).into_owned();
    let result = std::panic::catch_unwind(|| {
        let ctx = orchestrate::plan::PlanContext::new();
        match orchestrate::spec::load_str(&path, text) {
            Ok(task) => orchestrate::plan::build(&task, &ctx)
                .err()
                .map(|e| format!("{:#}", anyhow::Error::new(e))),
            Err(e) => Some(format!("{:#}", anyhow::Error::new(e))),
        }
    });
    match result {
        Ok(None) => Verdict::Valid,
        Ok(Some(message)) => Verdict::Invalid(message),
        Err(panic) => Verdict::Panicked(
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        ),
    }
}

#[test]
fn mutated_task_files_never_panic_in_validation_and_stay_within_time() {
    let cases = cases(SEED, IN_PROCESS_CASES);
    let (tx, rx) = mpsc::channel();
    let shared = std::sync::Arc::new(cases);
    let worker_cases = shared.clone();
    // The main thread's stack size, as in the binary: deep nesting must not need more.
    let worker = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            for (n, case) in worker_cases.iter().enumerate() {
                let started = Instant::now();
                let verdict = validate_in_process(case);
                if tx.send((n, started.elapsed(), verdict)).is_err() {
                    return;
                }
            }
        })
        .unwrap();
    let mut problems = Vec::new();
    let (mut valid, mut invalid) = (0, 0);
    let mut slowest = Duration::ZERO;
    for n in 0..shared.len() {
        let Ok((m, took, verdict)) = rx.recv_timeout(CASE_BOUND) else {
            panic!(
                "validation took over {CASE_BOUND:?}: {}",
                shared[n].describe(n)
            );
        };
        assert_eq!(m, n);
        slowest = slowest.max(took);
        match verdict {
            Verdict::Valid => valid += 1,
            Verdict::Invalid(message) => {
                invalid += 1;
                if let Some(leak) = internals(&message) {
                    problems.push(format!(
                        "the error shows library internals ({leak}): {message}\n{}",
                        shared[n].describe(n)
                    ));
                }
            }
            Verdict::Panicked(message) => {
                problems.push(format!("panicked: {message}\n{}", shared[n].describe(n)));
            }
        }
    }
    worker.join().unwrap();
    eprintln!(
        "{} cases: {valid} still valid, {invalid} rejected, {} panicked; slowest {slowest:?}",
        shared.len(),
        problems.len()
    );
    assert!(
        invalid > shared.len() / 2 && valid > 0,
        "the mutations reach both outcomes"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Words of Rust and library internals that an error for a task file must not show.
const INTERNALS: &[&str] = &[
    "Option<",
    "Vec<",
    "serde",
    "saphyr",
    "DuplicateKeyPolicy",
    "budget breached",
    "Nodes {",
    "panicked",
    "RUST_BACKTRACE",
    "called `Result::unwrap()`",
];

/// The first internal word `message` shows, if any.
fn internals(message: &str) -> Option<&'static str> {
    INTERNALS.iter().copied().find(|w| message.contains(w))
}

/// A directory that mirrors the repository's layout where relative references lead
/// (`data/`, `tasks/profiles/`), so a mutated file written there resolves them as its
/// original did.
fn mirror() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["tasks", "tests/fixtures/spec", "tests/fixtures/run"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    std::os::unix::fs::symlink(repo().join("data"), dir.path().join("data")).unwrap();
    std::os::unix::fs::symlink(
        repo().join("tasks/profiles"),
        dir.path().join("tasks/profiles"),
    )
    .unwrap();
    dir
}

/// `orchestrate validate FILE` under the memory limit; its exit code (`None`: killed by a
/// signal, e.g. an allocation refused by the limit aborting it) and how long it took.
fn validate_binary(dir: &Path, file: &Path) -> (Option<i32>, String, Duration) {
    let mut command = Command::new(bin());
    command
        .arg("validate")
        .arg(file)
        .current_dir(dir)
        .env_remove("ORCHESTRATE_HOSTS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: MEMORY_LIMIT,
                rlim_max: MEMORY_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let mut child = command.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > BINARY_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    let stderr = reader.join().unwrap();
    (status.and_then(|s| s.code()), stderr, took)
}

#[test]
fn mutated_task_files_exit_0_or_2_from_validate_in_bounded_time_and_memory() {
    let dir = mirror();
    // Another stream than the in-process test's, so the binary sees other cases too.
    let cases = cases(SEED + 1, BINARY_CASES);
    let mut problems = Vec::new();
    let mut codes = std::collections::BTreeMap::new();
    for (n, case) in cases.iter().enumerate() {
        let file = dir
            .path()
            .join(case.source.parent().unwrap())
            .join(format!("fuzz-{n}.yaml"));
        std::fs::write(&file, &case.text).unwrap();
        let (code, stderr, took) = validate_binary(dir.path(), &file);
        *codes.entry(code).or_insert(0) += 1;
        if took > BINARY_BOUND {
            problems.push(format!("over {BINARY_BOUND:?}: {}", case.describe(n)));
        } else if !matches!(code, Some(0 | 2)) {
            problems.push(format!("exit {code:?}: {stderr}\n{}", case.describe(n)));
        } else if let Some(leak) = internals(&stderr) {
            problems.push(format!(
                "the error shows library internals ({leak}): {stderr}\n{}",
                case.describe(n)
            ));
        } else if code == Some(2) && !stderr.contains(&format!("fuzz-{n}.yaml")) {
            problems.push(format!(
                "the error does not name the file: {stderr}\n{}",
                case.describe(n)
            ));
        }
        std::fs::remove_file(&file).unwrap();
    }
    eprintln!("exit codes of {} cases: {codes:?}", cases.len());
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
