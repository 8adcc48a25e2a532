//! Tests of the Slurm pre-flight checks, on `sinfo` output captured from a real cluster.

use super::*;

/// `sinfo` output ([`SINFO_ARGS`]) captured from scripts/slurm-cluster.sh's cluster
/// (Slurm 22.05) with a second partition `cpu` (n1 only, MaxTime 1 h) and n2 drained.
const CAPTURED: &str = "cpu|up|1:00:00|n1|gpu:2|idle\n\
                        gpu|up|infinite|n1|gpu:2|idle\n\
                        gpu|up|infinite|n2|gpu:2|drain\n";

fn ask(partition: &str, nodes: usize) -> Ask<'_> {
    Ask {
        partition,
        nodes,
        gpus_per_node: None,
        gres: None,
        time_limit: None,
        estimate: Estimate::default(),
    }
}

fn keys(problems: &[Problem]) -> Vec<(&'static str, Severity)> {
    problems.iter().map(|p| (p.key, p.severity)).collect()
}

#[test]
fn a_missing_partition_names_the_key_and_the_near_one() {
    let p = check(CAPTURED, &ask("gpus", 1)).unwrap();
    assert_eq!(keys(&p), [("partition", Severity::Error)]);
    assert!(
        p[0].message.contains("`gpus` does not exist"),
        "{}",
        p[0].message
    );
    assert!(
        p[0].message.contains("did you mean `gpu`?"),
        "{}",
        p[0].message
    );
    assert!(p[0].message.contains("cpu, gpu"), "{}", p[0].message);
}

#[test]
fn drained_nodes_do_not_count() {
    assert!(check(CAPTURED, &ask("gpu", 1)).unwrap().is_empty());
    let p = check(CAPTURED, &ask("gpu", 2)).unwrap();
    assert_eq!(keys(&p), [("partition", Severity::Error)]);
    assert!(p[0].message.contains("n2 (drain)"), "{}", p[0].message);
    let p = check(CAPTURED, &ask("cpu", 2)).unwrap();
    assert!(
        p[0].message
            .contains("has 1 node(s); the deployment needs 2"),
        "{}",
        p[0].message
    );
}

#[test]
fn gpus_and_gres_are_checked_per_node() {
    let mut a = ask("gpu", 1);
    a.gpus_per_node = Some(2);
    a.gres = Some("gpu:2");
    assert!(check(CAPTURED, &a).unwrap().is_empty());
    a.gpus_per_node = Some(8);
    a.gres = Some("gpu:h100:1");
    let p = check(CAPTURED, &a).unwrap();
    assert_eq!(
        keys(&p),
        [
            ("gpus_per_node", Severity::Error),
            ("gres", Severity::Error)
        ]
    );
    assert!(p[0].message.contains("the most is 2"), "{}", p[0].message);
    assert!(
        p[1].message.contains("they offer gpu:2"),
        "{}",
        p[1].message
    );
}

#[test]
fn time_limit_against_max_time_and_estimate() {
    let mut a = ask("cpu", 1);
    a.time_limit = Some(Duration::from_secs(2 * 3600));
    a.estimate = Estimate {
        at_least: Duration::from_secs(3 * 3600),
        unknown_points: 1,
        points: 4,
    };
    let p = check(CAPTURED, &a).unwrap();
    assert_eq!(
        keys(&p),
        [
            ("time_limit", Severity::Error),
            ("time_limit", Severity::Warning)
        ]
    );
    assert!(p[0].message.contains("MaxTime 1h"), "{}", p[0].message);
    assert!(
        p[1].message.contains("at least 3h (1 of 4 points"),
        "{}",
        p[1].message
    );
    a.partition = "gpu";
    a.estimate.at_least = Duration::from_secs(60);
    assert!(check(CAPTURED, &a).unwrap().is_empty());
}

#[test]
fn a_down_partition_is_an_error() {
    let p = check("gpu|down|infinite|n1|(null)|idle\n", &ask("gpu", 1)).unwrap();
    assert_eq!(keys(&p), [("partition", Severity::Error)]);
    assert!(p[0].message.contains("is `down`"), "{}", p[0].message);
}

#[test]
fn slurm_times() {
    let t = |s| parse_time(s).map(|d| d.map(|d| d.as_secs()));
    assert_eq!(t("infinite"), Some(None));
    assert_eq!(t("UNLIMITED"), Some(None));
    assert_eq!(t("30"), Some(Some(1800)));
    assert_eq!(t("30:15"), Some(Some(1815)));
    assert_eq!(t("4:00:00"), Some(Some(14_400)));
    assert_eq!(t("2-00"), Some(Some(172_800)));
    assert_eq!(t("1-02:03"), Some(Some(93_780)));
    assert_eq!(t("1-02:03:04"), Some(Some(93_784)));
    assert_eq!(t("soon"), None);
    assert_eq!(t("1:2:3:4"), None);
    assert_eq!(format_time(Duration::from_secs(93_784)), "1-02:03:04");
    assert_eq!(format_time(Duration::from_millis(3_600_001)), "01:00:01");
}

#[test]
fn the_estimate_adds_the_points_of_known_length() {
    let yaml = "name: t\nbackend: vllm\nmodel: m\nport: auto\ncommands: [x]\n\
                benchmark:\n  dataset: {kind: random, input_len: 8, output_len: 8}\n  \
                num_prompts: 100\n  repetitions: 2\n  matrix:\n    \
                request_rate: [inf, 10, 50]\n";
    let task = crate::spec::load_str(std::path::Path::new("t.yaml"), yaml.to_string()).unwrap();
    let plan = crate::plan::build(&task, &crate::plan::PlanContext::new()).unwrap();
    let e = estimate(&plan.deployments[0]);
    // 100 requests at 10/s and at 50/s, twice each: (10 s + 2 s) x 2.
    assert_eq!(e.at_least, Duration::from_secs(24));
    assert_eq!((e.unknown_points, e.points), (1, 3));
    assert_eq!(
        e.to_string(),
        "at least 24s (1 of 3 points have no known length: a request count at an unlimited rate)"
    );
}

#[test]
fn gres_lists() {
    let g = parse_gres("gpu:h100:8(S:0-1),nic:1,gpu:a100:2").unwrap();
    assert_eq!(g.len(), 3);
    assert_eq!(
        g[0],
        Gres {
            name: "gpu".into(),
            kind: Some("h100".into()),
            count: 8
        }
    );
    assert_eq!(g[1].count, 1);
    assert_eq!(gpu_count(&g), 10);
    assert!(parse_gres("(null)").unwrap().is_empty());
    assert_eq!(parse_gres("mem:2G").unwrap()[0].count, 2 << 30);
    assert!(parse_gres("gpu:a:b:c").is_err());
    assert!(parse_sinfo("gpu|up|infinite|n1\n").is_err());
}
