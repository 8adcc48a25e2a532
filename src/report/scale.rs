//! Chart axes: the value range of an axis (linear from zero, or log2 between powers of two),
//! where a value falls on it, its ticks and their labels. Drawing is svg's.

/// How values map to positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// From zero (or the minimum when negative) to a rounded maximum.
    Linear,
    /// Powers of two (concurrency 1, 2, 4, ... 128).
    Log2,
}

/// The value range of an axis.
pub(super) struct Range {
    lo: f64,
    hi: f64,
    scale: Scale,
}

impl Range {
    pub(super) fn new(values: &[f64], scale: Scale) -> Self {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if finite.is_empty() {
            return Self {
                lo: 0.0,
                hi: 1.0,
                scale: Scale::Linear,
            };
        }
        match scale {
            Scale::Log2 if min > 0.0 => {
                let lo = 2f64.powf(min.log2().floor());
                let mut hi = 2f64.powf(max.log2().ceil());
                if hi <= lo {
                    hi = lo * 2.0;
                }
                Self { lo, hi, scale }
            }
            _ => {
                let lo = if min < 0.0 { min } else { 0.0 };
                // 3 % headroom so markers on the maximum are not cut by the frame.
                let max = max * 1.03;
                let step = nice_step((max - lo).max(f64::EPSILON) / 5.0);
                let mut hi = (max / step).ceil() * step;
                if hi <= lo {
                    hi = lo + step;
                }
                Self {
                    lo,
                    hi,
                    scale: Scale::Linear,
                }
            }
        }
    }

    pub(super) fn map(&self, v: f64, from: f64, to: f64) -> f64 {
        let t = match self.scale {
            Scale::Log2 => (v.log2() - self.lo.log2()) / (self.hi.log2() - self.lo.log2()),
            Scale::Linear => (v - self.lo) / (self.hi - self.lo),
        };
        from + t * (to - from)
    }

    pub(super) fn ticks(&self) -> Vec<f64> {
        match self.scale {
            Scale::Log2 => {
                let mut out = Vec::new();
                let mut t = self.lo;
                while t <= self.hi * 1.000_001 {
                    out.push(t);
                    t *= 2.0;
                }
                out
            }
            Scale::Linear => {
                let step = nice_step((self.hi - self.lo) / 5.0);
                let mut out = Vec::new();
                let mut i = (self.lo / step).ceil() as i64;
                loop {
                    let t = i as f64 * step;
                    if t > self.hi * 1.000_001 || out.len() > 20 {
                        break;
                    }
                    out.push(t);
                    i += 1;
                }
                out
            }
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

/// A tick label: `12k` from ten thousand on, else as tables print numbers.
pub(super) fn tick_text(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else {
        crate::units::number(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(170.0), 200.0);
        assert_eq!(nice_step(1000.0), 1000.0);
    }
}
