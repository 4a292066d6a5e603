//! Electricity prices and the grid's carbon intensity by hour of day, and the cheapest time to
//! start deferrable work.

use serde::Deserialize;

/// `[prices]` in `wattson.toml`: a time-of-use tariff.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceSchedule {
    /// Price per kWh for each hour of the day, in UTC, from 00:00 to 23:00 (24 values);
    /// empty means no tariff, so nothing is deferred.
    #[serde(default, deserialize_with = "hourly")]
    #[schemars(extend("x-allowed" = HOURLY))]
    pub hourly_utc: Vec<f64>,
}

/// `[carbon]` in `wattson.toml`: the grid's carbon intensity by hour of day.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CarbonIntensity {
    /// Grams of CO2 per kWh for each hour of the day, in UTC, from 00:00 to 23:00 (24 values);
    /// empty means unknown, so reports show no CO2.
    #[serde(default, deserialize_with = "hourly")]
    #[schemars(extend("x-allowed" = HOURLY))]
    pub hourly_utc: Vec<f64>,
}

impl CarbonIntensity {
    /// The intensity (g/kWh) at `t_s` (seconds since the epoch), if there is a table.
    pub fn at(&self, t_s: i64) -> Option<f64> {
        hour_of(&self.hourly_utc, t_s)
    }
}

fn hour_of(hourly_utc: &[f64], t_s: i64) -> Option<f64> {
    hourly_utc.get((t_s.rem_euclid(86_400) / 3600) as usize).copied()
}

/// What `hourly_utc` accepts.
const HOURLY: &str = "24 values each >= 0, or none";

fn hourly<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let values = Vec::<f64>::deserialize(d)?;
    if (!values.is_empty() && values.len() != 24) || values.iter().any(|p| !p.is_finite() || *p < 0.0) {
        return Err(serde::de::Error::custom(format!(
            "hourly_utc needs {HOURLY} (one per UTC hour), got {}",
            values.len()
        )));
    }
    Ok(values)
}

impl PriceSchedule {
    /// The price at `t_s` (seconds since the epoch), if there is a tariff.
    pub fn price_at(&self, t_s: i64) -> Option<f64> {
        hour_of(&self.hourly_utc, t_s)
    }

    /// The earliest start within `[now_s, now_s + window_s]` at the lowest price: `now_s`
    /// itself unless a later hour is strictly cheaper. Deferral goes by
    /// [`PriceSchedule::deferred_start`].
    fn cheapest_start(&self, now_s: i64, window_s: i64) -> i64 {
        let Some(mut best_price) = self.price_at(now_s) else { return now_s };
        let mut best = now_s;
        let mut t = (now_s / 3600 + 1) * 3600;
        while t <= now_s + window_s {
            let price = self.price_at(t).unwrap_or(best_price);
            if price < best_price {
                (best, best_price) = (t, price);
            }
            t += 3600;
        }
        best
    }

    /// When a job that allows `window_s` of deferral from `now_s` should start: the cheapest
    /// start within the window where its price is at least `min_drop` (a share) below the
    /// price now, else `now_s`. job_submit and the simulator defer by it alike.
    pub fn deferred_start(&self, now_s: i64, window_s: i64, min_drop: f64) -> i64 {
        let best = self.cheapest_start(now_s, window_s);
        match (self.price_at(now_s), self.price_at(best)) {
            (Some(now), Some(then)) if best > now_s && then <= now * (1.0 - min_drop) => best,
            _ => now_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn night_tariff() -> PriceSchedule {
        // 0.10 from 00:00 to 05:59 UTC, 0.30 otherwise.
        PriceSchedule { hourly_utc: (0..24).map(|h| if h < 6 { 0.10 } else { 0.30 }).collect() }
    }

    #[test]
    fn a_deferred_start_needs_an_hour_at_least_min_drop_cheaper() {
        let evening = 20_000 * 86_400 + 20 * 3600 + 17 * 60; // 20:17 UTC
        let night = 20_001 * 86_400;
        // Night is 2/3 cheaper than evening.
        assert_eq!(night_tariff().deferred_start(evening, 6 * 3600, 0.2), night);
        assert_eq!(night_tariff().deferred_start(evening, 6 * 3600, 0.6), night);
        assert_eq!(night_tariff().deferred_start(evening, 6 * 3600, 0.7), evening);
        assert_eq!(night_tariff().deferred_start(evening, 3 * 3600, 0.0), evening, "none within 3 h");
        assert_eq!(PriceSchedule::default().deferred_start(evening, 6 * 3600, 0.0), evening, "no tariff");
    }

    #[test]
    fn deferral_waits_for_the_cheap_hours_within_the_window() {
        let day = 20_000 * 86_400;
        let evening = day + 20 * 3600 + 17 * 60; // 20:17 UTC
        assert_eq!(night_tariff().cheapest_start(evening, 6 * 3600), day + 86_400); // next 00:00
        assert_eq!(night_tariff().cheapest_start(evening, 3 * 3600), evening, "no cheaper hour within 3 h");
        let night = day + 2 * 3600 + 5;
        assert_eq!(night_tariff().cheapest_start(night, 6 * 3600), night, "already cheap: start now");
        assert_eq!(PriceSchedule::default().cheapest_start(evening, 6 * 3600), evening);
    }

    #[test]
    fn a_tariff_needs_24_prices() {
        let e = toml::from_str::<PriceSchedule>("hourly_utc = [0.1, 0.2]").unwrap_err();
        assert!(e.to_string().contains("needs 24 values"), "{e}");
    }
}
