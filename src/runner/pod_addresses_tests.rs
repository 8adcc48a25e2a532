//! Unit tests of the pod address tokens' replacement.

use super::*;

fn started(key: &str) -> Option<String> {
    match key {
        "server-0" => Some("10.1.0.7".to_string()),
        "prefill-1" => Some("10.1.0.9".to_string()),
        _ => None,
    }
}

#[test]
fn own_token_is_the_kubelets_pod_ip_and_started_ones_are_their_ips() {
    let leader = KubePlace::address_token("server", 0);
    let own = KubePlace::address_token("server", 1);
    let prefill = KubePlace::address_token("prefill", 1);
    let text = format!("serve --master {leader}:5000 --host {own} --peer http://{prefill}:8000/x");
    let out = replace(&text, "server-1", &started).unwrap();
    assert_eq!(
        out,
        "serve --master 10.1.0.7:5000 --host $(POD_IP) --peer http://10.1.0.9:8000/x"
    );
}

#[test]
fn a_token_of_an_instance_not_started_yet_is_an_error_naming_both() {
    let later = KubePlace::address_token("decode", 0);
    let err = replace(&format!("route {later}"), "router-0", &started).unwrap_err();
    assert_eq!(err.key, "router-0");
    assert_eq!(err.named, "decode-0");
    assert!(err.to_string().contains("has not started yet"), "{err}");
}

#[test]
fn text_without_a_complete_token_is_kept() {
    assert_eq!(replace("a <k8s:x", "y-0", &started).unwrap(), "a <k8s:x");
    assert_eq!(replace("plain", "y-0", &started).unwrap(), "plain");
}

#[test]
fn hosts_of_urls() {
    assert_eq!(host_of("http://10.0.0.1:8000"), "10.0.0.1");
    assert_eq!(host_of("http://[fd00::1]:8000/v1"), "fd00::1");
    assert_eq!(host_of("localhost:80"), "localhost");
}

#[test]
fn a_pods_url_for_a_router_is_its_ip_and_other_urls_keep_the_planned_address() {
    let token = KubePlace::address_token("prefill", 0);
    assert_eq!(
        url_of(&token, 30001, "http://10.1.0.9:30001"),
        "http://10.1.0.9:30001"
    );
    assert_eq!(
        url_of(&token, 30001, "http://[fd00::9]:30001"),
        "http://[fd00::9]:30001"
    );
    // Elsewhere the plan's address stays, even where orchestrate reaches the server through
    // a tunnel on loopback.
    assert_eq!(
        url_of("10.0.0.2", 8000, "http://127.0.0.1:40123"),
        "http://10.0.0.2:8000"
    );
}
