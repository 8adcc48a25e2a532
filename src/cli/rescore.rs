//! `--goodput` and `--trim` of `report`, `compare` and `check`: score archived runs again
//! under new goodput SLOs or a new warm-up and cool-down, from their per-request records,
//! without running anything (`archive::rescore`).

use anyhow::anyhow;

use crate::archive::Rescore;

/// The re-scoring flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RescoreArgs {
    /// Re-score goodput, attainment and a search's verdicts against these SLOs, from the
    /// archived per-request records: vLLM's form, `--goodput ttft:2000 tpot:50` (KEY:MS with
    /// KEY ttft, tpot or e2el).
    #[arg(long, num_args = 1.., value_name = "KEY:MS")]
    pub goodput: Vec<String>,
    /// Re-score with this warm-up and cool-down left out of the measured window:
    /// WARMUP[:COOLDOWN], e.g. `30s:10s`.
    #[arg(long, value_name = "WARMUP[:COOLDOWN]")]
    pub trim: Option<String>,
}

impl RescoreArgs {
    /// The flags checked: bad SLOs or durations are bad input.
    pub fn rescore(&self) -> anyhow::Result<Rescore> {
        let goodput = if self.goodput.is_empty() {
            None
        } else {
            let slos = crate::load::parse_slos(&self.goodput.join(" "))
                .map_err(|e| anyhow!("--goodput {e}"))?;
            Some(slos)
        };
        let trim = self
            .trim
            .as_deref()
            .map(Rescore::parse_trim)
            .transpose()
            .map_err(|e| anyhow!(e))?;
        Ok(Rescore { goodput, trim })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_a_rescore_or_are_refused() {
        let args = RescoreArgs {
            goodput: vec!["ttft:2000 tpot:50".into()],
            trim: Some("30s:10s".into()),
        };
        let r = args.rescore().unwrap();
        assert_eq!(r.goodput.unwrap().len(), 2);
        let (w, c) = r.trim.unwrap();
        assert_eq!((w.as_secs(), c.as_secs()), (30, 10));
        assert!(RescoreArgs::default().rescore().unwrap().is_empty());
        let bad = RescoreArgs {
            goodput: vec!["itl:5".into()],
            trim: None,
        };
        assert!(bad.rescore().unwrap_err().to_string().contains("--goodput"));
        let bad = RescoreArgs {
            goodput: Vec::new(),
            trim: Some("soon".into()),
        };
        assert!(bad.rescore().unwrap_err().to_string().contains("--trim"));
    }
}
