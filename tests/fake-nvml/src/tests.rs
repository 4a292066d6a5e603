//! Unit tests of the physics, validation and persistence.

use crate::config::Config;
use crate::state::*;
use crate::{Fault, Sim};
use nvml_wrapper_sys::bindings::*;
use std::path::PathBuf;

fn h100() -> crate::GpuSpec {
    Config::uniform("H100", 1).spec(0).unwrap()
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fake-nvml-unit-{tag}-{}-{}", std::process::id(), now_ns()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn counter_integrates_exactly_across_load_changes() {
    let spec = h100();
    let mut st = State { t_ns: 1_000, gpus: vec![GpuState::fresh(&spec, 0)] };
    let start = st.gpus[0].counter_mj;
    assert_eq!(start, 1_000_000_000);
    let idle_mw = st.gpus[0].power_mw;
    assert_eq!(idle_mw, 72_000);
    // 1.5 s idle, then 2.25 s at 50 % load, then 0.333333333 s at full load.
    st.advance(std::slice::from_ref(&spec), 1_000 + 1_500_000_000);
    st.gpus[0].load = 0.5;
    st.gpus[0].refresh(&spec);
    let half_mw = st.gpus[0].power_mw;
    st.advance(std::slice::from_ref(&spec), 1_000 + 3_750_000_000);
    st.gpus[0].load = 1.0;
    st.gpus[0].refresh(&spec);
    let full_mw = st.gpus[0].power_mw;
    assert_eq!(full_mw, 650_000);
    st.advance(std::slice::from_ref(&spec), 1_000 + 4_083_333_333);
    let expect_mw_ns =
        72_000u128 * 1_500_000_000 + u128::from(half_mw) * 2_250_000_000 + u128::from(full_mw) * 333_333_333;
    let g = &st.gpus[0];
    assert_eq!(
        u128::from(g.counter_mj - start) * 1_000_000_000 + u128::from(g.counter_rem_mw_ns),
        expect_mw_ns
    );
    // Many tiny steps lose nothing either.
    let mut a = GpuState::fresh(&spec, 0);
    let mut b = a.clone();
    for _ in 0..1000 {
        a.integrate(0, 1_234_567);
    }
    b.integrate(0, 1_234_567_000);
    assert_eq!((a.counter_mj, a.counter_rem_mw_ns), (b.counter_mj, b.counter_rem_mw_ns));
    // Time running backwards does not move the counter.
    let before = st.clone();
    st.advance(std::slice::from_ref(&spec), 5);
    assert_eq!(st, before);
}

#[test]
fn power_cap_lowers_clock_to_where_curve_meets_limit() {
    let spec = h100();
    let mut g = GpuState::fresh(&spec, 0);
    g.load = 1.0;
    g.power_limit_mw = 400_000;
    g.refresh(&spec);
    assert_eq!(g.power_mw, 400_000);
    assert!(g.sm_clock_mhz < 1980 && g.sm_clock_mhz > 345, "{}", g.sm_clock_mhz);
    let exact = solve_capped_clock(&spec, 1.0, 400.0, 1980.0);
    assert!((curve_w(&spec, 1.0, exact) - 400.0).abs() < 1e-6);
    assert_eq!(g.sm_clock_mhz, exact.round() as u32);
    // Not binding: full clock, curve power.
    g.power_limit_mw = 700_000;
    g.refresh(&spec);
    assert_eq!((g.power_mw, g.sm_clock_mhz), (650_000, 1980));
    // Locked clocks lower the target and the power.
    g.locked_clocks_mhz = Some((1005, 1500));
    g.refresh(&spec);
    assert_eq!(g.sm_clock_mhz, 1500);
    assert_eq!(g.power_mw, (curve_w(&spec, 1.0, 1500.0) * 1000.0).round() as u32);
    // Idle reports the lock's floor, idle power.
    g.load = 0.0;
    g.refresh(&spec);
    assert_eq!((g.power_mw, g.sm_clock_mhz), (72_000, 1005));
}

#[test]
fn privilege_check() {
    assert_eq!(check_privilege(0, &[0]), Ok(()));
    assert_eq!(check_privilege(1000, &[0]), Err(nvmlReturn_enum_NVML_ERROR_NO_PERMISSION));
    assert_eq!(check_privilege(1000, &[0, 1000]), Ok(()));
    assert_eq!(check_privilege(0, &[]), Err(nvmlReturn_enum_NVML_ERROR_NO_PERMISSION));
}

