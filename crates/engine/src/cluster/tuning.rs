//! [`Tuning`]: every knob of wattson's cluster policy, declared once with its type, default,
//! range and meaning. `wattson ctld` reads them from `[ctld]` and the simulator from its
//! cluster file's `[wattson]`, both by deserializing this type, so the controller a site runs
//! and the policy the simulator scores have the same knobs and the same defaults.

use serde::{Deserialize, Serialize};

use super::QueueOrder;

/// Declares [`Tuning`]: first the references' settings, which the simulator sets per run and
/// no file names; then each knob once, as `name: type = default` with an optional
/// `in lo to hi` range (inclusive) that [`Tuning::check`] enforces and the schema documents.
macro_rules! knobs {
    (
        $( $(#[$fmeta:meta])* $fixed:ident : $fty:ty = $fdefault:expr ; )*
        ---
        $( $(#[$meta:meta])* $name:ident : $ty:ty = $default:expr $(, in $lo:literal to $hi:literal)? ; )*
    ) => {
        /// Tunables of the cluster policies: wattson's knobs (`[ctld]` of `wattson.toml`,
        /// `[wattson]` of the simulator's cluster file) and the references' Slurm settings.
        #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(default, deny_unknown_fields)]
        pub struct Tuning {
            $(
                $(#[$fmeta])*
                #[serde(skip)]
                pub $fixed: $fty,
            )*
            $(
                $(#[$meta])*
                $(#[schemars(extend("x-allowed" = concat!(stringify!($lo), " to ", stringify!($hi))))])?
                pub $name: $ty,
            )*
        }

        impl Default for Tuning {
            fn default() -> Self {
                Tuning { $($fixed: $fdefault,)* $($name: $default,)* }
            }
        }

        impl Tuning {
            /// The names of the knobs a file may set, in declaration order.
            pub const KEYS: &'static [&'static str] = &[$(stringify!($name)),*];

            /// The first knob outside its range, as `(name, message)`; NaN is outside every
            /// range.
            pub fn check(&self) -> Result<(), (&'static str, String)> {
                $($(
                    if !(($lo as f64)..=($hi as f64)).contains(&self.$name) {
                        return Err((
                            stringify!($name),
                            format!("{} = {}: allowed {} to {}", stringify!($name), self.$name, $lo, $hi),
                        ));
                    }
                )?)*
                Ok(())
            }
        }
    };
}

knobs! {
    /// Slurm's `SuspendTime` for the idle-timer references (s); set per run by the simulator,
    /// not a knob of wattson.
    suspend_time_s: f64 = 1800.0;
    /// The order the reference policies' Slurm keeps (FIFO, Slurm's default; another only as
    /// a what-if); set by the simulator's `[slurm] order`, not a knob of wattson.
    slurm_order: QueueOrder = QueueOrder::Fifo;
    ---
    /// Window of the arrival-rate forecast that sizes the warm set (s).
    forecast_window_s: f64 = 3600.0, in 60 to 86400;
    /// Warm-set horizon beyond the boot time, in break-even times: idle nodes the forecast
    /// needs within `boot_s` plus this many break-even times stay on.
    warm_break_evens: f64 = 1.0, in 0 to 100;
    /// An idle node outside the warm set sleeps after this many break-even times idle (0: at
    /// once; 1: the ski-rental timer).
    keep_break_evens: f64 = 0.0, in 0 to 100;
    /// The warm set is the fewest idle nodes that the forecast demand within its horizon
    /// outgrows with at most this probability (lower keeps more nodes on).
    warm_shortfall: f64 = 0.3, in 0.01 to 0.99;
    /// Pack jobs onto powered nodes (best fit; the controller enacts it through node
    /// weights); `false`: first fit, as Slurm.
    pack: bool = true;
    /// Defer a job that allows it only into an hour at least this much cheaper (a share of
    /// the price now).
    min_price_drop: f64 = 0.2, in 0 to 100;
    /// No job is slowed while fewer than this share of the cluster's GPUs are unallocated (0:
    /// no such gate; 1: DVFS off).
    dvfs_min_free: f64 = 0.0, in 0 to 1;
    /// No job is slowed while the GPUs expected free this far ahead (free now, plus what
    /// running jobs release by then at full speed, less the arrivals forecast) fall below
    /// zero (s; 0: no such gate).
    dvfs_horizon_s: f64 = 0.0, in 0 to 86400;
    /// How far the running jobs a late queued job waits for (all of them while a gate above
    /// is closed) are raised toward full speed: 1, the top level; 0, their own bound; in
    /// between, that share of the bound is given up.
    congestion_raise: f64 = 1.0, in 0 to 1;
    /// A queued job makes the running jobs it waits for be raised only once it has waited
    /// this many times its own run at full speed (its time limit, in the controller; 0: at
    /// once).
    raise_after_runs: f64 = 1.0, in 0 to 100;
    /// Count each GPU's share of its node's base draw (`base_w / gpus`) in a job's level
    /// choice, for as long as the job runs.
    count_node_base: bool = true;
    /// On a cluster of several GPU types, run each job on the type where its predicted
    /// energy under its bound is least (the controller keeps pending jobs that asked for
    /// untyped GPUs off the other types' nodes); `false`: in configuration order, as Slurm.
    type_aware: bool = true;
    /// With `type_aware`, a GPU type where a job is predicted to use more than this multiple
    /// of its best type's energy is not offered to it.
    type_max_cost: f64 = 2.0, in 1 to 1000;
    /// The order queued jobs start in: `fifo` leaves Slurm's order alone; `response-ratio`
    /// starts them by wait per unit of size (the controller gives each pending job a nice by
    /// its rank).
    queue_order: QueueOrder = QueueOrder::Fifo;
    /// With `response-ratio`, the power of a job's GPU-seconds its wait is divided by (0: by
    /// wait alone; 1: per GPU-second).
    size_exponent: f64 = 0.5, in 0 to 4;
    /// The most wattson's DVFS may lengthen the queue's waits, as a share of the waits
    /// without it as the policy observes them (0.05: 5%); below it a job is slowed only while
    /// at least the observed share over the bound of the GPUs is unallocated, past it none
    /// (100: no bound).
    max_wait_cost: f64 = 0.05, in 0 to 100;
    /// A slowed job runs at full speed for the rest of its run once it has fallen this far
    /// behind its full-speed pace (s, as observed from its levels): the most its slowdown
    /// can delay a job that waits for its GPUs (10000000: no such cap).
    max_lag_s: f64 = 600.0, in 0 to 10000000;
    /// With co-location pair data: an opted-in job is started beside a running job the model
    /// pairs it with even where a GPU of its own is free (that GPU's node may then power
    /// down); `false`: only a job that would otherwise wait shares.
    share_first: bool = true;
    /// A pair of opted-in jobs shares a GPU only where together they are predicted to do at
    /// least `1 +` this much of one job's work per second alone (`1/(1+a) + 1/(1+b)`, for
    /// slowdowns `a` and `b`): sharing that gains less saves no energy.
    share_min_gain: f64 = 0.1, in 0 to 1;
    /// A pair of classes the interference model cannot predict (one never measured) is tried
    /// where both jobs' bounds are at least this (100: never): how a cluster without pair data
    /// learns its pairs (`share_learn`), each measured once tried.
    share_try_bound: f64 = 100.0, in 0 to 100;
    /// Co-location pairs are learned on the cluster: each pair's slowdowns, as measured when
    /// its shared run ends, join the model's data (the pair data given, if any, stays as
    /// given) and the model is refitted; a pair that made a job's run break its bound never
    /// shares again. `false`: the model stays as given, and a class whose run broke a bound is
    /// paired no more.
    share_learn: bool = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_within_their_ranges_and_a_value_outside_is_named() {
        Tuning::default().check().unwrap();
        let t = Tuning { warm_shortfall: 1.5, ..Tuning::default() };
        assert_eq!(
            t.check().unwrap_err(),
            ("warm_shortfall", "warm_shortfall = 1.5: allowed 0.01 to 0.99".into())
        );
        let t = Tuning { congestion_raise: f64::NAN, ..Tuning::default() };
        assert_eq!(t.check().unwrap_err().0, "congestion_raise");
    }

    #[test]
    fn a_file_sets_any_knob_and_nothing_else() {
        let t: Tuning =
            serde_json::from_str(r#"{"queue_order": "response-ratio", "dvfs_horizon_s": 600}"#).unwrap();
        assert_eq!((t.queue_order, t.dvfs_horizon_s), (QueueOrder::ResponseRatio, 600.0));
        assert_eq!(t.warm_shortfall, Tuning::default().warm_shortfall, "the rest from the defaults");
        for bad in [r#"{"suspend_time_s": 60}"#, r#"{"slurm_order": "fifo"}"#, r#"{"warm": 1}"#] {
            assert!(serde_json::from_str::<Tuning>(bad).is_err(), "{bad}");
        }
    }
}
