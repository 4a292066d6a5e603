//! Co-location interference: how much a job slows when another shares its GPU, by workload
//! class. A rank-one model: class `a`, sharing a GPU with class `b`, takes `1 + s[a]·p[b]`
//! times as long as alone, where `s[a]` is how sensitive `a` is to a neighbour and `p[b]` how
//! much pressure `b` puts on one. So a pair never measured is predicted from each class's
//! other pairs, and one measurement refines both classes' figures.
//!
//! Fitted by alternating least squares (each step solves every `s` given `p`, then every `p`
//! given `s`, in closed form). Pure: no I/O, deterministic.

/// One measured pair: class `victim` ran `slowdown` slower (time ratio minus one) while class
/// `neighbour` shared its GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairSlowdown {
    /// The class measured (an index into the model's classes).
    pub victim: usize,
    /// The class sharing its GPU.
    pub neighbour: usize,
    /// Its time sharing over its time alone, minus one.
    pub slowdown: f64,
}

/// Each class's sensitivity and pressure ([module docs](self)).
#[derive(Debug, Clone, PartialEq)]
pub struct Interference {
    /// How much each class slows per unit of a neighbour's pressure.
    pub sensitivity: Vec<f64>,
    /// How much each class slows a neighbour per unit of its sensitivity.
    pub pressure: Vec<f64>,
}

/// Alternating steps of the fit.
const STEPS: usize = 50;

impl Interference {
    /// The model of `classes` classes fitted to `pairs`. A class with no measurement as victim
    /// (or as neighbour) keeps a sensitivity (pressure) of 0: nothing is predicted for it.
    pub fn fit(classes: usize, pairs: &[PairSlowdown]) -> Interference {
        let mut model = Interference { sensitivity: vec![0.0; classes], pressure: vec![1.0; classes] };
        for _ in 0..STEPS {
            model.sensitivity = solve(classes, pairs, |p| (p.victim, p.neighbour), &model.pressure);
            model.pressure = solve(classes, pairs, |p| (p.neighbour, p.victim), &model.sensitivity);
        }
        model
    }

    /// The predicted slowdown of class `victim` sharing a GPU with class `neighbour`.
    pub fn slowdown(&self, victim: usize, neighbour: usize) -> f64 {
        self.sensitivity[victim] * self.pressure[neighbour]
    }
}

/// For each class `k`, the least-squares `x[k]` in `slowdown = x[k]·other[j]` over the pairs
/// where `which` gives `(k, j)`; never below 0.
fn solve(
    classes: usize,
    pairs: &[PairSlowdown],
    which: impl Fn(&PairSlowdown) -> (usize, usize),
    other: &[f64],
) -> Vec<f64> {
    let mut num = vec![0.0; classes];
    let mut den = vec![0.0; classes];
    for pair in pairs {
        let (k, j) = which(pair);
        num[k] += pair.slowdown * other[j];
        den[k] += other[j] * other[j];
    }
    num.iter().zip(&den).map(|(n, d)| if *d > 0.0 { (n / d).max(0.0) } else { 0.0 }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_one_world_is_recovered_and_an_unmeasured_pair_predicted() {
        let s = [0.2, 0.5, 1.0];
        let p = [1.0, 0.4, 2.0];
        let mut pairs = Vec::new();
        for (a, sa) in s.iter().enumerate() {
            for (b, pb) in p.iter().enumerate() {
                if (a, b) != (2, 1) {
                    pairs.push(PairSlowdown { victim: a, neighbour: b, slowdown: sa * pb });
                }
            }
        }
        let model = Interference::fit(3, &pairs);
        assert!((model.slowdown(2, 1) - 0.4).abs() < 1e-6, "{model:?}");
        assert!((model.slowdown(0, 2) - 0.4).abs() < 1e-6);
        let alone = Interference::fit(4, &pairs);
        assert_eq!(alone.slowdown(3, 0), 0.0, "a class never measured predicts nothing");
    }
}
