//! The model table job_submit reads: (GPU type, owner, tag) → fitted model and its settings.
//!
//! Models have an owner (the user whose runs measured them, or their Slurm account where the
//! site shares models so): one owner's runs never decide another owner's jobs, even under the
//! same tag.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::choose::{Choice, ChooserConfig, Objective, choose};
use super::model::{DvfsModel, Knob};
use super::priors;
use wattson_types::model_owner::ModelOwner;

/// One fitted workload on one GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelEntry {
    /// The fitted model.
    pub model: DvfsModel,
    /// Allowed settings on this GPU type (W or MHz, by the model's knob).
    pub settings: Vec<f64>,
}

/// GPU type, owner and tag (e.g. `user:jobname` or an `--energy-tag`) → model. Lookups
/// borrow the strings (no allocation); GPU types are keyed by [`priors::prior`]'s canonical name
/// when known.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelTable {
    /// Chooser tunables used by [`ModelTable::decide`].
    #[serde(default)]
    pub config: ChooserConfig,
    /// GPU type → owner → tag → entry.
    models: HashMap<String, HashMap<ModelOwner, HashMap<String, ModelEntry>>>,
}

fn gpu_key(gpu_type: &str) -> &str {
    priors::prior(gpu_type).map_or(gpu_type, |p| p.name)
}

impl ModelTable {
    /// An empty table with the default chooser.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces `owner`'s model for `tag` on `gpu_type`.
    pub fn insert(&mut self, owner: &ModelOwner, tag: &str, gpu_type: &str, entry: ModelEntry) {
        let owners = self.models.entry(gpu_key(gpu_type).to_owned()).or_default();
        owners.entry(owner.clone()).or_default().insert(tag.to_owned(), entry);
    }

    /// `owner`'s model for `tag` on `gpu_type`, if any.
    pub fn get(&self, owner: &ModelOwner, tag: &str, gpu_type: &str) -> Option<&ModelEntry> {
        self.models.get(gpu_key(gpu_type))?.get(owner)?.get(tag)
    }

    /// The GPU types where `owner` has a model for `tag`, in name order.
    pub fn gpu_types_with(&self, owner: &ModelOwner, tag: &str) -> Vec<&str> {
        let mut types: Vec<&str> = self
            .models
            .iter()
            .filter(|(_, owners)| owners.get(owner).is_some_and(|tags| tags.contains_key(tag)))
            .map(|(g, _)| g.as_str())
            .collect();
        types.sort_unstable();
        types
    }

