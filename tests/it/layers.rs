//! The module layering rule, checked on the source: a module may name (`crate::x`, in `use`
//! lines or inline paths) only modules of a lower layer. Data flows one way:
//! spec -> plan -> (provider, client) -> fleet -> runner -> cli, and archive/report/check read
//! the archive only. A new top-level module must be given a layer here. Inside every folder, the
//! children (files and subfolders) name each other one way only: no circle. The crates under
//! crates/ (the mock server, the leaf tools) are held to the same: no circle in any folder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules by layer, lowest first. A module may import modules of lower layers
/// only; two modules of the same layer are independent of each other.
const LAYERS: &[&[&str]] = &[
    // Leaf tools with no domain knowledge (`units` and `fetch` are re-exported from the
    // orchestrate-base crate).
    &["units", "shutdown", "template", "fetch"],
    // Leaf values the task file names, and pure inputs.
    &["load", "deploy", "dataset", "matrix", "external"],
    // The task file.
    &["spec"],
    // The hosts file (its errors are told as the task file's: `spec::diagnostic`).
    &["hosts"],
    // spec x matrix x hosts -> the resolved plan.
    &["plan"],
    // Parts that do one thing each: SSH sessions, the load generator, GPU telemetry read and
    // figured (pure). (The mock server is the orchestrate-mock crate.)
    &["ssh", "client", "telemetry"],
    // Running instances; request records -> figures; the remote client.
    &["provider", "metrics", "client_agent"],
    // Slurm allocations and job steps (started through the local provider).
    &["slurm"],
    // Capacity search: chooses load levels and judges them from request samples (pure).
    &["search"],
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
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut refs = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&src)
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

// Circles inside a folder: the direct children of every module (its files and subfolders,
// a subfolder's children counting as the subfolder) name each other one way only.

/// A module's path below `crate` (`spec::dstack` is `["spec", "dstack"]`).
type ModPath = Vec<String>;

/// The module path of a file below src/ (`spec/dstack/mod.rs` is `spec::dstack`).
fn module_path(rel: &Path) -> ModPath {
    let mut path: ModPath = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
        path.pop();
    }
    path
}

/// Every module of the library with its code (comments and test code left out): one entry
/// per file, and one per inline module written at the start of a line (`mod rx {`).
fn modules(src: &Path) -> BTreeMap<ModPath, String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out: BTreeMap<ModPath, String> = BTreeMap::new();
    let mut test_only: Vec<ModPath> = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        if rel == Path::new("main.rs") || rel.starts_with("bin") {
            continue;
        }
        let path = module_path(rel);
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        for part in split_inline(&code) {
            let mut full = path.clone();
            full.extend(part.inner);
            for t in part.test_files {
                let mut p = full.clone();
                p.push(t);
                test_only.push(p);
            }
            out.entry(full).or_default().push_str(&part.code);
        }
    }
    out.retain(|path, _| !test_only.iter().any(|t| path.starts_with(t)));
    out
}

/// One module's share of a file.
struct Part {
    /// The inline module below the file (empty: the file's own module).
    inner: Vec<String>,
    code: String,
    /// The `#[cfg(test)]` file modules it declares (`mod tests;`).
    test_files: Vec<String>,
}

