//! GPU telemetry (issue #26), the pure part: the typed sample, parsers for the tools' output
//! (nvidia-smi's CSV query mode, the DCGM exporter's `/metrics`, amd-smi's and rocm-smi's
//! JSON, the last three framed per sample by the sampler's loop: `framed`) and the figures
//! of a measured window (energy, joules per token, power per GPU and per role, cost per
//! million tokens), and the sampler's command and log (`sampler`).
//! Nothing here runs a command or reads a clock: `runner::telemetry` runs the sampler
//! beside each point (see docs/metrics.md).

pub mod amd;
pub mod dcgm;
pub mod figures;
pub mod framed;
pub mod nvidia_smi;
pub mod sampler;

/// Which GPU a sample is of: the index the tool printed (it can change at each boot) and,
/// where the tool gives one, the UUID, which is the key to trust.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuId {
    pub host: String,
    pub index: Option<u32>,
    pub uuid: Option<String>,
}

impl GpuId {
    /// The key to group samples by: the UUID where there is one, else the index.
    pub fn key(&self) -> String {
        match (&self.uuid, self.index) {
            (Some(u), _) => format!("{}/{u}", self.host),
            (None, Some(i)) => format!("{}/{i}", self.host),
            (None, None) => format!("{}/?", self.host),
        }
    }
}

/// One reading of one GPU. Every quantity is optional: a tool may not report it, or may
/// report it as unsupported (`[N/A]`, `"N/A"`, a DCGM blank sentinel).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sample {
    pub gpu: GpuId,
    /// Seconds on the run's clock (the caller's origin; see `nvidia_smi::parse_timestamp`).
    pub t: f64,
    /// Board power, W (nvidia-smi `power.draw`: a 1 s average on Ampere and newer).
    pub power_w: Option<f64>,
    /// The cumulative energy counter, J (DCGM's mJ and amd-smi's J converted), where the
    /// tool has one; nvidia-smi has none.
    pub energy_j: Option<f64>,
    /// GPU utilization, %.
    pub util_pct: Option<f64>,
    /// Memory used and total, MiB.
    pub mem_used_mib: Option<f64>,
    pub mem_total_mib: Option<f64>,
    /// GPU (or AMD hotspot) temperature, degrees C.
    pub temp_c: Option<f64>,
    /// SM (or AMD gfx) clock, MHz.
    pub sm_clock_mhz: Option<f64>,
    /// Clock event (throttle) reasons, where the tool reports them.
    pub throttle: Option<Throttle>,
}

/// Clock event ("throttle") reasons: NVML's bitmask, or AMD's coarse throttle status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttle {
    /// NVML `nvmlClocksEventReason*` bits (nvidia-smi prints them in hex, DCGM in decimal).
    Nvidia(u64),
    /// amd-smi `power.throttle_status`: THROTTLED or UNTHROTTLED.
    Amd { throttled: bool },
}

/// NVML clock event reason bits and their names (nvml.h `nvmlClocksEventReason*`).
pub const NVIDIA_REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The bits that mean the cooling or the platform held the clocks down (not the power cap).
const THERMAL_OR_HW: u64 = 0x8 | 0x20 | 0x40 | 0x80;

impl Throttle {
    /// The reasons set, by name; an unknown NVIDIA bit reads as `bit_0x...`.
    pub fn names(&self) -> Vec<String> {
        match *self {
            Throttle::Nvidia(mask) => {
                let mut out = Vec::new();
                for bit in 0..64 {
                    let b = 1u64 << bit;
                    if mask & b == 0 {
                        continue;
                    }
                    match NVIDIA_REASONS.iter().find(|(m, _)| *m == b) {
                        Some((_, name)) => out.push((*name).to_string()),
                        None => out.push(format!("bit_{b:#x}")),
                    }
                }
                out
            }
            Throttle::Amd { throttled: true } => vec!["throttled".to_string()],
            Throttle::Amd { throttled: false } => Vec::new(),
        }
    }

    /// Held at the power limit (NVIDIA's SW power cap); expected at full load.
    pub fn power_capped(&self) -> bool {
        matches!(*self, Throttle::Nvidia(m) if m & 0x4 != 0)
    }

    /// Slowed by temperature or hardware: the cooling or the platform is at fault.
    pub fn thermal_or_hw(&self) -> bool {
        match *self {
            Throttle::Nvidia(m) => m & THERMAL_OR_HW != 0,
            Throttle::Amd { throttled } => throttled,
        }
    }
}

/// A number cell, or `None` where the tool says it has none.
pub(crate) fn number(cell: &str) -> Result<Option<f64>, String> {
    let cell = cell.trim();
    if cell.is_empty() || cell.starts_with('[') || cell.starts_with("N/A") {
        return Ok(None);
    }
    cell.parse::<f64>()
        .map(|x| x.is_finite().then_some(x))
        .map_err(|_| format!("`{cell}` is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_bits_decode_by_name_and_class() {
        let idle = Throttle::Nvidia(0x1);
        assert_eq!(idle.names(), vec!["gpu_idle"]);
        assert!(!idle.power_capped() && !idle.thermal_or_hw());
        let cap = Throttle::Nvidia(0x4);
        assert!(cap.power_capped() && !cap.thermal_or_hw());
        let hot = Throttle::Nvidia(0x40 | 0x8 | 0x1000);
        assert_eq!(
            hot.names(),
            vec!["hw_slowdown", "hw_thermal_slowdown", "bit_0x1000"]
        );
        assert!(hot.thermal_or_hw());
        assert_eq!(Throttle::Amd { throttled: true }.names(), vec!["throttled"]);
    }

    #[test]
    fn cells_that_say_absent_read_as_none() {
        for cell in [
            "[N/A]",
            "[Not Supported]",
            "[Unknown Error]",
            "N/A",
            " ",
            "N/A (Secondary die)",
        ] {
            assert_eq!(number(cell), Ok(None), "{cell}");
        }
        assert_eq!(number(" 79.41 "), Ok(Some(79.41)));
        assert!(number("79 W").is_err());
    }

    #[test]
    fn gpu_key_prefers_the_uuid() {
        let mut id = GpuId {
            host: "h".into(),
            index: Some(3),
            uuid: None,
        };
        assert_eq!(id.key(), "h/3");
        id.uuid = Some("GPU-x".into());
        assert_eq!(id.key(), "h/GPU-x");
    }
}
