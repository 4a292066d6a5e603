//! Held-out check of the co-location interference model (`wattson_engine::colocation`) on
//! Gavel's measured pair throughputs (Gavel, OSDI'20, stanford-futuredata/gavel @ c4fa4009,
//! `scheduler/simulation_throughputs.json`, MIT), in `data/colocation/gavel/`.
//!
//! Per GPU type (K80, P100, V100), the 26 single-GPU job types and every ordered pair that fits
//! on one GPU: a pair's slowdown is the job's throughput alone over its throughput sharing,
//! minus one. One pair in five (fixed by the pair's indices) is held out; the model is fitted
//! on the rest and scored on the held-out pairs, against two baselines fitted on the same
//! pairs: the mean slowdown, and each job type's own mean slowdown as the one slowed.
//! Runner: `cargo test --test engine colocation:: -- --nocapture` prints the table.

use std::collections::BTreeMap;

use wattson_engine::colocation::{Interference, PairSlowdown};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/colocation/gavel/simulation_throughputs.json");

/// The single-GPU job types' names, and their measured pairs, on GPU type `gpu`.
fn pairs(data: &serde_json::Value, gpu: &str) -> (Vec<String>, Vec<PairSlowdown>) {
    let jobs = data[gpu].as_object().unwrap_or_else(|| panic!("no {gpu} in the Gavel data"));
    let single = |key: &str| key.ends_with(", 1)");
    let names: Vec<String> = jobs.keys().filter(|k| single(k)).cloned().collect();
    let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let mut out = Vec::new();
    for (victim, name) in names.iter().enumerate() {
        let row = &jobs[name];
        let alone = row["null"].as_f64().expect("a throughput alone");
        for (other, pair) in row.as_object().unwrap() {
            let Some(&neighbour) = index.get(other.as_str()) else { continue };
            let shared = pair[0].as_f64().expect("a pair's throughput");
            // 0: the pair does not fit on one GPU.
            if shared > 0.0 {
                out.push(PairSlowdown { victim, neighbour, slowdown: alone / shared - 1.0 });
            }
        }
    }
    (names, out)
}

fn held_out(pair: &PairSlowdown) -> bool {
    (pair.victim * 31 + pair.neighbour * 17).is_multiple_of(5)
}

fn mean_abs(errors: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = errors.fold((0.0, 0usize), |(s, n), e| (s + e.abs(), n + 1));
    sum / n as f64
}

#[test]
fn the_interference_model_predicts_held_out_pairs_better_than_each_jobs_own_mean() {
    let text = std::fs::read_to_string(DATA).unwrap_or_else(|e| {
        panic!("Gavel data missing at {DATA} ({e}): the check needs data/colocation/gavel")
    });
    let data: serde_json::Value = serde_json::from_str(&text).unwrap();
    println!("GPU   classes  fit pairs  held out  mean slowdown  MAE model  MAE own mean  MAE mean");
    for gpu in ["k80", "p100", "v100"] {
        let (names, all) = pairs(&data, gpu);
        assert_eq!(names.len(), 26, "{gpu}: the single-GPU job types");
        let (test, train): (Vec<PairSlowdown>, Vec<PairSlowdown>) = all.iter().partition(|p| held_out(p));
        let model = Interference::fit(names.len(), &train);
        let mean = train.iter().map(|p| p.slowdown).sum::<f64>() / train.len() as f64;
        let own: Vec<f64> = (0..names.len())
            .map(|k| {
                let mine: Vec<f64> = train.iter().filter(|p| p.victim == k).map(|p| p.slowdown).collect();
                mine.iter().sum::<f64>() / mine.len().max(1) as f64
            })
            .collect();
        let model_err = mean_abs(test.iter().map(|p| model.slowdown(p.victim, p.neighbour) - p.slowdown));
        let own_err = mean_abs(test.iter().map(|p| own[p.victim] - p.slowdown));
        let mean_err = mean_abs(test.iter().map(|p| mean - p.slowdown));
        println!(
            "{gpu:5} {:7}  {:9}  {:8}  {:13.3}  {model_err:9.3}  {own_err:12.3}  {mean_err:8.3}",
            names.len(),
            train.len(),
            test.len(),
            test.iter().map(|p| p.slowdown).sum::<f64>() / test.len() as f64,
        );
        assert!(test.len() > 100, "{gpu}: {} held-out pairs", test.len());
        assert!(
            model_err < own_err && model_err < mean_err,
            "{gpu}: the model adds nothing over the baselines"
        );
    }
}
