//! GPU requests -> the container-create body. NVIDIA GPUs go through a device request (the
//! NVIDIA Container Toolkit's `--gpus`); AMD GPUs through the `/dev/kfd` and `/dev/dri`
//! devices, the `video` group and `seccomp=unconfined`, as the ROCm images expect. Pure:
//! nothing here talks to the engine or looks at the host.

use bollard::models::{DeviceMapping, DeviceRequest, HostConfig};

use crate::deploy::{GpuRequest, GpuVendor};

/// The AMD devices a ROCm container needs.
pub(crate) const AMD_DEVICES: [&str; 2] = ["/dev/kfd", "/dev/dri"];

/// Add what `gpu` asks for to `host` (and `env`, for AMD GPUs pinned by id).
/// `ids` pins devices instead of a count; with no request nothing changes.
pub(crate) fn apply(
    gpu: Option<&GpuRequest>,
    ids: &[String],
    host: &mut HostConfig,
    env: &mut Vec<String>,
) {
    let Some(gpu) = gpu else { return };
    if gpu.count == 0 && ids.is_empty() {
        return;
    }
    match gpu.vendor {
        GpuVendor::Nvidia => {
            let (count, device_ids) = if ids.is_empty() {
                (Some(i64::from(gpu.count)), None)
            } else {
                (None, Some(ids.to_vec()))
            };
            host.device_requests
                .get_or_insert_with(Vec::new)
                .push(DeviceRequest {
                    driver: None,
                    count,
                    device_ids,
                    capabilities: Some(vec![vec!["gpu".to_string()]]),
                    options: None,
                });
        }
        GpuVendor::Amd => {
            let devices = host.devices.get_or_insert_with(Vec::new);
            for path in AMD_DEVICES {
                devices.push(DeviceMapping {
                    path_on_host: Some(path.to_string()),
                    path_in_container: Some(path.to_string()),
                    cgroup_permissions: Some("rwm".to_string()),
                });
            }
            push_unique(host.group_add.get_or_insert_with(Vec::new), "video");
            push_unique(
                host.security_opt.get_or_insert_with(Vec::new),
                "seccomp=unconfined",
            );
            if !ids.is_empty() {
                env.push(format!("ROCR_VISIBLE_DEVICES={}", ids.join(",")));
            }
        }
    }
}

fn push_unique(list: &mut Vec<String>, value: &str) {
    if !list.iter().any(|v| v == value) {
        list.push(value.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(vendor: GpuVendor, count: u32) -> GpuRequest {
        GpuRequest {
            count,
            names: vec![],
            vendor,
        }
    }

    #[test]
    fn nvidia_count_becomes_one_device_request() {
        let mut host = HostConfig::default();
        let mut env = vec![];
        apply(
            Some(&request(GpuVendor::Nvidia, 8)),
            &[],
            &mut host,
            &mut env,
        );
        let body = serde_json::to_value(&host).unwrap();
        assert_eq!(
            body["DeviceRequests"],
            serde_json::json!([{"Count": 8, "Capabilities": [["gpu"]]}])
        );
        assert!(body.get("Devices").is_none());
        assert!(env.is_empty());
    }

    #[test]
    fn nvidia_ids_replace_the_count() {
        let mut host = HostConfig::default();
        let mut env = vec![];
        let ids = vec!["0".to_string(), "GPU-3f2a".to_string()];
        apply(
            Some(&request(GpuVendor::Nvidia, 2)),
            &ids,
            &mut host,
            &mut env,
        );
        let body = serde_json::to_value(&host).unwrap();
        assert_eq!(
            body["DeviceRequests"],
            serde_json::json!([{"DeviceIDs": ["0", "GPU-3f2a"], "Capabilities": [["gpu"]]}])
        );
    }

    #[test]
    fn amd_maps_kfd_and_dri_with_video_group_and_unconfined_seccomp() {
        let mut host = HostConfig::default();
        let mut env = vec![];
        apply(Some(&request(GpuVendor::Amd, 8)), &[], &mut host, &mut env);
        let body = serde_json::to_value(&host).unwrap();
        assert_eq!(
            body["Devices"],
            serde_json::json!([
                {"PathOnHost": "/dev/kfd", "PathInContainer": "/dev/kfd", "CgroupPermissions": "rwm"},
                {"PathOnHost": "/dev/dri", "PathInContainer": "/dev/dri", "CgroupPermissions": "rwm"},
            ])
        );
        assert_eq!(body["GroupAdd"], serde_json::json!(["video"]));
        assert_eq!(
            body["SecurityOpt"],
            serde_json::json!(["seccomp=unconfined"])
        );
        assert!(body.get("DeviceRequests").is_none());
        assert!(env.is_empty());
    }

    #[test]
    fn amd_ids_restrict_visibility_through_rocr() {
        let mut host = HostConfig::default();
        let mut env = vec![];
        let ids = vec!["2".to_string(), "3".to_string()];
        apply(Some(&request(GpuVendor::Amd, 2)), &ids, &mut host, &mut env);
        assert_eq!(env, vec!["ROCR_VISIBLE_DEVICES=2,3"]);
    }

    #[test]
    fn no_request_or_zero_gpus_changes_nothing() {
        let mut host = HostConfig::default();
        let mut env = vec![];
        apply(None, &[], &mut host, &mut env);
        apply(
            Some(&request(GpuVendor::Nvidia, 0)),
            &[],
            &mut host,
            &mut env,
        );
        assert_eq!(host, HostConfig::default());
        assert!(env.is_empty());
    }
}
