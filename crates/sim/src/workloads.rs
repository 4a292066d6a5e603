//! Measured workloads: Zeus's per-power-limit time and power (Zeus, NSDI'23, ml-energy/zeus @
//! 75a8b939, Apache-2.0) and the map from ITP model names to Zeus networks.
//!
//! Every job's time and power at every power limit come from one measured Zeus curve. The
//! engine sees only three probes of that curve (lowest, nearest the middle, highest limit:
//! spread probes, where a node's plan places its third by the job's bound), fits
//! [`wattson_engine::DvfsModel`] and chooses; the simulator then charges the *measured* time
//! and power at the chosen limit.

use std::collections::BTreeMap;

use wattson_engine::{ChooserConfig, DvfsModel, Knob, Objective, Sample, choose, fit};

use super::SimError;

/// ITP model name → (Zeus network, why). gpt2, inception3 and vgg16 were not measured by Zeus.
pub const STAND_INS: [(&str, &str, &str); 6] = [
    ("bert", "bert_base_uncased", "measured"),
    ("resnet50", "resnet50", "measured"),
    ("deepspeech2", "deepspeech2", "measured"),
    ("gpt2", "bert_base_uncased", "stand-in: the measured transformer language model"),
    ("inception3", "resnet50", "stand-in: the measured ImageNet CNN"),
    ("vgg16", "resnet50", "stand-in: the measured ImageNet CNN"),
];

/// A run's work split between two measured limits: `share_a` of it at `a`, the rest at `b`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloorMix {
    /// One limit (index).
    pub a: usize,
    /// The other limit (index); equal to `a` for a run at one limit.
    pub b: usize,
    /// Share of the work at `a`, in `[0, 1]`.
    pub share_a: f64,
}

/// Network used for a tag that is neither an ITP model nor a Zeus network.
pub const DEFAULT_NETWORK: &str = "resnet50";

/// One measured workload: time per epoch and average power at each power limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// `dataset/network/batch/optimizer`.
    pub name: String,
    /// Zeus network.
    pub network: String,
    /// Batch size.
    pub batch: u32,
    /// Measured power limits (W), increasing.
    pub limits: Vec<f64>,
    /// Measured time per epoch at each limit (s).
    pub time: Vec<f64>,
    /// Measured average power at each limit (W per GPU).
    pub power: Vec<f64>,
}

impl Workload {
    /// Index of the highest limit (the default setting).
    pub fn max_idx(&self) -> usize {
        self.limits.len() - 1
    }

    /// Measured time at limit `i` / at the max limit.
    pub fn time_ratio(&self, i: usize) -> f64 {
        self.time[i] / self.time[self.max_idx()]
    }

    /// Index of the least measured energy per epoch among limits whose measured slowdown is
    /// within `bound` (one limit for the whole run); the max limit always qualifies.
    pub fn floor_idx(&self, bound: f64) -> usize {
        (0..self.limits.len())
            .filter(|&i| self.time_ratio(i) - 1.0 <= bound)
            .min_by(|&a, &b| (self.power[a] * self.time[a]).total_cmp(&(self.power[b] * self.time[b])))
            .unwrap_or(self.max_idx())
    }

    /// The least measured GPU energy a job can run at within `bound` over its whole run, with
    /// its work split between two limits (a run may change limit: the lower convex hull of
    /// the measured (time, energy) points, taken at the bound). No split of a run's work over
    /// any limits does better, so it is a true lower bound for every bound-keeping policy.
    pub fn floor_mix(&self, bound: f64) -> FloorMix {
        let t_max = 1.0 + bound;
        let e = |i: usize| self.power[i] * self.time_ratio(i);
        let single = self.floor_idx(bound);
        let mut best = FloorMix { a: single, b: single, share_a: 1.0 };
        let mut best_e = e(single);
        for a in 0..self.limits.len() {
            for b in 0..self.limits.len() {
                let (ra, rb) = (self.time_ratio(a), self.time_ratio(b));
                if !(ra < t_max && rb > t_max) {
                    continue;
                }
                // The share at `a` that makes the run take exactly (1 + bound) times the top's.
                let share_a = (rb - t_max) / (rb - ra);
                let mixed = share_a * e(a) + (1.0 - share_a) * e(b);
                if mixed < best_e {
                    (best, best_e) = (FloorMix { a, b, share_a }, mixed);
                }
            }
        }
        best
    }

    /// Run time of `m` / the max limit's.
    pub fn mix_time_ratio(&self, m: FloorMix) -> f64 {
        m.share_a * self.time_ratio(m.a) + (1.0 - m.share_a) * self.time_ratio(m.b)
    }

