//! The module layering rule, checked on the source: a module may name (`crate::x`, in `use`
//! lines or inline paths) only modules of a lower layer. Data flows one way:
//! spec -> plan -> (provider, client) -> fleet -> runner -> cli, and archive/report/check read the
//! archive only. A new top-level module must be given a layer here.
//!
//! The crates under crates/ (the mock server, the leaf tools) are checked with the same scan:
//! the imports among each crate's own modules must run one way (no circle).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Top-level modules by layer, lowest first. A module may import modules of lower layers
/// only; two modules of the same layer are independent of each other.
const LAYERS: &[&[&str]] = &[
    // Leaf tools with no domain knowledge (`units` and `fetch` are re-exported from the
    // orchestrate-base crate).
    &["units", "shutdown", "template", "fetch"],
    // Leaf values the task file names, and pure inputs.
    &["load", "deploy", "dataset", "matrix", "external"],
    // The task file and the hosts file.
    &["spec", "hosts"],
    // spec x matrix x hosts -> the resolved plan.
    &["plan"],
    // Parts that do one thing each: SSH sessions, the load generator. (The mock server is the
    // orchestrate-mock crate.)
    &["ssh", "client"],
    // Running instances; request records -> figures; the remote client.
    &["provider", "metrics", "client_agent"],
    // Slurm allocations and job steps (started through the local provider).
    &["slurm"],
    // The fleet of a run: remote hosts (pool, pre-flight, locks), the provider set, each
    // deployment's Slurm allocations, the client on a remote host.
    &["fleet"],
    // Waiting for instances; the on-disk run record (written, and read back typed).
    &["readiness", "archive"],
    // Readers of the archive; whether a point is valid (judged from its typed summary).
    &["runs", "validity"],
    &["report", "check"],
    &["interop"],
    // The run loop and the orchestration around it.
    &["runner"],
    // The command line.
    &["cli"],
];

/// Modules that read the archive only: they never reach into running things.
const ARCHIVE_READERS: &[&str] = &["archive", "runs", "report", "check", "interop", "validity"];
const RUNNING_THINGS: &[&str] = &[
    "provider",
    "client",
    "client_agent",
    "readiness",
    "ssh",
    "runner",
    "slurm",
    "fleet",
    "cli",
];

/// Imports against the rule that are being removed; each must still exist (so a fixed one
/// is taken off this list) and nothing else may be added.
const PENDING: &[(&str, &str)] = &[];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without `//` comments (doc comments mention other modules freely).
fn code_only(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            // A `//` inside a string literal (a URL) keeps the line; comments that start a
            // line, or follow code after whitespace, go.
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every top-level module named after `crate::`, including the heads of grouped imports
/// (`use crate::{a::X, b};`).
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(found) = code[at..].find("crate::") {
        let start = at + found + "crate::".len();
        at = start;
        if bytes.get(start) == Some(&b'{') {
            // Grouped: take each top-level item's first segment.
            let mut depth = 0usize;
            let mut item = String::new();
            for &b in &bytes[start..] {
                match b {
                    b'{' => {
                        depth += 1;
                        if depth == 1 {
                            continue;
                        }
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b',' if depth == 1 => {
                        push_head(&item, &mut out);
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(b as char);
            }
            push_head(&item, &mut out);
        } else {
            push_head(&code[start..], &mut out);
        }
    }
    out
}

fn push_head(item: &str, out: &mut BTreeSet<String>) {
    let head: String = item
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if !head.is_empty() && head != "self" && head != "super" {
        out.insert(head);
    }
}

/// (importing module, imported module, file) for every reference in src/.
fn references() -> Vec<(String, String, String)> {
    references_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// (importing module, imported module, file) for every `crate::` reference in the crate whose
/// sources are `src`; a module is a top-level file or folder, `lib.rs` and `main.rs` aside.
fn references_in(src: &Path) -> Vec<(String, String, String)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut refs = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .to_string();
        let module = rel
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        for named in named_modules(&code) {
            if named != module {
                refs.push((module.clone(), named, rel.clone()));
            }
        }
    }
    refs
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let missing: Vec<_> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';'))
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "give these modules a layer in tests/it/layers.rs: {missing:?}"
    );
}

#[test]
fn modules_import_only_lower_layers() {
    let mut wrong = Vec::new();
    for (module, named, file) in references() {
        let (Some(from), Some(to)) = (layer_of(&module), layer_of(&named)) else {
            continue;
        };
        if to >= from && !PENDING.contains(&(module.as_str(), named.as_str())) {
            wrong.push(format!(
                "src/{file}: `{module}` (layer {from}) names `crate::{named}` (layer {to})"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the one-way flow:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn pending_exceptions_still_exist() {
    let refs = references();
    for (module, named) in PENDING {
        assert!(
            refs.iter().any(|(m, n, _)| m == module && n == named),
            "`{module}` no longer names `{named}`: take it off PENDING in tests/it/layers.rs"
        );
    }
}

#[test]
fn archive_readers_never_reach_into_running_things() {
    let wrong: Vec<_> = references()
        .into_iter()
        .filter(|(module, named, _)| {
            ARCHIVE_READERS.contains(&module.as_str()) && RUNNING_THINGS.contains(&named.as_str())
        })
        .map(|(module, named, file)| format!("src/{file}: `{module}` names `crate::{named}`"))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_scan_sees_grouped_and_inline_paths_and_skips_comments() {
    let code = code_only(
        "use crate::{plan::{A, B}, spec};\n// crate::runner in a comment\nlet x = crate::units::parse(\"//x\");\n",
    );
    let named: Vec<_> = named_modules(&code).into_iter().collect();
    assert_eq!(named, ["plan", "spec", "units"]);
}

/// A circle among `refs` (as module names, the first repeated at the end), if there is one.
fn find_circle(refs: &[(String, String, String)]) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        refs: &[(String, String, String)],
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.to_string());
            return Some(circle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_string());
        for (_, named, _) in refs.iter().filter(|(m, _, _)| m == module) {
            if let Some(circle) = visit(named, refs, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(module.to_string());
        None
    }
    let mut done = BTreeSet::new();
    refs.iter()
        .find_map(|(module, _, _)| visit(module, refs, &mut Vec::new(), &mut done))
}

#[test]
fn the_crates_modules_import_one_way() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let refs = references_in(&src);
        if let Some(circle) = find_circle(&refs) {
            let files: BTreeSet<_> = circle
                .windows(2)
                .flat_map(|w| {
                    refs.iter()
                        .filter(|(m, n, _)| *m == w[0] && *n == w[1])
                        .map(|(_, _, f)| f.clone())
                })
                .collect();
            panic!(
                "{}: the modules import each other in a circle: {} (in {files:?})",
                src.display(),
                circle.join(" -> ")
            );
        }
        checked.push(src);
    }
    assert!(
        checked.iter().any(|s| s.ends_with("mock/src")),
        "the mock crate was not checked: {checked:?}"
    );
}

#[test]
fn the_circle_check_finds_a_circle() {
    let edge = |a: &str, b: &str| (a.to_string(), b.to_string(), format!("{a}.rs"));
    let one_way = [
        edge("server", "routes"),
        edge("routes", "app"),
        edge("server", "app"),
    ];
    assert_eq!(find_circle(&one_way), None);
    let circle = [
        edge("server", "routes"),
        edge("routes", "disagg"),
        edge("disagg", "server"),
    ];
    assert_eq!(
        find_circle(&circle).unwrap(),
        ["server", "routes", "disagg", "server"]
    );
}
