//! Hosts file loading: resolution and snapshot-tested errors with file:line:col.

use super::*;

fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hosts.yaml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn error(text: &str) -> String {
    let (dir, path) = write(text);
    let err = load_with(&path, &SshConfig::default()).unwrap_err();
    err.to_string()
        .replace(&dir.path().display().to_string(), "[DIR]")
}

const GOOD: &str = "\
known_hosts: /etc/orchestrate/known_hosts
hosts:
  bastion:
    address: bastion.example.com
    user: jump
  h200-a:
    address: 10.0.0.5
    port: 2222
    user: ubuntu
    identity_file: /keys/h200
    jump: bastion
    gpus: 8:H200
    labels: {rack: a}
  mi300:
    gpus: MI300X:8
clusters:
  all: [h200-a, mi300]
";

#[test]
fn resolves_hosts_jumps_and_clusters() {
    let (_dir, path) = write(GOOD);
    let file = load_with(&path, &SshConfig::default()).unwrap();
    assert_eq!(
        file.known_hosts,
        PathBuf::from("/etc/orchestrate/known_hosts")
    );
    let h200 = file.host("h200-a").unwrap();
    assert_eq!(h200.address, "10.0.0.5");
    assert_eq!(h200.port, 2222);
    assert_eq!(h200.user, "ubuntu");
    assert_eq!(h200.identity_files, vec![PathBuf::from("/keys/h200")]);
    assert_eq!(h200.jump.as_ref().unwrap().address, "bastion.example.com");
    assert_eq!(h200.jump.as_ref().unwrap().user, "jump");
    assert_eq!(h200.gpus.as_ref().unwrap().count, 8);
    assert_eq!(h200.labels["rack"], "a");
    let mi300 = file.host("mi300").unwrap();
    assert_eq!(mi300.address, "mi300");
    assert_eq!(mi300.port, 22);
    assert_eq!(mi300.gpus.as_ref().unwrap().vendor, GpuVendor::Amd);
    let names: Vec<_> = file
        .select("all")
        .unwrap()
        .iter()
        .map(|h| h.name.clone())
        .collect();
    assert_eq!(names, ["h200-a", "mi300"]);
    assert_eq!(file.select("mi300").unwrap().len(), 1);
}

#[test]
fn ssh_config_aliases_fill_what_the_file_leaves_out() {
    let (_dir, path) =
        write("hosts:\n  h20-1:\n    user: override\n  box:\n    address: gpu-box\n");
    let config = SshConfig::parse(
        "Host h20-*\n  HostName 192.168.1.%h\n  Port 2200\n  IdentityFile /keys/h20\n  ProxyJump admin@gate:2022\n\
         Host gpu-box\n  HostName 10.1.1.1\n  User alice\n",
    );
    let file = load_with(&path, &config).unwrap();
    let h20 = file.host("h20-1").unwrap();
    assert_eq!(h20.address, "192.168.1.h20-1");
    assert_eq!((h20.port, h20.user.as_str()), (2200, "override"));
    assert_eq!(h20.identity_files, vec![PathBuf::from("/keys/h20")]);
    let gate = h20.jump.as_ref().unwrap();
    assert_eq!(
        (gate.address.as_str(), gate.port, gate.user.as_str()),
        ("gate", 2022, "admin")
    );
    let gpu_box = file.host("box").unwrap();
    assert_eq!(
        (gpu_box.address.as_str(), gpu_box.user.as_str()),
        ("10.1.1.1", "alice")
    );
}

#[test]
fn lookups_suggest_close_names() {
    let (_dir, path) = write(GOOD);
    let file = load_with(&path, &SshConfig::default()).unwrap();
    let err = file.select("h200-b").unwrap_err().to_string();
    assert!(err.contains("did you mean `h200-a`"), "{err}");
    let err = file.cluster("al").unwrap_err().to_string();
    assert!(err.contains("unknown cluster `al`"), "{err}");
}

#[test]
fn unknown_field_points_at_the_line() {
    insta::assert_snapshot!(error("hosts:\n  a:\n    adress: 10.0.0.1\n"));
}

#[test]
fn unknown_cluster_member_suggests_a_host() {
    insta::assert_snapshot!(error(
        "hosts:\n  h200-a: {}\nclusters:\n  c: [h200-a, h200-b]\n"
    ));
}

#[test]
fn unknown_jump_host_suggests_a_host() {
    insta::assert_snapshot!(error("hosts:\n  bastion: {}\n  a:\n    jump: bastoin\n"));
}

#[test]
fn jump_loop_is_an_error() {
    insta::assert_snapshot!(error("hosts:\n  a:\n    jump: b\n  b:\n    jump: a\n"));
}