    /// Average GPU power over a run at `m` (W).
    pub fn mix_power(&self, m: FloorMix) -> f64 {
        let e = m.share_a * self.power[m.a] * self.time_ratio(m.a)
            + (1.0 - m.share_a) * self.power[m.b] * self.time_ratio(m.b);
        e / self.mix_time_ratio(m)
    }

    /// Index of the highest limit at or under `cap_w` (the lowest limit if none is).
    pub fn capped_idx(&self, cap_w: f64) -> usize {
        self.limits.iter().rposition(|&l| l <= cap_w).unwrap_or(0)
    }

    /// Three probes spread over the range: lowest, nearest the middle, highest.
    pub fn probes(&self) -> [usize; 3] {
        let n = self.limits.len();
        let target = 0.5 * (self.limits[0] + self.limits[n - 1]);
        let mid = (1..n - 1)
            .min_by(|&a, &b| (self.limits[a] - target).abs().total_cmp(&(self.limits[b] - target).abs()))
            .unwrap_or(n / 2);
        [0, mid, n - 1]
    }

    /// The engine's model, fitted from the three probes only.
    pub fn fit(&self) -> Result<DvfsModel, SimError> {
        self.fit_on(&self.probes())
    }

    /// The engine's model fitted on the measurements at limit indices `idx` (what the daemons
    /// have recorded for this workload: the probes, then every limit a job ran at).
    pub fn fit_on(&self, idx: &[usize]) -> Result<DvfsModel, SimError> {
        let samples: Vec<Sample> =
            idx.iter().map(|&i| Sample::new(self.limits[i], self.time[i], self.power[i], 1.0)).collect();
        fit(Knob::PowerLimit, &samples).map_err(|e| SimError::Input(format!("workload {}: {e}", self.name)))
    }

    /// The engine's choice for `objective`, as an index into the measured limits.
    pub fn choose_idx(&self, model: &DvfsModel, objective: Objective) -> usize {
        let d = choose(model, &self.limits, objective, &ChooserConfig::default());
        d.setting
            .and_then(|s| self.limits.iter().position(|&l| (l - s).abs() < 1e-9))
            .unwrap_or(self.max_idx())
    }
}

/// (network, batch size, dataset, optimizer) of a Zeus row.
type GroupKey = (String, u32, String, String);

/// One setting's measured `(limit, time, power)` points, by increasing limit.
type Curve = Vec<(f64, f64, f64)>;

/// One Zeus file's rows: each setting's points.
type Groups = BTreeMap<GroupKey, Curve>;

/// The measured workloads of every GPU type of the cluster, aligned: workload `w` is the same
/// Zeus setting (dataset, network, batch size, optimizer) on every type.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Per GPU type (the cluster's group order), its workloads in a fixed order.
    pub types: Vec<Vec<Workload>>,
    /// How workloads slow each other on a shared GPU; `None`: no job shares.
    pub colocation: Option<super::colocation::Colocation>,
}

impl Catalog {
    /// One GPU type's catalog from its Zeus `summary_power_<gpu>.csv` ([`Catalog::from_zeus_csvs`]).
    pub fn from_zeus_csv(text: &str, name: &str) -> Result<Catalog, SimError> {
        Catalog::from_zeus_csvs(&[(text, name)])
    }

    /// Parses one Zeus `summary_power_<gpu>.csv` per GPU type, `(text, name)`; keeps the
    /// settings measured at ≥ 5 limits (three probes plus points to score them on) on every
    /// type, one per (network, batch size): the first dataset and optimizer in name order.
    pub fn from_zeus_csvs(files: &[(&str, &str)]) -> Result<Catalog, SimError> {
        let parsed = files.iter().map(|(t, n)| parse_zeus(t, n)).collect::<Result<Vec<Groups>, _>>()?;
        let Some(first) = parsed.first() else {
            return Err(SimError::Input("no Zeus file given".to_string()));
        };
        let mut seen: BTreeMap<(String, u32), ()> = BTreeMap::new();
        let mut types = vec![Vec::new(); parsed.len()];
        for key in first.keys() {
            let curves: Option<Vec<&Curve>> =
                parsed.iter().map(|g| g.get(key).filter(|c| c.len() >= 5)).collect();
            let Some(curves) = curves else { continue };
            let (network, batch, dataset, opt) = key;
            if seen.insert((network.clone(), *batch), ()).is_some() {
                continue;
            }
            for (ty, c) in curves.into_iter().enumerate() {
                types[ty].push(Workload {
                    name: format!("{dataset}/{network}/{batch}/{opt}"),
                    network: network.clone(),
                    batch: *batch,
                    limits: c.iter().map(|x| x.0).collect(),
                    time: c.iter().map(|x| x.1).collect(),
                    power: c.iter().map(|x| x.2).collect(),
                });
            }
        }
        if types[0].is_empty() {
            let names: Vec<&str> = files.iter().map(|f| f.1).collect();
            return Err(SimError::Input(format!(
                "{}: no workload measured at 5 or more power limits{}",
                names.join(", "),
                if names.len() > 1 { " in every file" } else { "" }
            )));
        }
        Ok(Catalog { types, colocation: None })
    }

