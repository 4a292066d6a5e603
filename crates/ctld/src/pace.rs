//! The pace the controller asks of each running job's nodes, from the engine's decision.

use wattson_engine::cluster::{Actions, Level};
use wattson_protocol::Pace;

use crate::snapshot::Learned;

/// The pace of running job `id`. The engine's level for it ([`Actions::levels`], raised to
/// the first within its own bound) where the budget shed its power ([`Actions::shed`]), or
/// where the engine raised it ([`Actions::raised`]) with `congestion_raise` below 1; full
/// speed where it raised it otherwise, or where the job's nodes gave no level table; else
/// the nodes' own least-energy setting within the bound.
pub fn of(learned: &Learned, actions: &Actions, id: u32, congestion_raise: f64) -> Pace {
    let raised = actions.raised.binary_search(&id).is_ok();
    let shed = actions.shed.binary_search(&id).is_ok();
    let known = learned.levels.get(&id).filter(|l| !l.levels.is_empty());
    match known {
        Some(known) if shed || (raised && congestion_raise < 1.0) => {
            let chosen = actions.levels.iter().rev().find(|(j, _)| *j == id).map_or(known.level, |&(_, l)| l);
            Pace::Level(within_bound(&known.levels, chosen, known.bound))
        }
        _ if raised => Pace::Full,
        _ => Pace::Saving,
    }
}

/// The first level at or above `level` whose pessimistic slowdown is within `bound` (the top
/// level, the defaults, always is).
fn within_bound(levels: &[Level], level: u16, bound: f64) -> u16 {
    let top = levels.len().saturating_sub(1);
    (usize::from(level).min(top)..top).find(|&i| levels[i].slowdown_hi <= bound).unwrap_or(top) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::JobLevels;

    fn level(setting: f64, slowdown_hi: f64) -> Level {
        Level { setting, slowdown_hi, energy_ratio: 1.0, power_w: setting, cap_w: setting }
    }

    #[test]
    fn a_level_beyond_the_jobs_bound_is_raised_to_the_first_within_it() {
        let levels = [level(300.0, 0.4), level(400.0, 0.15), level(500.0, 0.05), level(700.0, 0.0)];
        assert_eq!(within_bound(&levels, 0, 0.1), 2);
        assert_eq!(within_bound(&levels, 1, 0.2), 1);
        assert_eq!(within_bound(&levels, 0, 0.0), 3);
        assert_eq!(within_bound(&levels, 9, 0.5), 3, "beyond the table: the top");
    }

    #[test]
    fn a_job_the_budget_shed_runs_at_the_engines_level_and_others_keep_their_own_pace() {
        let mut learned = Learned::default();
        let levels = vec![level(300.0, 0.05), level(700.0, 0.0)];
        learned.levels.insert(7, JobLevels { levels, level: 1, bound: 0.1 });
        let shed = Actions { levels: vec![(7, 0)], shed: vec![7], ..Actions::default() };
        assert_eq!(of(&learned, &shed, 7, 1.0), Pace::Level(0));
        let chosen = Actions { levels: vec![(7, 0)], ..Actions::default() };
        assert_eq!(of(&learned, &chosen, 7, 1.0), Pace::Saving, "not shed: its pace without a budget");
        assert_eq!(of(&learned, &Actions { shed: vec![8], ..shed }, 8, 1.0), Pace::Saving, "no table");
    }

    #[test]
    fn a_raised_job_runs_at_full_speed_or_with_a_partial_raise_at_the_engines_level() {
        let mut learned = Learned::default();
        let levels = vec![level(300.0, 0.4), level(500.0, 0.05), level(700.0, 0.0)];
        learned.levels.insert(7, JobLevels { levels, level: 0, bound: 0.5 });
        let raised = Actions { levels: vec![(7, 1)], raised: vec![7], ..Actions::default() };
        assert_eq!(of(&learned, &raised, 7, 1.0), Pace::Full);
        assert_eq!(of(&learned, &raised, 7, 0.9), Pace::Level(1));
        // Its level unchanged this loop: the level it runs at, within its bound.
        let kept = Actions { levels: Vec::new(), ..raised.clone() };
        assert_eq!(of(&learned, &kept, 7, 0.9), Pace::Level(0));
        // No table from its nodes: full speed, the one pace that needs none.
        assert_eq!(of(&learned, &Actions { raised: vec![8], ..raised }, 8, 0.9), Pace::Full);
    }
}
