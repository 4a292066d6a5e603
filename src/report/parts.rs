//! The parts of a job's energy besides its GPUs (its share of the CPU packages, DRAM and the
//! whole node) and the scope of its figure in Slurm, as `wattson acct` shows them.

use serde_json::{Value, json};

use super::units::joules_raw;
use wattson_types::job::JobRecord;

/// Shown for a part the node did not measure: not available, never a zero.
pub const NOT_AVAILABLE: &str = "n/a";

/// Which part of a record's energy a column shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The CPU packages' share.
    Cpu,
    /// The DRAM's share.
    Dram,
    /// The whole node's share.
    Node,
    /// The energy of the record's scope (what Slurm was given).
    Scoped,
}

/// `r`'s energy of `part` in mJ; `None` where it was not measured (records from before
/// shares were recorded have none of the parts, and a GPU-only scope).
fn part_mj(r: &JobRecord, part: Part) -> Option<f64> {
    match part {
        Part::Scoped => r.scoped_energy_mj().ok(),
        _ => {
            let share = r.node_share?;
            match part {
                Part::Cpu => share.cpu_mj,
                Part::Dram => share.dram_mj,
                _ => share.node_mj,
            }
        }
    }
}

/// The cell of `part`: whole joules, or [`NOT_AVAILABLE`].
pub fn cell(r: &JobRecord, part: Part) -> String {
    part_mj(r, part).map(|mj| joules_raw(mj / 1000.0).to_string()).unwrap_or_else(|| NOT_AVAILABLE.into())
}

/// The scope of the record's figure in Slurm (`gpu` for records from before scopes).
pub fn scope(r: &JobRecord) -> &'static str {
    r.node_share.map(|s| s.scope.as_str()).unwrap_or("gpu")
}

/// The `--json` fields: the scope and each part in J (`null` where not available).
pub fn json_fields(r: &JobRecord) -> Value {
    let j = |part| part_mj(r, part).map(|mj| mj / 1000.0);
    json!({
        "scope": scope(r),
        "scope_energy_j": j(Part::Scoped),
        "cpu_energy_j": j(Part::Cpu),
        "dram_energy_j": j(Part::Dram),
        "node_energy_j": j(Part::Node),
    })
}
