//! Shared GPUs in the simulator: how much a job slows when another shares its GPU, from
//! Gavel's measured pair throughputs on V100 (Gavel, OSDI'20, stanford-futuredata/gavel @
//! c4fa4009, `scheduler/simulation_throughputs.json`, MIT). The measurements are the physics;
//! the engine sees only its interference model fitted on them (as a site starts from the
//! public prior), and decides with it.
//!
//! A workload's class is the Gavel job type of its network at the nearest batch size: ResNet-50
//! for the ImageNet CNNs, Transformer for the language models. Gavel measured no speech model,
//! so DeepSpeech2 has no class and never shares. Power of a shared GPU: its idle draw once,
//! plus each job's draw above idle scaled by its pace while shared (a job slowed to half speed
//! does half its work per second), at most the GPU's top limit; each job is charged half the
//! idle draw and its own part above it.

use std::collections::BTreeMap;

use wattson_engine::colocation::{Interference, PairSlowdown};

use super::SimError;

/// Measured pair slowdowns and the engine's model fitted on them.
#[derive(Debug, Clone, PartialEq)]
pub struct Colocation {
    /// Gavel job type names, by class.
    pub names: Vec<String>,
    /// Measured slowdown of class `a` beside class `b` (`None`: the pair does not fit on one
    /// GPU).
    truth: BTreeMap<(u16, u16), f64>,
    /// The engine's model, fitted on every measured pair.
    pub model: Interference,
}

/// Gavel's network names for the Zeus networks that have a counterpart.
const NETWORKS: [(&str, &str); 2] = [("resnet50", "ResNet-50"), ("bert_base_uncased", "Transformer")];

impl Colocation {
    /// Parses Gavel's `simulation_throughputs.json` (`name` prefixes errors): the V100
    /// single-GPU job types and every pair of them that fits on one GPU.
    pub fn from_gavel_json(text: &str, name: &str) -> Result<Colocation, SimError> {
        let bad = |why: String| SimError::Input(format!("{name}: {why}"));
        let data: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        let jobs = data["v100"].as_object().ok_or_else(|| bad("no \"v100\" table".into()))?;
        let names: Vec<String> = jobs.keys().filter(|k| k.ends_with(", 1)")).cloned().collect();
        let index: BTreeMap<&str, u16> =
            names.iter().enumerate().map(|(i, n)| (n.as_str(), i as u16)).collect();
        let mut truth = BTreeMap::new();
        for (victim, key) in names.iter().enumerate() {
            let row = &jobs[key];
            let alone = row["null"]
                .as_f64()
                .filter(|x| *x > 0.0)
                .ok_or_else(|| bad(format!("{key}: no throughput alone")))?;
            for (other, pair) in row.as_object().into_iter().flatten() {
                let Some(&neighbour) = index.get(other.as_str()) else { continue };
                let shared =
                    pair[0].as_f64().ok_or_else(|| bad(format!("{key} with {other}: no throughput")))?;
                // Throughput shared exactly as alone (80 ordered pairs on V100, none on K80
                // or P100) is taken for an artifact of the table, not a measurement: missing.
                if shared > 0.0 && shared != alone {
                    truth.insert((victim as u16, neighbour), alone / shared - 1.0);
                }
            }
        }
        if truth.is_empty() {
            return Err(bad("no measured pair on V100".into()));
        }
        let pairs: Vec<PairSlowdown> = truth
            .iter()
            .map(|(&(v, n), &slowdown)| PairSlowdown {
                victim: usize::from(v),
                neighbour: usize::from(n),
                slowdown,
            })
            .collect();
        let model = Interference::fit(names.len(), &pairs);
        Ok(Colocation { names, truth, model })
    }

    /// The measured slowdown of class `victim` beside class `neighbour`.
    pub fn slowdown(&self, victim: u16, neighbour: u16) -> Option<f64> {
        self.truth.get(&(victim, neighbour)).copied()
    }

    /// The class of a workload of Zeus network `network` at `batch_size`: the network's Gavel type
    /// at the batch size nearest (in ratio) to its own; `None` for a network Gavel did not
    /// measure.
    pub fn class_of(&self, network: &str, batch_size: u32) -> Option<u16> {
        let (_, gavel) = NETWORKS.iter().find(|(zeus, _)| *zeus == network)?;
        let prefix = format!("('{gavel} (batch size ");
        self.names
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let batch: f64 = n.strip_prefix(&prefix)?.split(')').next()?.parse().ok()?;
                Some((i as u16, (batch / f64::from(batch_size.max(1))).ln().abs()))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i)
    }
}

/// Per-GPU draws `(a, b)` of two jobs sharing one GPU that alone draw `alone_a` and `alone_b`
/// (W) and are slowed by `slow_a` and `slow_b` (time ratios minus one), on a GPU idling at
/// `idle_w` with top limit `max_w` ([module docs](self)).
pub fn shared_draws(alone: [f64; 2], slow: [f64; 2], idle_w: f64, max_w: f64) -> [f64; 2] {
    let above = [0, 1].map(|k| (alone[k] - idle_w).max(0.0) / (1.0 + slow[k]));
    let total = above[0] + above[1];
    let scale = if idle_w + total > max_w && total > 0.0 { (max_w - idle_w).max(0.0) / total } else { 1.0 };
    above.map(|x| idle_w / 2.0 + x * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_gpu_draws_its_idle_once_and_each_jobs_part_above_it_at_its_pace() {
        // 57 W idle, 300 W top: 250 W and 150 W jobs at 1.25x and 1.5x time.
        let [a, b] = shared_draws([250.0, 150.0], [0.25, 0.5], 57.0, 300.0);
        assert!((a - (28.5 + 193.0 / 1.25)).abs() < 1e-9 && (b - (28.5 + 93.0 / 1.5)).abs() < 1e-9);
        // Two full-power jobs barely slowed would exceed the top limit: held at it.
        let [a, b] = shared_draws([290.0, 290.0], [0.05, 0.05], 57.0, 300.0);
        assert!((a + b - 300.0).abs() < 1e-9 && (a - b).abs() < 1e-9);
    }

    #[test]
    fn gavel_pairs_give_classes_by_network_and_batch() {
        let text = r#"{"v100": {
            "('ResNet-50 (batch size 64)', 1)": {"null": 2.0, "('ResNet-50 (batch size 64)', 1)": [1.0, 1.0]},
            "('Transformer (batch size 32)', 1)": {"null": 3.0, "('ResNet-50 (batch size 64)', 1)": [0.0, 0.0]}
        }}"#;
        let c = Colocation::from_gavel_json(text, "g.json").unwrap();
        assert_eq!(c.slowdown(0, 0), Some(1.0));
        assert_eq!(c.slowdown(1, 0), None, "a pair that does not fit is not measured");
        assert_eq!(c.class_of("resnet50", 128), Some(0));
        assert_eq!(c.class_of("bert_base_uncased", 8), Some(1));
        assert_eq!(c.class_of("deepspeech2", 32), None);
        assert!(
            Colocation::from_gavel_json("{}", "g.json")
                .unwrap_err()
                .to_string()
                .contains("g.json: no \"v100\"")
        );
    }
}