    /// Workloads per type.
    pub fn len(&self) -> usize {
        self.types.first().map_or(0, Vec::len)
    }

    /// Whether there is no workload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Workload `w` as measured on GPU type `ty`.
    pub fn get(&self, ty: usize, w: usize) -> &Workload {
        &self.types[ty][w]
    }

    /// Time of workload `w` at the top limit on type `ty` / on type 0 (the type the trace's
    /// durations are taken on).
    pub fn pace(&self, ty: usize, w: usize) -> f64 {
        let (a, b) = (self.get(ty, w), self.get(0, w));
        a.time[a.max_idx()] / b.time[b.max_idx()]
    }

    /// The workload for a job's tag and batch size: the tag's Zeus network (see [`STAND_INS`];
    /// a Zeus network name is taken as is; anything else uses [`DEFAULT_NETWORK`]), at the
    /// measured batch size nearest in log scale (ties: the smaller).
    pub fn lookup(&self, tag: &str, batch: Option<u32>) -> Option<usize> {
        let tag = tag.to_ascii_lowercase();
        let network = STAND_INS
            .iter()
            .find(|(m, ..)| *m == tag)
            .map(|(_, n, _)| *n)
            .or_else(|| self.types[0].iter().find(|w| w.network == tag).map(|w| w.network.as_str()))
            .unwrap_or(DEFAULT_NETWORK);
        let target = f64::from(batch.unwrap_or(64).max(1)).ln();
        let mut best: Option<(f64, usize)> = None;
        for (i, w) in self.types[0].iter().enumerate() {
            if w.network != network {
                continue;
            }
            let d = (f64::from(w.batch.max(1)).ln() - target).abs();
            if best.is_none_or(|(bd, _)| d < bd - 1e-12) {
                best = Some((d, i));
            }
        }
        best.map(|(_, i)| i).or_else(|| (!self.is_empty()).then_some(0))
    }
}

