//! Facts about GPU models that a hosts file's `gpus: 8:H200` implies: memory per GPU and
//! (NVIDIA) compute capability, for matching dstack's `memory`, `total_memory` and
//! `compute_capability` requests; and whether a host's model is one a request names.
//!
//! Owns: the model table and name matching. Does not own: the hosts file (resolve) or which
//! hosts a task gets (plan::preflight).

/// `(model, memory per GPU in GB (10^9 bytes), compute capability)`; the first entry whose
/// name the host's model starts with wins, so longer names come first.
const MODELS: &[(&str, u64, Option<&str>)] = &[
    ("GH200", 96, Some("9.0")),
    ("GB200", 186, Some("10.0")),
    ("B200", 180, Some("10.0")),
    ("B100", 180, Some("10.0")),
    ("H200", 141, Some("9.0")),
    ("H100NVL", 94, Some("9.0")),
    ("H100", 80, Some("9.0")),
    ("H800", 80, Some("9.0")),
    ("H20", 96, Some("9.0")),
    ("A100", 80, Some("8.0")),
    ("A800", 80, Some("8.0")),
    ("A10G", 24, Some("8.6")),
    ("A10", 24, Some("8.6")),
    ("A40", 48, Some("8.6")),
    ("A6000", 48, Some("8.6")),
    ("RTXA6000", 48, Some("8.6")),
    ("L40S", 48, Some("8.9")),
    ("L40", 48, Some("8.9")),
    ("L4", 24, Some("8.9")),
    ("RTX4090", 24, Some("8.9")),
    ("RTX3090", 24, Some("8.6")),
    ("V100", 32, Some("7.0")),
    ("T4", 16, Some("7.5")),
    ("MI355X", 288, None),
    ("MI350X", 288, None),
    ("MI325X", 256, None),
    ("MI300X", 192, None),
    ("MI300A", 128, None),
    ("MI250X", 128, None),
    ("MI250", 128, None),
    ("MI210", 64, None),
];

/// Upper case, letters and digits only: `h100-sxm5` -> `H100SXM5`.
fn normal(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

fn entry(model: &str) -> Option<&'static (&'static str, u64, Option<&'static str>)> {
    let m = normal(model);
    MODELS.iter().find(|(name, _, _)| m.starts_with(name))
}

/// Memory of one GPU of `model` in bytes, when the model is known.
pub fn memory_bytes(model: &str) -> Option<u64> {
    entry(model).map(|(_, gb, _)| gb * 1_000_000_000)
}

/// CUDA compute capability of `model` (`9.0`), when it is a known NVIDIA model.
pub fn compute_capability(model: &str) -> Option<&'static str> {
    entry(model).and_then(|(_, _, cc)| *cc)
}

/// Whether the host's `model` is the requested `name` (`H100` matches `H100-SXM5-80GB`,
/// not `H100NVL`'s other spellings of another model; case and punctuation do not count).
pub fn is_model(model: &str, name: &str) -> bool {
    let (m, n) = (normal(model), normal(name));
    if m == n {
        return true;
    }
    // A longer known model that also starts with the name (H100NVL vs H100) is another model.
    m.starts_with(&n) && entry(model).is_none_or(|(known, _, _)| known.len() <= n.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_are_known_by_their_usual_spellings() {
        assert_eq!(memory_bytes("H200"), Some(141_000_000_000));
        assert_eq!(memory_bytes("mi300x"), Some(192_000_000_000));
        assert_eq!(memory_bytes("NVIDIA H100 80GB HBM3").map(|_| ()), None);
        assert_eq!(compute_capability("H100-SXM5"), Some("9.0"));
        assert_eq!(compute_capability("MI300X"), None);
        assert!(is_model("H100-SXM5-80GB", "H100"));
        assert!(is_model("h200", "H200"));
        assert!(!is_model("H100NVL", "H100"));
        assert!(!is_model("H200", "H100"));
        assert!(!is_model("L40S", "L4"));
    }
}
