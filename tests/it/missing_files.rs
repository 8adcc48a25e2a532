//! A tokenizer or dataset file that does not exist is found by `validate` (and `plan`), before
//! any server starts, with the file:line:col of the key and what to do (issue 14, item 9).

use std::process::Command;

use crate::common::{bin, repo};

fn validate(yaml: &str) -> (Option<i32>, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("t.yaml");
    std::fs::write(&task, yaml).unwrap();
    let out = Command::new(bin())
        .arg("validate")
        .arg(&task)
        .current_dir(dir.path())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        dir,
    )
}

const HEAD: &str = "name: t
backend: vllm
model: m
port: auto
commands: [\"sleep 100\"]
benchmark:
";

#[test]
fn a_missing_tokenizer_file_is_a_located_error_before_anything_starts() {
    let (code, stderr, _dir) = validate(&format!(
        "{HEAD}  dataset: {{kind: random, input_len: 8, output_len: 8}}\n  num_prompts: 4\n  tokenizer: ./nowhere/tokenizer.json\n"
    ));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("t.yaml:9:14:"), "{stderr}");
    assert!(stderr.contains("`tokenizer`: no file"), "{stderr}");
    assert!(stderr.contains("fix the path"), "{stderr}");
    // The same file, there, is fine; so is a model id (looked up when the point runs).
    let shipped = repo().join("data/tokenizer/tokenizer.json");
    for tokenizer in [shipped.display().to_string(), "org/model".to_string()] {
        let (code, stderr, _dir) = validate(&format!(
            "{HEAD}  dataset: {{kind: random, input_len: 8, output_len: 8}}\n  num_prompts: 4\n  tokenizer: {tokenizer}\n"
        ));
        assert_eq!(code, Some(0), "{tokenizer}: {stderr}");
    }
}

#[test]
fn a_missing_dataset_file_is_a_located_error_before_anything_starts() {
    let (code, stderr, dir) = validate(&format!(
        "{HEAD}  dataset: {{kind: sharegpt, path: data/sharegpt.json}}\n  num_prompts: 4\n"
    ));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("t.yaml:7:"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "`dataset.path`: no file {}",
            dir.path().join("data/sharegpt.json").display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("fix the path or create the file"),
        "{stderr}"
    );
}