    /// Number of (GPU type, owner, tag) entries.
    pub fn len(&self) -> usize {
        self.models.values().flat_map(HashMap::values).map(HashMap::len).sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The setting on `knob` for `owner`'s job: the chooser over the entry's model (when it is
    /// on that knob), or the GPU's top setting (known type, no such model of this owner and
    /// tag), or no setting (unknown type). Never allocates or panics.
    pub fn decide(
        &self,
        owner: &ModelOwner,
        tag: &str,
        gpu_type: &str,
        knob: Knob,
        objective: Objective,
    ) -> Choice {
        match (self.get(owner, tag, gpu_type).filter(|e| e.model.knob == knob), priors::prior(gpu_type)) {
            (Some(e), _) => choose(&e.model, &e.settings, objective, &self.config),
            (None, Some(p)) => match knob {
                Knob::PowerLimit => {
                    Choice::fallback(&[p.max_power_limit_w], "no model for this tag: max power limit")
                }
                Knob::SmClock => Choice::fallback(&[p.max_sm_mhz], "no model for this tag: max SM clock"),
            },
            (None, None) => Choice::fallback(&[], "unknown GPU type and no model: leave the GPU as it is"),
        }
    }

    /// The table as JSON.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// A table from JSON written by [`ModelTable::to_json`].
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::{Sample, fit};

    const U1000: ModelOwner = ModelOwner::User(1000);
    const U1001: ModelOwner = ModelOwner::User(1001);
    const PL: Knob = Knob::PowerLimit;

    fn entry() -> ModelEntry {
        let s: Vec<Sample> = [(150.0, 10.0, 140.0), (225.0, 8.2, 200.0), (300.0, 8.0, 215.0)]
            .iter()
            .map(|&(setting, time, power)| Sample::new(setting, time, power, 1.0))
            .collect();
        let model = fit(Knob::PowerLimit, &s).unwrap();
        ModelEntry { model, settings: priors::prior("A40").unwrap().power_limits() }
    }

    #[test]
    fn json_round_trip_keeps_decisions() {
        let mut t = ModelTable::new();
        t.insert(&U1000, "alice:train", "a40", entry());
        t.insert(&U1001, "bob:bert", "Tesla V100", entry());
        let back = ModelTable::from_json(&t.to_json().unwrap()).unwrap();
        // serde_json's default float parser may differ in the last bit; the rest is exact.
        let (a, b) =
            (back.get(&U1000, "alice:train", "A40").unwrap(), t.get(&U1000, "alice:train", "A40").unwrap());
        assert_eq!(a.settings, b.settings);
        let (ma, mb) = (&a.model, &b.model);
        assert_eq!((&ma.settings, &ma.powers, &ma.times), (&mb.settings, &mb.powers, &mb.times));
        assert!((ma.a - mb.a).abs() <= 1e-12 * mb.a && (ma.d - mb.d).abs() <= 1e-12 * mb.d);
        assert_eq!(back.len(), 2);
        assert_eq!(back.config, t.config);
        for p in
            [Objective::Perf, Objective::MinEnergy { max_slowdown: 0.1 }, Objective::Balanced { eta: 0.5 }]
        {
            let (a, b) = (
                back.decide(&U1000, "alice:train", "A40", PL, p),
                t.decide(&U1000, "alice:train", "A40", PL, p),
            );
            assert_eq!((a.setting, a.reason), (b.setting, b.reason));
            assert!((a.predicted_energy_ratio - b.predicted_energy_ratio).abs() < 1e-12);
            assert!((a.predicted_slowdown - b.predicted_slowdown).abs() < 1e-12);
        }
        assert!(back.get(&U1001, "bob:bert", "V100").is_some());
        assert!(ModelTable::from_json("{\"models\": 3}").is_err());
    }

    #[test]
    fn unknown_tags_and_types_fall_back() {
        let mut t = ModelTable::new();
        assert!(t.is_empty());
        t.insert(&U1000, "alice:train", "A40", entry());
        let slow = Objective::MinEnergy { max_slowdown: 0.2 };
        let d = t.decide(&U1000, "carol:x", "H100", PL, slow);
        assert_eq!(d.setting, Some(700.0));
        let d = t.decide(&U1000, "carol:x", "H100", Knob::SmClock, slow);
        assert_eq!((d.setting, d.reason), (Some(1980.0), "no model for this tag: max SM clock"));
        let d = t.decide(&U1000, "alice:train", "TPUv4", PL, slow);
        assert_eq!(d.setting, None);
        let d = t.decide(&U1000, "alice:train", "A40", PL, slow);
        assert!(d.setting.unwrap() < 300.0, "{d:?}");
        // A power-limit model decides nothing on the clock knob.
        let d = t.decide(&U1000, "alice:train", "A40", Knob::SmClock, slow);
        assert_eq!(d.setting, Some(1740.0), "{d:?}");
        // Another user's model for the same tag and GPU type decides nothing for this one.
        let d = t.decide(&U1001, "alice:train", "A40", PL, slow);
        assert_eq!(d.setting, Some(300.0), "{d:?}");
        assert!(t.gpu_types_with(&U1001, "alice:train").is_empty());
        // A PCIe board's model is not the SXM board's, whatever the name's spelling.
        t.insert(&U1000, "bert", "NVIDIA H100 PCIe", entry());
        assert!(t.get(&U1000, "bert", "h100-pcie").is_some());
        assert!(t.get(&U1000, "bert", "NVIDIA H100 80GB HBM3").is_none());
        // An account's model decides for that account only.
        let physics = ModelOwner::Account("physics".into());
        t.insert(&physics, "bert", "A40", entry());
        assert_eq!(t.gpu_types_with(&physics, "bert"), ["A40"]);
        assert!(t.gpu_types_with(&ModelOwner::Account("chem".into()), "bert").is_empty());
    }
}
