//! A workload's measurements: what each node stores after a job's windows, what the controller
//! gathers from every node and hands back merged, and what the model table is fitted from.
//! Measurements are kept, not coefficients: fitting is cheap and deterministic, so every host
//! fitting the same measurements decides the same.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::fit::{Sample, fit};
use super::model::Knob;
use super::table::{ModelEntry, ModelTable};
use wattson_types::job::Progress;
use wattson_types::model_owner::ModelOwner;

/// One workload's measurements on one GPU type. No samples: the workload's model was dropped
/// (it misled a job past its bound) at `updated_ns`, which a merge carries to every node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    /// Whose runs measured it; only that owner's jobs use it.
    pub owner: ModelOwner,
    /// GPU model name.
    pub gpu_type: String,
    /// Workload tag.
    pub tag: String,
    /// How work was counted (samples of different units never mix).
    pub progress: Progress,
    /// The knob the samples' settings are on (samples of different knobs never mix).
    #[serde(default)]
    pub knob: Knob,
    /// Measurements, one per (run, setting) window.
    pub samples: Vec<Sample>,
    /// Candidate settings on this GPU type (W or MHz, by the knob).
    pub settings: Vec<f64>,
    /// Last change, ns since the epoch.
    pub updated_ns: i64,
}

impl Measurements {
    /// Whether these are the mark of a dropped model.
    pub fn is_dropped(&self) -> bool {
        self.samples.is_empty()
    }
}

/// The newest copy of each workload among `copies` (several nodes' stores): each node's copy
/// already holds what it was handed at the last merge plus its own runs since, so the newest
/// carries the most; a drop newer than every copy wins too. Ties go to the copy with more
/// samples, then to the first, so the result does not depend on which node answered first
/// only when the copies differ.
pub fn newest(copies: impl IntoIterator<Item = Measurements>) -> Vec<Measurements> {
    type Key = (ModelOwner, String, String, &'static str, Knob);
    let mut best: BTreeMap<Key, Measurements> = BTreeMap::new();
    for m in copies {
        let key = (m.owner.clone(), m.gpu_type.clone(), m.tag.clone(), m.progress.as_str(), m.knob);
        match best.get(&key) {
            Some(b) if (b.updated_ns, b.samples.len()) >= (m.updated_ns, m.samples.len()) => {}
            _ => {
                best.insert(key, m);
            }
        }
    }
    best.into_values().collect()
}

impl ModelTable {
    /// The table job_submit reads, fitted from `models`: a model per workload with enough
    /// distinct settings, choosing among the settings measured, on the knob `knob_of` names for
    /// its GPU type (measurements on the other knob wait for the site to switch back); a
    /// workload counted from a progress file wins over the same one counted by SM activity.
    pub fn from_measurements(models: &[Measurements], knob_of: impl Fn(&str) -> Knob) -> ModelTable {
        let mut table = ModelTable::new();
        let on_knob = models.iter().filter(|m| m.knob == knob_of(&m.gpu_type));
        for m in on_knob
            .clone()
            .filter(|m| m.progress == Progress::SmActivity)
            .chain(on_knob.filter(|m| m.progress == Progress::File))
        {
            if let Ok(model) = fit(m.knob, &m.samples) {
                let settings = m
                    .settings
                    .iter()
                    .copied()
                    .filter(|&w| m.samples.iter().any(|s| s.setting == w))
                    .collect();
                table.insert(&m.owner, &m.tag, &m.gpu_type, ModelEntry { model, settings });
            }
        }
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(tag: &str, updated_ns: i64, samples: usize) -> Measurements {
        Measurements {
            owner: ModelOwner::User(1000),
            gpu_type: "NVIDIA H100 80GB HBM3".into(),
            tag: tag.into(),
            progress: Progress::File,
            knob: Knob::PowerLimit,
            samples: (0..samples)
                .map(|i| {
                    let setting = 700.0 - 100.0 * i as f64;
                    Sample::new(setting, 0.1 * (700.0 / setting).powf(0.3), 0.8 * setting, 1.0)
                })
                .collect(),
            settings: vec![200.0, 700.0],
            updated_ns,
        }
    }

    #[test]
    fn the_newest_copy_of_each_workload_wins_drops_included() {
        let merged =
            newest([copy("a", 10, 3), copy("a", 20, 2), copy("b", 5, 3), copy("b", 7, 0), copy("c", 1, 1)]);
        let seen: Vec<(&str, i64, usize)> =
            merged.iter().map(|m| (m.tag.as_str(), m.updated_ns, m.samples.len())).collect();
        assert_eq!(seen, [("a", 20, 2), ("b", 7, 0), ("c", 1, 1)]);
        assert!(merged[1].is_dropped());
        // Equal times: the fuller copy, whichever came first.
        assert_eq!(newest([copy("a", 9, 1), copy("a", 9, 4)])[0].samples.len(), 4);
        assert_eq!(newest([copy("a", 9, 4), copy("a", 9, 1)])[0].samples.len(), 4);
    }

    #[test]
    fn the_table_is_fitted_from_live_workloads_only() {
        let models = [copy("a", 1, 4), copy("dropped", 2, 0)];
        let table = ModelTable::from_measurements(&models, |_| Knob::PowerLimit);
        let owner = ModelOwner::User(1000);
        let entry = table.get(&owner, "a", "NVIDIA H100 80GB HBM3").expect("fitted");
        assert_eq!(entry.settings, [700.0]);
        assert!(table.get(&owner, "dropped", "NVIDIA H100 80GB HBM3").is_none());
        // A site that turns the SM clock instead: power-limit measurements decide nothing.
        assert!(ModelTable::from_measurements(&models, |_| Knob::SmClock).is_empty());
    }
}
