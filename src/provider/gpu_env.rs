//! GPU pinning for processes (local and over SSH): `container.gpu_ids` pins containers
//! through device requests; a process gets the vendor's visibility variables instead —
//! `CUDA_VISIBLE_DEVICES` (NVIDIA), `HIP_VISIBLE_DEVICES` and `ROCR_VISIBLE_DEVICES` (AMD; the
//! vendor comes from `resources.gpu`, NVIDIA when it says nothing). A variable the task sets
//! itself in `env` wins.

use crate::deploy::{GpuVendor, Resources};

use crate::deploy::ContainerOptions;

/// The variables pinning a process to `container.gpu_ids` (none when no ids are given), minus
/// those `env` already sets.
pub fn pinning(
    resources: &Resources,
    container: &ContainerOptions,
    env: &[(String, String)],
) -> Vec<(String, String)> {
    if container.gpu_ids.is_empty() {
        return Vec::new();
    }
    let ids = container.gpu_ids.join(",");
    let vendor = resources
        .gpu
        .as_ref()
        .map_or(GpuVendor::Nvidia, |g| g.vendor);
    let names: &[&str] = match vendor {
        GpuVendor::Nvidia => &["CUDA_VISIBLE_DEVICES"],
        GpuVendor::Amd => &["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"],
    };
    names
        .iter()
        .filter(|n| !env.iter().any(|(name, _)| name == *n))
        .map(|n| (n.to_string(), ids.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::GpuRequest;

    fn pinned(vendor: Option<GpuVendor>, ids: &[&str], env: &[(&str, &str)]) -> Vec<String> {
        let resources = Resources {
            gpu: vendor.map(|vendor| GpuRequest {
                count: 2,
                names: Vec::new(),
                vendor,
            }),
            shm_size: None,
            disk: None,
            cpus: None,
            memory: None,
        };
        let container = ContainerOptions {
            gpu_ids: ids.iter().map(|s| s.to_string()).collect(),
            ..ContainerOptions::default()
        };
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        pinning(&resources, &container, &env)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    }

    #[test]
    fn ids_become_the_vendors_visibility_variables() {
        assert_eq!(pinned(None, &["1", "3"], &[]), ["CUDA_VISIBLE_DEVICES=1,3"]);
        assert_eq!(
            pinned(Some(GpuVendor::Amd), &["0", "1"], &[]),
            ["HIP_VISIBLE_DEVICES=0,1", "ROCR_VISIBLE_DEVICES=0,1"]
        );
        assert!(pinned(Some(GpuVendor::Nvidia), &[], &[]).is_empty());
    }

    #[test]
    fn the_tasks_own_variable_wins() {
        assert_eq!(
            pinned(
                Some(GpuVendor::Amd),
                &["2"],
                &[("HIP_VISIBLE_DEVICES", "5")]
            ),
            ["ROCR_VISIBLE_DEVICES=2"]
        );
    }
}