/// A file's code by module: its own, and each inline module written at the start of a line
/// (ending at the first `}` line). `#[cfg(test)]` inline modules are left out.
fn split_inline(code: &str) -> Vec<Part> {
    let mut parts = vec![Part {
        inner: Vec::new(),
        code: String::new(),
        test_files: Vec::new(),
    }];
    let mut current = 0;
    let mut skipping = false;
    let mut test_attr = false;
    for line in code.lines() {
        if skipping {
            skipping = line != "}";
            continue;
        }
        if current != 0 && line == "}" {
            current = 0;
            continue;
        }
        let item = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub(super) "))
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        if let Some(rest) = item.strip_prefix("mod ") {
            let name: String = rest.chars().take_while(|c| is_ident(*c as u8)).collect();
            let inline = rest[name.len()..].trim_start().starts_with('{');
            match (inline, std::mem::take(&mut test_attr)) {
                (true, true) => {
                    skipping = true;
                    continue;
                }
                (false, true) => parts[0].test_files.push(name),
                (true, false) => {
                    parts.push(Part {
                        inner: vec![name],
                        code: String::new(),
                        test_files: Vec::new(),
                    });
                    current = parts.len() - 1;
                    continue;
                }
                (false, false) => {}
            }
        } else if line.starts_with("#[") {
            test_attr |= line == "#[cfg(test)]";
        } else if !line.trim().is_empty() {
            test_attr = false;
        }
        parts[current].code.push_str(line);
        parts[current].code.push('\n');
    }
    parts
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The paths of the path tree at `*at` (`a::{b, c::{self, D}}`, `a::*`), each after
/// `prefix`; a glob ends in a `*` segment.
fn path_tree(code: &[u8], at: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    while code.get(*at).is_some_and(|b| b.is_ascii_whitespace()) {
        *at += 1;
    }
    let mut path = prefix.to_vec();
    match code.get(*at) {
        Some(b'{') => {
            *at += 1;
            loop {
                path_tree(code, at, prefix, out);
                // Past `as Alias` to the next item or the end of the group.
                while let Some(&b) = code.get(*at) {
                    *at += 1;
                    match b {
                        b',' => break,
                        b'}' => return,
                        _ => {}
                    }
                }
                while code.get(*at).is_some_and(|b| b.is_ascii_whitespace()) {
                    *at += 1;
                }
                match code.get(*at) {
                    None => return,
                    Some(b'}') => {
                        *at += 1;
                        return;
                    }
                    _ => {}
                }
            }
        }
        Some(b'*') => {
            *at += 1;
            path.push("*".to_string());
        }
        _ => {
            let start = *at;
            while code.get(*at).copied().is_some_and(is_ident) {
                *at += 1;
            }
            if *at > start {
                path.push(String::from_utf8_lossy(&code[start..*at]).to_string());
                if code[*at..].starts_with(b"::") {
                    *at += 2;
                    return path_tree(code, at, &path, out);
                }
            }
        }
    }
    if !path.is_empty() {
        out.push(path);
    }
}

/// A path written in `module` made absolute: it starts with `crate`, `super`, `self` or a
/// child module of `module`; `None` for other crates' paths.
fn absolute(module: &[String], segments: &[String], known: &BTreeSet<ModPath>) -> Option<ModPath> {
    let first = segments.first()?;
    let rest = match first.as_str() {
        "crate" => &segments[1..],
        "super" | "self" => segments,
        child => {
            let mut p = module.to_vec();
            p.push(child.to_string());
            if !known.contains(&p) {
                return None;
            }
            segments
        }
    };
    let mut path = if first == "crate" {
        Vec::new()
    } else {
        module.to_vec()
    };
    for s in rest {
        match s.as_str() {
            "super" => {
                path.pop();
            }
            "self" => {}
            _ => path.push(s.clone()),
        }
    }
    Some(path)
}

/// The `crate::`, `super::` and `self::` paths of `code` (in `use` lines and inline),
/// grouped imports expanded, as written.
fn written_paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for keyword in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(found) = code[from..].find(keyword) {
            let mut at = from + found;
            from = at + keyword.len();
            if at > 0 && (is_ident(bytes[at - 1]) || matches!(bytes[at - 1], b':' | b'$')) {
                continue;
            }
            path_tree(bytes, &mut at, &[], &mut out);
        }
    }
    out
}

/// What one module brings in with `use` (re-exports included): name -> absolute path, and
/// the modules it glob-imports.
#[derive(Default)]
struct Imports {
    names: BTreeMap<String, ModPath>,
    globs: Vec<ModPath>,
}

fn imports(module: &[String], code: &str, known: &BTreeSet<ModPath>) -> Imports {
    let mut out = Imports::default();
    for line in code.lines() {
        let t = line.trim_start();
        let Some(at) = t.find("use ") else {
            continue;
        };
        let head = t[..at].trim_end();
        if !(head.is_empty() || head == "pub" || (head.starts_with("pub(") && head.ends_with(')')))
        {
            continue;
        }
        // A `use` may go on over several lines: parse from here in the whole code.
        let offset = t.as_ptr() as usize - code.as_ptr() as usize + at + 4;
        let mut raw = Vec::new();
        let mut at = offset;
        path_tree(code.as_bytes(), &mut at, &[], &mut raw);
        for segments in raw {
            let glob = segments.last().is_some_and(|s| s == "*");
            let named = &segments[..segments.len() - usize::from(glob)];
            let Some(path) = absolute(module, named, known) else {
                continue;
            };
            if glob {
                out.globs.push(path);
            } else if let Some(name) = named.iter().rev().find(|s| *s != "self") {
                out.names.insert(name.clone(), path);
            }
        }
    }
    out
}

/// The modules of the library, what each imports, and where a name leads.
struct Crate {
    code: BTreeMap<ModPath, String>,
    known: BTreeSet<ModPath>,
    imports: BTreeMap<ModPath, Imports>,
}