#[test]
fn setter_validation() {
    let spec = h100();
    let mut g = GpuState::fresh(&spec, 0);
    let inv = Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    assert_eq!(set_power_limit(&spec, &mut g, 199_999), inv);
    assert_eq!(set_power_limit(&spec, &mut g, 700_001), inv);
    assert_eq!(g.power_limit_mw, 700_000);
    assert_eq!(set_power_limit(&spec, &mut g, 200_000), Ok(()));
    assert_eq!(g.power_limit_mw, 200_000);
    assert_eq!(set_locked_clocks(&spec, &mut g, 1500, 1005), inv);
    assert_eq!(set_locked_clocks(&spec, &mut g, 1000, 1500), inv); // 1000 is not a supported step
    assert_eq!(g.locked_clocks_mhz, None);
    assert_eq!(set_locked_clocks(&spec, &mut g, 1500, 1500), Ok(()));
    assert_eq!(g.locked_clocks_mhz, Some((1500, 1500)));
    assert_eq!(set_app_clocks(&spec, &mut g, 1593, 1500), inv);
    assert_eq!(set_app_clocks(&spec, &mut g, 2619, 1501), inv);
    assert_eq!(set_app_clocks(&spec, &mut g, 2619, 1200), Ok(()));
    assert_eq!(g.app_clock_mhz, 1200);
}

#[test]
fn history_integration_is_piecewise_exact() {
    let pts = [(100, 1_000), (200, 3_000), (400, 0)];
    // mW·ns / 1e9 = mJ.
    assert_eq!(integrate_history(&pts, 100, 100).unwrap(), 0.0);
    assert_eq!(integrate_history(&pts, 150, 250).unwrap(), (50.0 * 1000.0 + 50.0 * 3000.0) / 1e9);
    assert_eq!(integrate_history(&pts, 100, 1000).unwrap(), (100.0 * 1000.0 + 200.0 * 3000.0) / 1e9);
    assert!(integrate_history(&pts, 50, 150).is_err());
    assert!(integrate_history(&pts, 300, 200).is_err());
}

