//! Pairs learned on the cluster itself: the model starts from a prior (a site's pair file,
//! public pair data, or nothing), each pair of classes is measured when its shared run ends,
//! and the model is refitted on the prior and the measurements together. A pair the prior
//! names keeps the prior's figure (a hand-written pair is an override). A pair whose job's run
//! broke its bound is the caller's to put in [`super::Sharing::unfit`]. The controller feeds
//! it its nodes' measurements, the simulator the runs' true slowdowns: the same code learns in
//! both.

use std::collections::{BTreeMap, BTreeSet};

use super::{Interference, PairSlowdown};

/// The pairs learned so far and the model fitted on them (the `learning` module's docs say how).
#[derive(Debug, Clone)]
pub struct Learning {
    /// The prior's pairs, `(victim, neighbour)`: never replaced by a measurement.
    prior: BTreeMap<(usize, usize), f64>,
    /// Each pair measured on the cluster, `(victim, neighbour)`: its first measurement.
    measured: BTreeMap<(usize, usize), f64>,
    /// Class pairs (lower class first) on trial: not measured both ways when they joined, until
    /// one of them is measured (or as [`Learning::on_trial`] sets them).
    trying: BTreeSet<(usize, usize)>,
    /// The jobs sharing a GPU or about to, or awaiting their judgement, each to the classes
    /// beside it (as [`Learning::on_trial`] sets them; [`super::Sharing::shared_with`]).
    shared_with: BTreeMap<u32, BTreeSet<usize>>,
    /// The model fitted on the prior and the measurements.
    model: Interference,
    classes: usize,
}

impl Learning {
    /// Learning over `classes` classes from `prior` (empty: from nothing).
    pub fn new(classes: usize, prior: &[PairSlowdown]) -> Learning {
        let prior: BTreeMap<(usize, usize), f64> =
            prior.iter().map(|p| ((p.victim, p.neighbour), p.slowdown)).collect();
        let mut learning = Learning {
            prior,
            measured: BTreeMap::new(),
            trying: BTreeSet::new(),
            shared_with: BTreeMap::new(),
            model: Interference::fit(0, &[]),
            classes,
        };
        learning.refit();
        learning
    }

    /// Learning from `model`'s measured pairs (each pair's mean) as the prior, over its
    /// classes.
    pub fn with_prior(model: &Interference) -> Learning {
        let prior: Vec<PairSlowdown> = model
            .measured
            .iter()
            .map(|(&(victim, neighbour), &slowdown)| PairSlowdown { victim, neighbour, slowdown })
            .collect();
        Learning::new(model.sensitivity.len(), &prior)
    }

    /// The model on the pairs known so far.
    pub fn model(&self) -> &Interference {
        &self.model
    }

    /// Class pairs on trial: sharing a GPU, not measured both ways ([`super::Sharing::trying`]).
    pub fn trying(&self) -> &BTreeSet<(usize, usize)> {
        &self.trying
    }

    /// The classes beside each job sharing a GPU ([`super::Sharing::shared_with`]).
    pub fn shared_with(&self) -> &BTreeMap<u32, BTreeSet<usize>> {
        &self.shared_with
    }

    /// The pairs measured on the cluster, `(victim, neighbour)` to slowdown.
    pub fn measured(&self) -> &BTreeMap<(usize, usize), f64> {
        &self.measured
    }

    /// Makes room for a class never seen before (a new workload tag): `classes` in all.
    pub fn grow(&mut self, classes: usize) {
        if classes > self.classes {
            self.classes = classes;
            self.refit();
        }
    }

    /// Notes that classes `a` and `b` now share a GPU: on trial where either way round was
    /// never measured (a prediction, or none).
    pub fn join(&mut self, a: usize, b: usize) {
        if !self.model.measured_both(a, b) {
            self.trying.insert((a.min(b), a.max(b)));
        }
    }