impl Crate {
    fn new(code: BTreeMap<ModPath, String>) -> Crate {
        let known: BTreeSet<ModPath> = code.keys().cloned().collect();
        let imports = code
            .iter()
            .map(|(m, c)| (m.clone(), imports(m, c, &known)))
            .collect();
        Crate {
            code,
            known,
            imports,
        }
    }

    /// The module an absolute path leads to, through `use` and `pub use` (a name a module
    /// re-exports leads to where it is defined).
    fn resolve(&self, path: &[String], depth: usize) -> ModPath {
        let mut k = path.len();
        while k > 0 && !self.known.contains(&path[..k]) {
            k -= 1;
        }
        let module = path[..k].to_vec();
        if k == path.len() || depth > 8 {
            return module;
        }
        let name = &path[k];
        let Some(imports) = self.imports.get(&module) else {
            return module;
        };
        if let Some(target) = imports.names.get(name) {
            let next: ModPath = target.iter().chain(&path[k + 1..]).cloned().collect();
            if next != path {
                return self.resolve(&next, depth + 1);
            }
        }
        for glob in &imports.globs {
            let next: ModPath = glob.iter().chain(&path[k..]).cloned().collect();
            let found = self.resolve(&next, depth + 1);
            if found.len() > glob.len() || self.defines(glob, name) {
                return found;
            }
        }
        module
    }

    /// Whether `module` defines an item called `name`.
    fn defines(&self, module: &[String], name: &str) -> bool {
        let Some(code) = self.code.get(module) else {
            return false;
        };
        [
            "fn", "struct", "enum", "type", "const", "static", "trait", "mod",
        ]
        .iter()
        .any(|kind| {
            let item = format!("{kind} {name}");
            code.match_indices(&item)
                .any(|(at, _)| !code[at + item.len()..].bytes().next().is_some_and(is_ident))
        })
    }

    /// Per folder (`""` for the crate root, `runner`, `spec/dstack`): child -> the children
    /// it names -> the first module that does.
    fn folder_graphs(&self) -> BTreeMap<String, Graph> {
        let mut graphs: BTreeMap<String, Graph> = BTreeMap::new();
        for (module, code) in &self.code {
            for written in written_paths(code) {
                let glob = written.last().is_some_and(|s| s == "*");
                let named = &written[..written.len() - usize::from(glob)];
                let Some(path) = absolute(module, named, &self.known) else {
                    continue;
                };
                let target = self.resolve(&path, 0);
                let k = module
                    .iter()
                    .zip(&target)
                    .take_while(|(a, b)| a == b)
                    .count();
                if k < module.len() && k < target.len() {
                    graphs
                        .entry(module[..k].join("/"))
                        .or_default()
                        .entry(module[k].clone())
                        .or_default()
                        .entry(target[k].clone())
                        .or_insert_with(|| module.join("::"));
                }
            }
        }
        graphs
    }
}

/// Who names whom: node -> named node -> where (for the message).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn reachable(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(node) = todo.pop() {
        for next in graph.get(&node).into_iter().flat_map(|e| e.keys()) {
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    seen
}

/// The groups of nodes that reach each other (each holds at least one circle), sorted.
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    let reach: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|n| (n, reachable(graph, n))).collect();
    let mut groups: BTreeSet<Vec<String>> = BTreeSet::new();
    for (node, from_node) in &reach {
        if !from_node.contains(*node) {
            continue;
        }
        let group: Vec<String> = from_node
            .iter()
            .filter(|other| reach.get(other).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        groups.insert(group);
    }
    groups.into_iter().collect()
}

/// One circle through the first node of `group`, as `a -> b -> a`, with who names whom.
fn describe_circle(graph: &Graph, group: &[String]) -> String {
    let start = &group[0];
    // Shortest way back to `start` inside the group.
    let mut back: BTreeMap<String, String> = BTreeMap::new();
    let mut todo = std::collections::VecDeque::from([start.clone()]);
    'search: while let Some(node) = todo.pop_front() {
        for next in graph.get(&node).into_iter().flat_map(|e| e.keys()) {
            if !group.contains(next) || back.contains_key(next) {
                continue;
            }
            back.insert(next.clone(), node.clone());
            if next == start {
                break 'search;
            }
            todo.push_back(next.clone());
        }
    }
    let mut path = vec![start.clone()];
    let mut at = start.clone();
    while let Some(prev) = back.get(&at) {
        path.push(prev.clone());
        at = prev.clone();
        if at == *start {
            break;
        }
    }
    path.reverse();
    let steps: Vec<String> = path
        .windows(2)
        .map(|w| format!("{} names {} (in {})", w[0], w[1], graph[&w[0]][&w[1]]))
        .collect();
    format!("{} ({})", path.join(" -> "), steps.join("; "))
}

