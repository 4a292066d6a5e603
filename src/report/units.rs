//! Numbers as `sacct` prints them.
//!
//! Rules learned from Slurm's sources (`src/sacct/print.c`, `src/common/slurm_protocol_api.c`
//! `convert_num_unit2`, `src/common/parse_time.c` `secs2time_str`); the code is written fresh.

/// Energy in joules the way `sacct` prints `ConsumedEnergy`: 0 is `0`; otherwise the value is
/// divided by 1000 while it is at least 1000, each step moving to the next suffix
/// (none, `K`, `M`, `G`, `T`, `P`); a whole result prints as an integer (`999`, `1K`, `2M`),
/// anything else with two decimals (`1.50M`, `1.00K` never occurs: `1000` is `1K`).
pub fn energy(joules: u64) -> String {
    if joules == 0 {
        return "0".to_string();
    }
    const SUFFIX: [&str; 6] = ["", "K", "M", "G", "T", "P"];
    let mut value = joules as f64;
    let mut unit = 0;
    while value >= 1000.0 {
        value /= 1000.0;
        unit += 1;
    }
    let suffix = SUFFIX.get(unit).copied().unwrap_or("?");
    if value.fract() == 0.0 { format!("{}{suffix}", value as u64) } else { format!("{value:.2}{suffix}") }
}

/// A fixed unit for energy (`--units`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// 10^3 J.
    K,
    /// 10^6 J.
    M,
    /// 10^9 J.
    G,
    /// 10^12 J.
    T,
    /// 10^15 J.
    P,
}

impl Unit {
    /// Parses `K`, `M`, `G`, `T` or `P` (either case), as sacct's `--units` takes them.
    pub fn parse(s: &str) -> Result<Unit, String> {
        match s.to_ascii_uppercase().as_str() {
            "K" => Ok(Unit::K),
            "M" => Ok(Unit::M),
            "G" => Ok(Unit::G),
            "T" => Ok(Unit::T),
            "P" => Ok(Unit::P),
            _ => Err(format!("--units={s}: allowed K, M, G, T or P")),
        }
    }

    fn power(self) -> i32 {
        match self {
            Unit::K => 1,
            Unit::M => 2,
            Unit::G => 3,
            Unit::T => 4,
            Unit::P => 5,
        }
    }

    fn suffix(self) -> &'static str {
        ["K", "M", "G", "T", "P"][self.power() as usize - 1]
    }
}

/// Energy in a fixed `unit` (`--units`): the value in that unit, whole as an integer, else
/// with two decimals, and the unit's letter (`1500` J in `K` is `1.50K`; 0 is `0`).
pub fn energy_in(joules: u64, unit: Unit) -> String {
    if joules == 0 {
        return "0".to_string();
    }
    let value = joules as f64 / 1000f64.powi(unit.power());
    let suffix = unit.suffix();
    if value.fract() == 0.0 { format!("{}{suffix}", value as u64) } else { format!("{value:.2}{suffix}") }
}

/// Whole joules as `ConsumedEnergyRaw` prints them: Slurm counts integer joules; wattson's
/// meters count mJ, so the value is rounded to the nearest joule.
pub fn joules_raw(joules: f64) -> u64 {
    if joules.is_finite() && joules > 0.0 { joules.round() as u64 } else { 0 }
}

/// A duration in whole seconds as `sacct` prints `Elapsed`: `HH:MM:SS`, or `D-HH:MM:SS`
/// from one day on.
pub fn elapsed(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 { format!("{d}-{h:02}:{m:02}:{s:02}") } else { format!("{h:02}:{m:02}:{s:02}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn energy_like_consumed_energy() {
        assert_eq!(energy(0), "0");
        assert_eq!(energy(1), "1");
        assert_eq!(energy(999), "999");
        assert_eq!(energy(1000), "1K");
        assert_eq!(energy(1001), "1.00K");
        assert_eq!(energy(1500), "1.50K");
        assert_eq!(energy(999_999), "1000.00K");
        assert_eq!(energy(1_000_000), "1M");
        assert_eq!(energy(1_500_000), "1.50M");
        assert_eq!(energy(1_234_567), "1.23M");
        assert_eq!(energy(2_000_000_000), "2G");
        assert_eq!(energy(3_250_000_000_000), "3.25T");
        assert_eq!(energy(7_000_000_000_000_000), "7P");
    }

    #[test]
    fn raw_joules_round() {
        assert_eq!(joules_raw(0.4), 0);
        assert_eq!(joules_raw(999.5), 1000);
        assert_eq!(joules_raw(-3.0), 0);
        assert_eq!(joules_raw(f64::NAN), 0);
    }

    #[test]
    fn elapsed_like_sacct() {
        assert_eq!(elapsed(0), "00:00:00");
        assert_eq!(elapsed(59), "00:00:59");
        assert_eq!(elapsed(3661), "01:01:01");
        assert_eq!(elapsed(86_399), "23:59:59");
        assert_eq!(elapsed(86_400), "1-00:00:00");
        assert_eq!(elapsed(3 * 86_400 + 4 * 3600 + 5 * 60 + 6), "3-04:05:06");
    }
}
