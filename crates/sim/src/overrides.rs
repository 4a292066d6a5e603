//! `key=value` overrides of a cluster file for experiments (the examples' arguments): a
//! `[wattson]` knob, `order` (every policy's queue order), `slurm_order` (the references'
//! only), `budget_w`, `perfect` (1: the perfect-knowledge what-if), `max_factor` (`[limits]`)
//! `max_bound` (every job's slowdown bound capped at this value) `share_fraction` or `share_bound`
//! (`[hints]`).

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
            c.wattson.queue_order = c.slurm.order;
        }
        "perfect" => c.limits.perfect = num()? != 0.0,
        "max_factor" => c.limits.max_factor = num()?,
        "share_fraction" => {
            let f = num()?;
            if !(0.0..=1.0).contains(&f) {
                return Err(bad("a fraction from 0 to 1"));
            }
            c.hints.share_fraction = f;
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