/// Reads a Zeus file's rows by setting, each setting's points sorted by limit, one per limit.
fn parse_zeus(text: &str, name: &str) -> Result<Groups, SimError> {
    let mut rdr = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(text.as_bytes());
    let want =
        ["dataset", "network", "batch_size", "optimizer", "power_limit", "time_per_epoch", "average_power"];
    let header: Vec<String> = rdr
        .headers()
        .map_err(|e| SimError::Input(format!("{name}:1: {e}")))?
        .iter()
        .map(str::to_string)
        .collect();
    if header != want {
        return Err(SimError::Input(format!("{name}:1: expected the header {}", want.join(","))));
    }
    let mut groups = Groups::new();
    for (k, rec) in rdr.records().enumerate() {
        let line = k + 2;
        let rec = rec.map_err(|e| SimError::Input(format!("{name}:{line}: {e}")))?;
        let num = |i: usize| -> Result<f64, SimError> {
            rec.get(i).and_then(|s| s.parse::<f64>().ok()).filter(|v| v.is_finite() && *v > 0.0).ok_or_else(
                || SimError::Input(format!("{name}:{line}: {} is not a positive number", want[i])),
            )
        };
        let batch = num(2)?;
        let (limit, time, power) = (num(4)?, num(5)?, num(6)?);
        let key = (rec[1].to_string(), batch as u32, rec[0].to_string(), rec[3].to_string());
        groups.entry(key).or_default().push((limit, time, power));
    }
    for c in groups.values_mut() {
        c.sort_by(|a, b| a.0.total_cmp(&b.0));
        c.dedup_by(|a, b| a.0 == b.0);
    }
    Ok(groups)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tiny Zeus-format file: resnet50 batch 64 and 256, shufflenetv2 batch 128.
    pub(crate) fn tiny_zeus() -> String {
        let mut s =
            String::from("dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n");
        for (net, batch, scale) in [("resnet50", 64, 1.0), ("resnet50", 256, 2.0), ("shufflenetv2", 128, 0.5)]
        {
            for (p, t, w) in [
                (100, 30.0, 95.0),
                (125, 24.0, 118.0),
                (150, 21.0, 140.0),
                (175, 20.0, 155.0),
                (200, 19.5, 165.0),
                (225, 19.4, 170.0),
            ] {
                s.push_str(&format!("imagenet,{net},{batch},adam,{p},{},{w}\n", t * scale));
            }
        }
        s
    }

    #[test]
    fn catalog_maps_stand_ins_and_nearest_batch() {
        let c = Catalog::from_zeus_csv(&tiny_zeus(), "z.csv").unwrap();
        assert_eq!(c.len(), 3);
        let v = c.lookup("vgg16", Some(200)).unwrap();
        assert_eq!((c.types[0][v].network.as_str(), c.types[0][v].batch), ("resnet50", 256));
        let s = c.lookup("shufflenetv2", None).unwrap();
        assert_eq!(c.types[0][s].network, "shufflenetv2");
        let w = &c.types[0][v];
        assert_eq!(w.probes(), [0, 2, 5]);
        // Within 5% of 19.4 s only 19.5 and 20.0 qualify besides the max: 20·155 = 3100 and
        // 19.5·165 = 3217.5 and 19.4·170 = 3298: the 175 W limit (index 3). With a loose bound,
        // 24·118 = 2832 is the least of the six products: index 1.
        assert_eq!(w.floor_idx(0.05), 3);
        assert_eq!(w.floor_idx(0.0), 5);
        assert_eq!(w.floor_idx(1.0), 1);
        // A split run is never worse than one limit and keeps the bound.
        for b in [0.0, 0.01, 0.03, 0.05, 0.1, 0.3, 1.0] {
            let m = w.floor_mix(b);
            let one = w.power[w.floor_idx(b)] * w.time_ratio(w.floor_idx(b));
            let mixed = w.mix_power(m) * w.mix_time_ratio(m);
            assert!(mixed <= one + 1e-12 && w.mix_time_ratio(m) <= 1.0 + b + 1e-12, "{b}: {m:?}");
        }
        // At 3% the best single limit is 200 W (0.5% slower; 175 W is 3.1%); splitting the work
        // between limits on either side of 3% uses less and takes exactly 3% longer.
        let m = w.floor_mix(0.03);
        assert!((w.mix_time_ratio(m) - 1.03).abs() < 1e-12, "{m:?}");
        assert!(w.mix_power(m) * 1.03 < 165.0 * 19.5 / 19.4, "below the best single limit within 3%");
        assert_eq!((w.capped_idx(180.0), w.capped_idx(50.0), w.capped_idx(1e9)), (3, 0, 5));
        let m = w.fit().unwrap();
        let i = w.choose_idx(&m, Objective::Perf);
        assert_eq!(i, w.max_idx());
    }

    #[test]
    fn several_types_keep_only_settings_measured_on_every_type() {
        // The second type lacks shufflenetv2 and runs resnet50 twice as long.
        let a = tiny_zeus();
        let b: String = a
            .lines()
            .filter(|l| !l.contains("shufflenetv2"))
            .map(|l| match l.split(',').collect::<Vec<_>>().as_slice() {
                [d, n, bs, o, p, t, w] if *d != "dataset" => {
                    format!("{d},{n},{bs},{o},{p},{},{w}\n", 2.0 * t.parse::<f64>().unwrap())
                }
                _ => format!("{l}\n"),
            })
            .collect();
        let c = Catalog::from_zeus_csvs(&[(&a, "a.csv"), (&b, "b.csv")]).unwrap();
        assert_eq!((c.types.len(), c.len()), (2, 2));
        assert!(c.types.iter().all(|ws| ws.iter().all(|w| w.network == "resnet50")));
        assert_eq!(c.get(1, 1).batch, c.get(0, 1).batch);
        assert!((c.pace(1, 0) - 2.0).abs() < 1e-12 && c.pace(0, 1) == 1.0);
        let none = "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n";
        let e = Catalog::from_zeus_csvs(&[(&a, "a.csv"), (none, "n.csv")]).unwrap_err().to_string();
        assert!(e.contains("a.csv, n.csv: no workload") && e.ends_with("in every file"), "{e}");
    }

    #[test]
    fn bad_zeus_rows_are_errors() {
        let e = Catalog::from_zeus_csv("a,b\n", "z.csv").unwrap_err();
        assert!(e.to_string().starts_with("z.csv:1: expected the header"), "{e}");
        let mut t = tiny_zeus();
        t.push_str("imagenet,resnet50,64,adam,250,-1,170\n");
        let e = Catalog::from_zeus_csv(&t, "z.csv").unwrap_err();
        assert!(e.to_string().starts_with("z.csv:20: time_per_epoch"), "{e}");
    }
}