    /// From `sharing`, `(job, its class, a class beside it)` for each job sharing a GPU or
    /// about to, as a caller that polls sees them: puts on trial exactly those class pairs
    /// not measured both ways, in place of [`Learning::join`]'s, and notes the classes beside
    /// each job ([`Learning::shared_with`]).
    pub fn on_trial(&mut self, sharing: impl IntoIterator<Item = (u32, usize, usize)>) {
        self.trying.clear();
        self.shared_with.clear();
        for (job, class, with) in sharing {
            if !self.model.measured_both(class, with) {
                self.trying.insert((class.min(with), class.max(with)));
            }
            self.shared_with.entry(job).or_default().insert(with);
        }
    }

    /// Records that class `victim` ran `slowdown` slower (time ratio minus one) beside class
    /// `neighbour`, and refits where the pair is new.
    pub fn measure(&mut self, victim: usize, neighbour: usize, slowdown: f64) {
        self.trying.remove(&(victim.min(neighbour), victim.max(neighbour)));
        if !self.prior.contains_key(&(victim, neighbour))
            && victim.max(neighbour) < self.classes
            && self.measured.insert((victim, neighbour), slowdown).is_none()
        {
            self.refit();
        }
    }

    fn refit(&mut self) {
        let pairs: Vec<PairSlowdown> = self
            .prior
            .iter()
            .chain(&self.measured)
            .filter(|((v, n), _)| *v.max(n) < self.classes)
            .map(|(&(victim, neighbour), &slowdown)| PairSlowdown { victim, neighbour, slowdown })
            .collect();
        self.model = Interference::fit(self.classes, &pairs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_nothing_a_pair_is_tried_once_measured_and_then_predicted() {
        let mut l = Learning::new(2, &[]);
        assert_eq!(l.model().predict(0, 1), None, "nothing known");
        l.join(0, 1);
        assert!(l.trying().contains(&(0, 1)));
        l.measure(0, 1, 0.3);
        assert!(l.trying().is_empty(), "measured: no longer on trial");
        l.measure(1, 0, 0.7);
        assert_eq!(l.model().predict(0, 1), Some(0.3));
        assert_eq!(l.model().predict(1, 0), Some(0.7));
        // A later measurement of a pair already measured does not move it.
        l.measure(0, 1, 0.9);
        assert_eq!(l.model().predict(0, 1), Some(0.3));
    }

    #[test]
    fn a_predicted_pair_is_on_trial_until_measured_and_a_measured_one_never() {
        let mut l = Learning::new(2, &[]);
        for (v, n, s) in [(0, 0, 0.1), (1, 0, 0.2), (0, 1, 0.1)] {
            l.measure(v, n, s);
        }
        assert!(l.model().predict(1, 1).is_some(), "predicted by the fit");
        l.join(1, 1);
        assert!(l.trying().contains(&(1, 1)), "never measured: on trial");
        l.join(0, 0);
        l.join(0, 1);
        assert_eq!(l.trying().len(), 1, "measured both ways: not on trial");
        l.measure(1, 1, 0.3);
        assert!(l.trying().is_empty());
        // Set from what shares now: only the pairs never measured both ways.
        l.on_trial([(7, 0, 0), (8, 1, 0), (9, 1, 1)]);
        assert!(l.trying().is_empty(), "all three measured");
        l.grow(3);
        l.on_trial([(7, 2, 0), (8, 0, 0)]);
        assert_eq!(l.trying().iter().copied().collect::<Vec<_>>(), [(0, 2)]);
    }

    #[test]
    fn the_priors_pairs_are_kept_and_new_classes_are_predicted_from_their_measurements() {
        let prior = [PairSlowdown { victim: 0, neighbour: 0, slowdown: 0.2 }];
        let mut l = Learning::new(1, &prior);
        l.measure(0, 0, 0.6);
        assert_eq!(l.model().predict(0, 0), Some(0.2), "the prior's figure stands");
        l.grow(2);
        assert_eq!(l.model().predict(1, 0), None, "class 1 never measured");
        l.measure(1, 0, 0.4);
        l.measure(0, 1, 0.1);
        assert_eq!(l.model().predict(1, 0), Some(0.4));
        let fitted = l.model().predict(1, 1).expect("both of class 1's figures are measured now");
        assert!(fitted > 0.0, "{fitted}");
    }
}
