//! The yardstick's resolution on issue 52's 27 cells: how far Slurm's idle timer
//! (`slurm-powersave` at its least-energy `SuspendTime`) moves against itself when every job
//! of the trace runs a few seconds shorter or longer (at least 1 s), a change no policy's
//! waits should answer by more than a hair. Per cell, the timer's imposed mean and p99 wait
//! (means over the seeds, FIFO order), and each shift's change to them; then, per shift, the
//! cells where the shifted timer's waits are no longer than its own and those where they are
//! more than 2% longer, and the cells where some shift is more than 2% longer: there a 2% wait
//! target cannot tell a policy's cost from the queue's chaos.
//!
//! Run: `cargo run --release -p wattson-sim --example resolution [-- SEEDS [key=value...]]`
//! (default 3 seeds; the keys are [`wattson_sim::overrides`]', e.g. `suspend_time_s=300` to
//! run the timer at that one setting). Runs the cells on every core. Reads
//! `etc/sim/cluster.toml` and `data/`.

mod common;

use common::{cell, pct, read, seeds_and_cluster};
use wattson_sim::{Catalog, ClusterPolicy};

/// The shifts to every job's run, in seconds.
const SHIFTS_S: [f64; 4] = [-10.0, -1.0, 1.0, 10.0];

/// The timer's change past which a wait target of 2% cannot tell cost from chaos.
const TARGET: f64 = 2.0;

fn main() {
    let (seeds, base) = seeds_and_cluster(3);
    let catalog =
        Catalog::from_zeus_csv(&read("data/dvfs/zeus-power-limit/summary_power_v100.csv"), "zeus").unwrap();
    let timer = [ClusterPolicy::SlurmPowersave];
    let cells = wattson_sim::trace::itp_cells();
    // Per cell, the timer's (imposed mean, imposed p99) means: on the trace as it is, then
    // on each shift.
    let results = wattson_sim::parallel::map(&cells, |&(trace_name, nodes)| {
        let (trace, c) = cell(&base, trace_name, nodes);
        let runs = std::iter::once(0.0).chain(SHIFTS_S).map(|shift| {
            let mut shifted = trace.clone();
            for j in &mut shifted {
                j.duration = (j.duration + shift).max(1.0);
            }
            let (mut mean, mut p99) = (0.0, 0.0);
            for seed in 1..=seeds {
                let o = wattson_sim::run(&c, &catalog, &shifted, trace_name, &timer, seed).unwrap();
                let s = o.report.summary(timer[0]).expect("the timer ran");
                mean += s.waits.imposed_wait_mean_s / seeds as f64;
                p99 += s.waits.imposed_wait_p99_s / seeds as f64;
            }
            (mean, p99)
        });
        runs.collect::<Vec<_>>()
    });
    print!("{:<14} {:>5} | {:>9} {:>9}", "trace", "nodes", "imp h", "p99 h");
    for s in SHIFTS_S {
        print!(" | {:>+4.0} s: imp    p99", s);
    }
    println!();
    let mut no_longer = [0; SHIFTS_S.len()];
    let mut over = [0; SHIFTS_S.len()];
    let mut worst = [f64::NEG_INFINITY; SHIFTS_S.len()];
    let mut unresolved = Vec::new();
    for (&(trace_name, nodes), r) in cells.iter().zip(&results) {
        let (mean, p99) = r[0];
        print!("{trace_name:<14} {nodes:>5} | {:>9.3} {:>9.3}", mean / 3600.0, p99 / 3600.0);
        let mut rise = f64::NEG_INFINITY;
        for (k, &(m, p)) in r[1..].iter().enumerate() {
            let (dm, dp) = (pct(m, mean), pct(p, p99));
            print!(" | {dm:>+6.1}% {dp:>+6.1}%");
            no_longer[k] += usize::from(m <= mean && p <= p99);
            over[k] += usize::from(dm.max(dp) > TARGET);
            worst[k] = worst[k].max(dm).max(dp);
            rise = rise.max(dm).max(dp);
        }
        println!();
        if rise > TARGET {
            unresolved.push(format!("{} at {nodes} ({rise:+.1}%)", trace_name.trim_end_matches(".csv")));
        }
    }
    let n = cells.len();
    for (k, s) in SHIFTS_S.iter().enumerate() {
        println!(
            "every job {s:+.0} s: the timer's imposed mean and p99 wait no longer than its own in {} of {n}; more than {TARGET}% longer in {}; the worst {:+.1}%",
            no_longer[k], over[k], worst[k]
        );
    }
    println!(
        "cells where a shift moves the timer's waits more than {TARGET}% longer, means over {seeds} seeds: {} of {n}{}{}",
        unresolved.len(),
        if unresolved.is_empty() { "" } else { ": " },
        unresolved.join(", ")
    );
}
