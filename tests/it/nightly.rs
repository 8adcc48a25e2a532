//! examples/ci/nightly.yml stays true: it parses as YAML, and every orchestrate command it
//! runs uses a verb and flags the binary accepts.

use std::process::Command;

use crate::common::{bin, repo};

#[test]
fn the_nightly_workflow_uses_real_verbs_and_flags() {
    let path = repo().join("examples/ci/nightly.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let yaml: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let steps = yaml["jobs"]["benchmark"]["steps"].as_array().unwrap();
    let mut checked = Vec::new();
    for step in steps {
        let Some(run) = step["run"].as_str() else {
            continue;
        };
        // One command may span lines joined by `\`.
        let joined = run.replace("\\\n", " ");
        for line in joined.lines() {
            let Some((_, rest)) = line.split_once("bin/orchestrate\"") else {
                continue;
            };
            let words: Vec<&str> = rest.split_whitespace().collect();
            let verb = words[0];
            let help = Command::new(bin()).args([verb, "--help"]).output().unwrap();
            assert!(help.status.success(), "`orchestrate {verb}` is not a verb");
            let help = String::from_utf8_lossy(&help.stdout);
            for flag in words.iter().filter(|w| w.starts_with("--")) {
                assert!(
                    help.contains(flag),
                    "`orchestrate {verb}` has no {flag}:\n{help}"
                );
            }
            checked.push(verb.to_string());
        }
    }
    assert_eq!(checked, ["run", "check"], "the workflow runs, then checks");
}
