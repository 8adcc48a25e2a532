//! `points/<point>/timeseries.json`: a point's client and server series on the run's clock
//! ([`TimeSeries`], docs/archive.md), written once when the point's load ends, read back typed
//! by the report.

use std::path::Path;

use super::ArchiveError;
use super::atomic::write_atomic;
use super::run_dir::Archive;
use crate::metrics::TimeSeries;

/// The file name beside the point's summary.json.
pub const TIMESERIES: &str = "timeseries.json";

impl Archive {
    /// Write a point's series (one compact JSON document, all or nothing).
    pub fn write_timeseries(
        &self,
        dir_name: &str,
        series: &TimeSeries,
    ) -> Result<(), ArchiveError> {
        let path = self.point_dir(dir_name)?.join(TIMESERIES);
        let mut value = serde_json::to_value(series).map_err(|e| ArchiveError::Invalid {
            path: path.clone(),
            message: e.to_string(),
        })?;
        crate::plan::secrets::redact_json(&mut value);
        let mut text = value.to_string();
        text.push('\n');
        write_atomic(&path, text.as_bytes())
    }
}

/// The series in `point_dir`; `None` when the point has none (time series off, an external
/// tool's point, an older archive) or it does not read.
pub fn read_timeseries(point_dir: &Path) -> Option<TimeSeries> {
    let text = std::fs::read_to_string(point_dir.join(TIMESERIES)).ok()?;
    match serde_json::from_str(&text) {
        Ok(series) => Some(series),
        Err(e) => {
            tracing::warn!(
                "{} does not read ({e}); its point is drawn without a time series",
                point_dir.join(TIMESERIES).display()
            );
            None
        }
    }
}