#[test]
fn sim_state_is_persistent_and_truth_matches_counter() {
    let dir = temp_dir("persist");
    let sim = Sim::create(&dir, &Config::uniform("A100", 2)).unwrap();
    let s0 = sim.gpu_state(1).unwrap();
    // Starts at 2e9 mJ for index 1 and has run for a moment at idle power.
    assert!((2_000_000_000..2_000_055_000).contains(&s0.counter_mj), "{}", s0.counter_mj);
    let t0 = now_ns();
    let c0 = sim.gpu_state(0).unwrap().counter_mj;
    sim.set_load(0, 0.8).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    sim.set_fault(0, Fault::CounterReset).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    // A second handle (as another process would) sees the same state.
    let other = Sim::open(&dir);
    let g = other.gpu_state(0).unwrap();
    let t1 = now_ns();
    assert!(g.counter_mj < c0 && g.counter_resets == 1);
    assert!(g.power_mw > 55_000);
    let truth = sim.truth_energy_mj(0, t0, t1).unwrap();
    // ≥ 60 ms at ≥ 55 W plus the loaded part.
    assert!(truth > 60e-3 * 55_000.0, "{truth}");
    assert!(sim.set_load(0, 1.5).is_err());
    assert!(sim.set_load(7, 0.5).is_err());
    let text = std::fs::read_to_string(history_path(&dir, 0)).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.lines().nth(2).unwrap().ends_with(" reset"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn work_follows_the_hidden_law_at_the_effective_clock() {
    let spec = h100();
    let mut g = GpuState::fresh(&spec, 0);
    g.workload = Some(Workload { t0_s: 0.02, d_s_mhz: 158.4 });
    g.integrate(0, 1_000_000_000);
    assert_eq!(g.work_units, 0.0, "no progress at zero load");
    g.load = 1.0;
    g.refresh(&spec);
    g.integrate(0, 2_000_000_000);
    // 1980 MHz: 0.02 + 0.08 = 0.1 s per unit, so 20 units in 2 s.
    assert!((g.work_units - 20.0).abs() < 1e-9, "{}", g.work_units);
    g.power_limit_mw = 400_000;
    g.refresh(&spec);
    let f = f64::from(g.sm_clock_mhz);
    g.integrate(0, 1_000_000_000);
    assert!((g.work_units - 20.0 - 1.0 / (0.02 + 158.4 / f)).abs() < 1e-9);
    assert!(g.work_units - 20.0 < 10.0, "capped GPU is slower");
}

#[test]
fn a_measured_curve_sets_power_and_speed_and_tells_the_truth() {
    use crate::{CurvePoint, MeasuredCurve, Noise};
    let dir = temp_dir("curve");
    let mut cfg = Config::uniform("A100", 1);
    cfg.gpu[0].power_limit_max_w = Some(250.0);
    cfg.gpu[0].power_limit_default_w = Some(250.0);
    let sim = Sim::create(&dir, &cfg).unwrap();
    let points = [(100.0, 0.2, 98.0), (175.0, 0.12, 160.0), (250.0, 0.1, 210.0)]
        .map(|(limit_w, time_s, power_w)| CurvePoint { limit_w, time_s, power_w });
    let curve = MeasuredCurve::new(points.to_vec(), Noise::NONE).unwrap();
    assert_eq!(sim.true_point(0).unwrap(), None);
    sim.set_curve(0, Some(curve.clone())).unwrap();
    sim.set_workload(0, Some(Workload { t0_s: 1.0, d_s_mhz: 0.0 })).unwrap();
    let idle = sim.gpu_state(0).unwrap();
    assert_eq!(idle.power_mw, 55_000, "idle at zero load, whatever the curve");
    sim.set_load(0, 1.0).unwrap();
    let full = sim.gpu_state(0).unwrap();
    assert_eq!(full.power_mw, 210_000, "the curve's power at the default limit");
    assert_eq!(full.sm_clock_mhz, 1410, "full speed at the curve's top");
    sim.set_power_limit(0, 175_000).unwrap();
    let capped = sim.gpu_state(0).unwrap();
    assert_eq!(capped.power_mw, 160_000);
    assert_eq!(capped.sm_clock_mhz, (1410.0f64 * 0.1 / 0.12).round() as u32);
    let truth = sim.true_point(0).unwrap().unwrap();
    assert_eq!((truth.limit_w, truth.time_s, truth.power_w), (175.0, 0.12, 160.0));
    // Progress at the curve's speed, not the workload law's (1 unit per second), over the
    // span between the instants the fake counted it at (a clock read beside the calls would
    // count the time the calls take, which a loaded machine makes long).
    let (t0, before) = sim.work_done_at(0).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    let (t1, after) = sim.work_done_at(0).unwrap();
    let (done, dt) = (after - before, (t1 - t0) as f64 / 1e9);
    assert!(dt >= 0.6 && (done - dt / 0.12).abs() < 1e-9, "{done} units in {dt} s");
    // Half load: idle plus half the curve's power above idle.
    sim.set_load(0, 0.5).unwrap();
    assert_eq!(sim.gpu_state(0).unwrap().power_mw, 55_000 + (160_000 - 55_000) / 2);
    sim.set_curve(0, None).unwrap();
    assert_eq!(sim.true_point(0).unwrap(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn realistic_h100() -> crate::GpuSpec {
    Config::realistic("H100", 1).spec(0).unwrap()
}

#[test]
fn a_realistic_counter_steps_every_100_ms_and_holds_between() {
    let spec = realistic_h100();
    let mut g = GpuState::fresh(&spec, 0);
    let start = g.counter_read();
    g.load = 1.0;
    g.refresh(&spec);
    g.run(&spec, 0, 99_000_000);
    assert_eq!(g.counter_read(), start, "no step before the first tick");
    assert!(g.counter_mj > start, "the GPU drew energy all the same");
    g.run(&spec, 99_000_000, 100_000_000);
    // At the step the read catches up with exactly what was drawn.
    assert_eq!(g.counter_read(), g.counter_mj);
    assert_eq!(g.counter_read() - start, 65_000);
    g.run(&spec, 100_000_000, 150_000_000);
    assert_eq!(g.counter_read() - start, 65_000);
}

#[test]
fn a_realistic_gpu_heats_and_then_runs_slower_under_its_cap() {
    let spec = realistic_h100();
    let mut g = GpuState::fresh(&spec, 0);
    g.load = 1.0;
    g.refresh(&spec);
    assert_eq!((g.power_mw, g.sm_clock_mhz), (650_000, 1980), "cool: the nominal draw");
    let changes = g.run(&spec, 0, 600_000_000_000);
    let temp = g.physics.as_ref().unwrap().temp_c;
    assert!(temp > 80.0, "{temp}");
    assert_eq!(g.power_mw, 700_000, "the leakage pushed the draw to the cap");
    assert!(g.sm_clock_mhz < 1950, "hot and capped: a lower clock ({})", g.sm_clock_mhz);
    assert!(changes.len() > 10 && changes.windows(2).all(|w| w[0].0 < w[1].0), "the draw rose step by step");
}

#[test]
fn a_realistic_setting_settles_from_the_next_step() {
    // Judged on the draw's history, whose instants are the driver's own (its steps), so that
    // no verdict depends on when this thread runs: after the limit is set, the draw changes
    // only at steps, passes between the two draws, and reaches the limit no sooner than the
    // settling time after it was set.
    let r = realistic_h100().realism.unwrap();
    let dir = temp_dir("settle");
    let sim = Sim::create(&dir, &Config::realistic("H100", 1)).unwrap();
    sim.set_load(0, 1.0).unwrap();
    let before = sim.gpu_state(0).unwrap().power_mw;
    let set_from = now_ns();
    sim.set_power_limit(0, 300_000).unwrap();
    assert_eq!(sim.gpu_state(0).unwrap().power_limit_mw, 300_000);
    std::thread::sleep(std::time::Duration::from_millis(450));
    assert_eq!(sim.gpu_state(0).unwrap().power_mw, 300_000, "settled");
    let all = history(&dir, 0).unwrap();
    let draws: Vec<(i64, u64)> = all.iter().copied().filter(|&(t, _)| t > set_from).collect();
    assert!(draws.iter().all(|&(t, _)| r.next_tick(t - 1) == t), "changes at steps only: {all:?}");
    let before = u64::from(before);
    assert!(draws.iter().any(|&(_, p)| p > 300_000 && p < before), "a draw between on the way: {all:?}");
    let reached = draws.iter().find(|&&(_, p)| p == 300_000).expect("the limit reached").0;
    assert!(reached >= set_from + r.settle_ns, "reached at {reached}, set from {set_from}: {all:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_realistic_gpu_counts_what_its_history_says_it_drew() {
    let dir = temp_dir("truth");
    let sim = Sim::create(&dir, &Config::realistic("A100", 2)).unwrap();
    sim.set_load(1, 0.7).unwrap();
    // The counter and the instant it was advanced to, taken under one lock.
    let counter_at = || with_state(&dir, |_, st, now| (now, st.gpus[1].counter_mj)).unwrap();
    let (t0, c0) = counter_at();
    for _ in 0..30 {
        // Many readers between the ticks: each tick is run, and written, once.
        std::thread::sleep(std::time::Duration::from_millis(30));
        sim.gpu_state(0).unwrap();
    }
    sim.set_load(1, 0.2).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let (t1, c1) = counter_at();
    let drawn = (c1 - c0) as f64;
    let truth = sim.truth_energy_mj(1, t0, t1).unwrap();
    // Exact but for the counter's whole millijoules at each end.
    assert!((drawn - truth).abs() <= 2.0, "drawn {drawn} truth {truth}");
    let history = std::fs::read_to_string(history_path(&dir, 1)).unwrap();
    let times: Vec<i64> = history.lines().filter_map(|l| l.split_whitespace().next()?.parse().ok()).collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{history}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn history_written_again_after_a_killed_process_counts_once() {
    let dir = temp_dir("redo");
    // A process wrote the ticks at 100 and 200 ns and was killed before saving the state; the
    // next call ran them again from the saved instant and went on to 300 ns.
    let lines = "0 1000\n100 2000\n200 3000\n100 2000\n200 3000\n300 1000\n";
    std::fs::write(history_path(&dir, 0), lines).unwrap();
    let mj = truth_energy_mj(&dir, 0, 0, 400).unwrap();
    assert_eq!(mj, (1000.0 * 100.0 + 2000.0 * 100.0 + 3000.0 * 100.0 + 1000.0 * 100.0) / 1e9);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_warmed_gpu_is_at_the_heat_of_its_draw_and_the_truth_follows_its_draw() {
    let dir = temp_dir("warm");
    let sim = Sim::create(&dir, &Config::realistic("H100", 1)).unwrap();
    sim.set_load(0, 0.9).unwrap();
    let cool = sim.gpu_state(0).unwrap();
    sim.warm(0).unwrap();
    let warm = sim.gpu_state(0).unwrap();
    let (t0, t1) = (cool.physics.unwrap().temp_c, warm.physics.as_ref().unwrap().temp_c);
    assert!(t1 > t0 + 30.0, "warmed from {t0} to {t1} °C only");
    assert!(warm.power_mw > cool.power_mw, "the leakage of the heat raised the draw");
    // At its own draw's heat: a minute more changes the temperature by under a degree.
    let spec = Config::realistic("H100", 1).spec(0).unwrap();
    let later = spec.realism.unwrap().heat(t1, warm.power_mw, 60_000_000_000);
    assert!((later - t1).abs() < 1.0, "{t1} °C drifts to {later}");
    // The truth holds the warm draw from then on.
    let from = crate::state::now_ns();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let to = crate::state::now_ns();
    let truth = sim.truth_energy_mj(0, from, to).unwrap();
    assert!(truth > f64::from(cool.power_mw) * (to - from) as f64 / 1e9, "{truth} mJ");
}

#[test]
fn a_steady_point_is_where_a_gpu_held_at_a_limit_settles_and_asking_changes_nothing() {
    use crate::{CurvePoint, MeasuredCurve, Noise};
    let points = [(100.0, 0.2, 98.0), (175.0, 0.12, 160.0), (250.0, 0.1, 210.0)]
        .map(|(limit_w, time_s, power_w)| CurvePoint { limit_w, time_s, power_w });
    let curve = MeasuredCurve::new(points.to_vec(), Noise::NONE).unwrap();
    for realistic in [false, true] {
        let dir = temp_dir(if realistic { "steady-real" } else { "steady-ideal" });
        let mut cfg = if realistic { Config::realistic("A100", 1) } else { Config::uniform("A100", 1) };
        cfg.gpu[0].power_limit_max_w = Some(250.0);
        cfg.gpu[0].power_limit_default_w = Some(250.0);
        if let Some(r) = cfg.gpu[0].realism.as_mut() {
            r.thermal_tau_s = Some(0.05);
        }
        let sim = Sim::create(&dir, &cfg).unwrap();
        assert_eq!(sim.steady_point(0, 175.0).unwrap(), None, "no curve, no truth");
        sim.set_curve(0, Some(curve.clone())).unwrap();
        sim.set_load(0, 1.0).unwrap();
        let steady = sim.steady_point(0, 175.0).unwrap().unwrap();
        let again = sim.steady_point(0, 175.0).unwrap().unwrap();
        assert_eq!(steady, again);
        let after = sim.gpu_state(0).unwrap();
        assert_eq!(
            (after.power_limit_mw, after.physics.map(|p| p.limit_mw)),
            (250_000, realistic.then_some(250_000))
        );
        if !realistic {
            assert_eq!((steady.limit_w, steady.time_s, steady.power_w), (175.0, 0.12, 160.0));
            std::fs::remove_dir_all(&dir).unwrap();
            continue;
        }
        // Hot under a cap: slower than the cold curve at 175 W and drawing more.
        assert!(steady.time_s > 0.12 && steady.power_w > 160.0, "{steady:?}");
        // Held at 175 W for many time constants, the running GPU gets there.
        sim.set_power_limit(0, 175_000).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        sim.gpu_state(0).unwrap();
        let held = sim.true_point(0).unwrap().unwrap();
        assert!((held.time_s / steady.time_s - 1.0).abs() < 1e-4, "held {held:?}, steady {steady:?}");
        assert!((held.power_w / steady.power_w - 1.0).abs() < 1e-4, "held {held:?}, steady {steady:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
