//! `key=value` overrides of a cluster file for experiments (the examples' arguments): a
//! `[wattson]` knob, `order` (every policy's queue order), `slurm_order` (the references'
//! only), `suspend_time_s` (the idle-timer references' one `SuspendTime`), `budget_w`, `perfect` (1: the perfect-knowledge what-if), `max_factor` (`[limits]`)
//! `max_bound` (every job's slowdown bound capped at this value) `share_fraction`,
//! `share_gpus` or `share_bound` (`[hints]`), or `colocation_json` (empty: no pair data, so no
//! job shares).

use super::SimError;
use super::cluster::{Budget, ClusterConfig};

/// Applies one `key=value` override to `c`.
pub fn apply(c: &mut ClusterConfig, kv: &str) -> Result<(), SimError> {
    let bad = |why: &str| SimError::Input(format!("override `{kv}`: {why}"));
    let (k, v) = kv.split_once('=').ok_or_else(|| bad("expected key=value"))?;
    let num = || v.parse::<f64>().map_err(|_| bad("the value is not a number"));
    let order = || v.parse().map_err(|_| bad("the order is fifo or response-ratio"));
    match k {
        "budget_w" => c.budget = Some(Budget { power_w: num()? }),
        "slurm_order" => c.slurm.order = order()?,
        "order" => {
            c.slurm.order = order()?;
            c.wattson.tuning.queue_order = c.slurm.order;
        }
        "perfect" => c.limits.perfect = num()? != 0.0,
        "max_factor" => c.limits.max_factor = num()?,
        // The idle-timer references run at this one SuspendTime only.
        "suspend_time_s" => {
            let t = num()?;
            if !(t > 0.0 && t.is_finite()) {
                return Err(bad("a SuspendTime in seconds, above 0"));
            }
            c.slurm.suspend_times_s = vec![t];
        }
        // Empty: no pair data, so no job shares (opted-in jobs keep their `share_bound`).
        "colocation_json" => c.colocation_json = (!v.is_empty()).then(|| v.to_string()),
        "share_fraction" => {
            let f = num()?;
            if !(0.0..=1.0).contains(&f) {
                return Err(bad("a fraction from 0 to 1"));
            }
            c.hints.share_fraction = f;
        }
        "share_gpus" => {
            c.hints.share_gpus =
                v.parse().ok().filter(|g| (1..=c.gpus_per_node).contains(g)).ok_or_else(|| {
                    bad(&format!(
                        "a GPU count from 1 to a node's {} (a job shares on one node)",
                        c.gpus_per_node
                    ))
                })?;
        }
        "share_bound" => {
            let b = num()?;
            if !(0.0..=10.0).contains(&b) {
                return Err(bad("a slowdown bound from 0 to 10"));
            }
            c.hints.share_bound = b;
        }
        "max_bound" => {
            let cap = num()?;
            for p in &mut c.hints.slowdown {
                p[0] = p[0].min(cap);
            }
        }
        _ => c.wattson.set_pair(kv)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::SMALL;

    #[test]
    fn sharing_overrides_set_the_opt_in_and_can_drop_the_pair_data() {
        let mut c =
            ClusterConfig::from_toml(&format!("colocation_json = \"g.json\"\n{SMALL}"), "s.toml").unwrap();
        apply(&mut c, "share_fraction=0.5").unwrap();
        apply(&mut c, "share_bound=0.4").unwrap();
        assert_eq!((c.hints.share_fraction, c.hints.share_bound), (0.5, 0.4));
        assert_eq!(c.colocation_json.as_deref(), Some("g.json"));
        apply(&mut c, "colocation_json=").unwrap();
        assert_eq!(c.colocation_json, None);
        let err = apply(&mut c, "share_fraction=2").unwrap_err().to_string();
        assert!(err.contains("override `share_fraction=2`: a fraction from 0 to 1"), "{err}");
        assert!(apply(&mut c, "share_bound=11").is_err());
        // Jobs of up to a node's 8 GPUs may share; not more, nor none.
        assert_eq!(c.hints.share_gpus, 1, "1-GPU jobs only by default");
        apply(&mut c, "share_gpus=8").unwrap();
        assert_eq!(c.hints.share_gpus, 8);
        for bad in ["share_gpus=9", "share_gpus=0", "share_gpus=two"] {
            let err = apply(&mut c, bad).unwrap_err().to_string();
            assert!(err.contains("a GPU count from 1 to a node's 8"), "{err}");
        }
        let file = |g: u32| {
            let text = SMALL.replace("[hints]", &format!("[hints]\nshare_gpus = {g}"));
            ClusterConfig::from_toml(&text, "s.toml").map(|c| c.hints.share_gpus)
        };
        assert_eq!(file(4).unwrap(), 4);
        assert!(file(9).unwrap_err().to_string().contains("hints.share_gpus = 9: allowed 1..=8"));
    }

    #[test]
    fn suspend_time_runs_the_timer_at_that_one_setting_and_nothing_else() {
        let mut c = ClusterConfig::from_toml(SMALL, "s.toml").unwrap();
        apply(&mut c, "suspend_time_s=300").unwrap();
        assert_eq!(c.slurm.suspend_times_s, vec![300.0]);
        for bad in ["suspend_time_s=0", "suspend_time_s=-5", "suspend_time_s=inf", "suspend_time_s=x"] {
            assert!(apply(&mut c, bad).is_err(), "{bad}");
        }
        assert_eq!(c.slurm.suspend_times_s, vec![300.0], "a refused value changes nothing");
    }
}