#[test]
fn bad_gpus_points_at_the_value() {
    insta::assert_snapshot!(error("hosts:\n  a:\n    gpus: lots\n"));
}

#[test]
fn bad_port_points_at_the_value() {
    insta::assert_snapshot!(error("hosts:\n  a:\n    port: 70000\n"));
}

#[test]
fn duplicate_host_is_an_error() {
    insta::assert_snapshot!(error("hosts:\n  a: {}\n  a: {port: 2}\n"));
}

#[test]
fn empty_file_says_what_is_missing() {
    insta::assert_snapshot!(error("clusters: {}\n"));
}

#[test]
fn an_explicit_hosts_file_must_exist() {
    let err = discover(Some(Path::new("/nonexistent/hosts.yaml"))).unwrap_err();
    assert!(matches!(err, HostsError::Read { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/hosts.yaml"), "{err}");
}

#[test]
fn a_cluster_is_a_host_list_or_a_slurm_map() {
    let (_dir, path) = write(
        "hosts:\n  a: {}\n  login1: {}\nclusters:\n  pair: [a]\n  gpu:\n    slurm:\n      partition: batch\n      account: perf\n      time_limit: \"1:00:00\"\n      gpus_per_node: 8\n      container: pyxis\n      login: login1\n",
    );
    let file = load_with(&path, &SshConfig::default()).unwrap();
    assert_eq!(file.cluster("pair").unwrap().len(), 1);
    let gpu = file.slurm("gpu").unwrap();
    assert_eq!(gpu.partition, "batch");
    assert_eq!(gpu.account.as_deref(), Some("perf"));
    assert_eq!(gpu.gpus_per_node, 8);
    assert_eq!(gpu.container, crate::hosts::SlurmContainer::Pyxis);
    assert_eq!(gpu.login.as_deref(), Some("login1"));
    assert_eq!(gpu.partition_at, format!("{}:8:18", path.display()));
    assert_eq!(gpu.key("partition"), "clusters.gpu.slurm.partition");
    assert_eq!(file.slurm_clusters().count(), 1);
}

#[test]
fn slurm_cluster_errors_name_the_key_and_place() {
    let base = "hosts: {}\nclusters:\n  gpu:\n    slurm:\n      partition: batch\n      time_limit: \"10\"\n      gpus_per_node: 1\n";
    let err = error(&format!("{base}      container: docker\n"));
    assert!(
        err.contains("hosts.yaml:8:18: `clusters.gpu.slurm.container` is `docker`: expected `pyxis` or `none`"),
        "{err}"
    );
    let err = error(&format!("{base}      login: nowhere\n"));
    assert!(
        err.contains("hosts.yaml:8:14: `clusters.gpu.slurm.login` names unknown host `nowhere`"),
        "{err}"
    );
    let err = error(&format!("{base}      partion: x\n"));
    assert!(err.contains("unknown key `partion`"), "{err}");
    assert!(err.contains("did you mean `partition`?"), "{err}");
    let err = error("hosts: {}\nclusters:\n  gpu:\n    slurm:\n      partition: batch\n");
    assert!(err.contains("time_limit"), "{err}");
    let err = error("hosts: {}\nclusters:\n  gpu: 5\n");
    assert!(
        err.contains("expected a list of host names, a map"),
        "{err}"
    );
}

#[test]
fn price_per_gpu_hour_on_a_host_and_a_slurm_cluster() {
    let (_dir, path) = write(
        "hosts:\n  a: {price_per_gpu_hour: 2.5}\n  b: {}\nclusters:\n  pair: [a, b]\n  gpu:\n    slurm:\n      partition: batch\n      time_limit: \"10\"\n      gpus_per_node: 8\n      price_per_gpu_hour: 1.75\n",
    );
    let file = load_with(&path, &SshConfig::default()).unwrap();
    assert_eq!(file.price_per_gpu_hour("a"), Some(2.5));
    assert_eq!(file.price_per_gpu_hour("b"), None);
    assert_eq!(file.price_per_gpu_hour("pair"), None);
    assert_eq!(file.price_per_gpu_hour("gpu"), Some(1.75));
}

#[test]
fn a_price_that_is_not_above_zero_points_at_the_value() {
    let err = error("hosts:\n  a:\n    price_per_gpu_hour: -1\n");
    assert!(err.contains("[DIR]/hosts.yaml:3:25"), "{err}");
    assert!(err.contains("bad `price_per_gpu_hour` of `a`"), "{err}");
    let err = error(
        "hosts: {}\nclusters:\n  gpu:\n    slurm:\n      partition: batch\n      time_limit: \"10\"\n      gpus_per_node: 1\n      price_per_gpu_hour: 0\n",
    );
    assert!(err.contains("hosts.yaml:8:27"), "{err}");
    assert!(err.contains("`gpu`"), "{err}");
}

/// The place and the first line of an error (the snippet and help follow).
fn headline(text: &str) -> String {
    error(text).lines().next().unwrap_or_default().to_string()
}

#[test]
fn bad_host_values_are_errors_at_their_place() {
    let long = "x".repeat(100_000);
    let cases: [(String, &str); 8] = [
        (
            "hosts:\n  a:\n    address: \"\"\n".into(),
            "[DIR]/hosts.yaml:3:14: `hosts.a.address` is empty",
        ),
        (
            format!("hosts:\n  a:\n    address: {long}\n"),
            "[DIR]/hosts.yaml:3:14: `hosts.a.address` is 100000 characters long; a host name has at most 253",
        ),
        (
            "hosts:\n  a:\n    address: \"gpu 1\"\n".into(),
            "[DIR]/hosts.yaml:3:14: `hosts.a.address` has a space or a control character in it",
        ),
        (
            "known_hosts: 42\nhosts: {}\n".into(),
            "[DIR]/hosts.yaml:1:14: `known_hosts` is `42`, a number, not a file path",
        ),
        (
            "known_hosts: \"\"\nhosts: {}\n".into(),
            "[DIR]/hosts.yaml:1:14: `known_hosts` is empty",
        ),
        (
            "hosts:\n  a:\n    identity_file: true\n".into(),
            "[DIR]/hosts.yaml:3:20: `hosts.a.identity_file` is `true`, a boolean, not a file path",
        ),
        (
            "hosts:\n  a:\n    port: 99999999\n".into(),
            "[DIR]/hosts.yaml:3:11: `hosts.a.port` is 99999999, not a port",
        ),
        (
            "hosts:\n  a:\n    port: 0\n".into(),
            "[DIR]/hosts.yaml:3:11: `hosts.a.port` is 0, not a port",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(headline(&text), want);
    }
    // What to do is said, and a long value is cut in the snippet.
    let err = error(&format!("hosts:\n  a:\n    address: {long}\n"));
    assert!(
        err.contains("help: write the host name or IP address"),
        "{err}"
    );
    assert!(err.len() < 1_000, "{} characters", err.len());
    let err = error("hosts:\n  a:\n    port: 99999999\n");
    assert!(err.contains("from 1 to 65535"), "{err}");
}

#[test]
fn slurm_time_limits_are_checked_when_the_file_is_read() {
    let file = |t: &str| {
        format!(
            "hosts: {{}}\nclusters:\n  gpu:\n    slurm:\n      partition: batch\n      time_limit: {t}\n      gpus_per_node: 1\n"
        )
    };
    for good in [
        "30",
        "\"30:15\"",
        "\"4:00:00\"",
        "\"2-00\"",
        "\"1-02:03\"",
        "\"1-02:03:04\"",
        "UNLIMITED",
        "infinite",
        "\"365-00:00:00\"",
    ] {
        let (_dir, path) = write(&file(good));
        let loaded = load_with(&path, &SshConfig::default());
        assert!(loaded.is_ok(), "{good}: {}", loaded.unwrap_err());
    }
    for (bad, want) in [
        (
            "\"ten minutes\"",
            "is `ten minutes`, which is not a Slurm time",
        ),
        ("\"1:2:3:4\"", "is `1:2:3:4`, which is not a Slurm time"),
        ("\"-5\"", "is `-5`, which is not a Slurm time"),
        (
            "\"99999999999-00:00:00\"",
            "is `99999999999-00:00:00`, over a year",
        ),
        ("\"999999999999999999999\"", "which is not a Slurm time"),
        ("\"400-00\"", "is `400-00`, over a year (400 days)"),
    ] {
        let err = error(&file(bad));
        assert!(
            err.starts_with("[DIR]/hosts.yaml:6:19: `clusters.gpu.slurm.time_limit`"),
            "{bad}: {err}"
        );
        assert!(err.contains(want), "{bad}: {err}");
        assert!(err.contains("help: "), "{bad}: {err}");
    }
}

#[test]
fn parse_errors_read_like_the_task_files() {
    for text in [
        "hosts:\n  a:\n    port: 70000\n",
        "hosts:\n  a:\n    adress: 10.0.0.1\n",
        "hosts:\n  a: {}\n  a: {port: 2}\n",
        "clusters: {}\n",
        "hosts: [a\n",
    ] {
        let err = error(text);
        assert!(err.starts_with("[DIR]/hosts.yaml:"), "{text:?}: {err}");
        assert!(!err.contains("error:"), "{text:?}: {err}");
        assert!(!err.contains("invalid u16"), "{text:?}: {err}");
        assert!(!err.contains("invalid hosts file"), "{text:?}: {err}");
        assert!(!err.contains("<input>"), "{text:?}: {err}");
    }
}