/// Every circle inside a folder of the main crate: (folder, group, description).
fn folder_circles() -> Vec<(String, Vec<String>, String)> {
    folder_circles_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), "src")
}

/// Every circle inside a folder of the crate whose sources are `src` (`label` names it in the
/// description).
fn folder_circles_in(src: &Path, label: &str) -> Vec<(String, Vec<String>, String)> {
    let krate = Crate::new(modules(src));
    let mut out = Vec::new();
    for (folder, graph) in krate.folder_graphs() {
        for group in circles(&graph) {
            let text = format!("{label}/{folder}: {}", describe_circle(&graph, &group));
            out.push((folder.clone(), group, text));
        }
    }
    out
}

#[test]
fn no_folder_has_an_import_circle() {
    let wrong: Vec<String> = folder_circles()
        .into_iter()
        .map(|(_, _, text)| text)
        .collect();
    assert!(
        wrong.is_empty(),
        "the children of a folder must name each other one way only; circles:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_circle_finder_finds_each_group_and_no_more() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string())
                .or_default()
                .insert(b.to_string(), format!("{a}.rs"));
        }
        g
    };
    let g = graph(&[
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
        ("c", "d"),
        ("d", "e"),
        ("e", "d"),
        ("f", "a"),
    ]);
    assert_eq!(circles(&g), [vec!["a", "b", "c"], vec!["d", "e"]]);
    assert_eq!(
        describe_circle(&g, &circles(&g)[1]),
        "d -> e -> d (d names e (in d.rs); e names d (in e.rs))"
    );
    assert!(describe_circle(&g, &circles(&g)[0]).starts_with("a -> b -> c -> a "));
    // One way only, even with several ways to the same node: no circle.
    let g = graph(&[("a", "b"), ("b", "c"), ("a", "c"), ("d", "c")]);
    assert!(circles(&g).is_empty());
}

#[test]
fn the_folder_scan_resolves_paths_and_re_exports() {
    let code = code_only;
    let krate = Crate::new(BTreeMap::from([
        (vec![], code("pub mod x;\npub mod y;\n")),
        (
            vec!["x".to_string()],
            code("mod a;\nmod b;\nmod c;\npub use c::Thing;\n"),
        ),
        (
            vec!["x".into(), "a".into()],
            code("use super::{b::{self, B}, Thing};\n// super::c in a comment\n"),
        ),
        (
            vec!["x".into(), "b".into()],
            code("fn f() { crate::y::g(); }\n"),
        ),
        (
            vec!["x".into(), "c".into()],
            code("pub struct Thing;\nuse crate::x::a as _;\nfn h() { self::k(); }\n"),
        ),
        (vec!["y".to_string()], code("pub fn g() {}\n")),
    ]));
    let graphs = krate.folder_graphs();
    let edges = |folder: &str| -> Vec<(String, String)> {
        graphs[folder]
            .iter()
            .flat_map(|(a, to)| to.keys().map(|b| (a.clone(), b.clone())))
            .collect()
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(edges("x"), [pair("a", "b"), pair("a", "c"), pair("c", "a")]);
    assert_eq!(edges(""), [pair("x", "y")]);
    assert_eq!(circles(&graphs["x"]), [vec!["a", "c"]]);
    // Test modules are left out; an inline module is a module of its own.
    let parts = split_inline(
        "use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::b;\n}\n#[cfg(test)]\nmod more;\nmod rx {\n    use super::c;\n}\n",
    );
    let parts: Vec<_> = parts
        .iter()
        .map(|p| {
            (
                p.inner.join("::"),
                p.code.trim().to_string(),
                p.test_files.clone(),
            )
        })
        .collect();
    assert_eq!(
        parts,
        [
            (
                String::new(),
                "use crate::a;\n#[cfg(test)]\n#[cfg(test)]\nmod more;".to_string(),
                vec!["more".to_string()]
            ),
            ("rx".to_string(), "use super::c;".to_string(), vec![]),
        ]
    );
}

#[test]
fn the_crates_folders_import_one_way() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut checked = Vec::new();
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let label = format!("crates/{}/src", dir.file_name().unwrap().to_string_lossy());
        wrong.extend(
            folder_circles_in(&src, &label)
                .into_iter()
                .map(|(_, _, text)| text),
        );
        checked.push(label);
    }
    assert!(
        wrong.is_empty(),
        "the modules of a crate must name each other one way only; circles:\n{}",
        wrong.join("\n")
    );
    assert!(
        checked.iter().any(|s| s == "crates/mock/src"),
        "the mock crate was not checked: {checked:?}"
    );
}
