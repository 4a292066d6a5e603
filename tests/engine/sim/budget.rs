//! A cluster power budget: never exceeded, better than one uniform cap, deterministic.

use super::*;

/// `[budget] power_w`: wattson never draws above it (measured by the meter at every change)
/// and finishes jobs sooner on average than the static uniform cap that fits the same budget,
/// within every job's bound; the uniform cap breaks bounds. Full cluster04, 80 nodes, 140 kW.
#[test]
fn budget_is_never_exceeded_and_beats_the_uniform_cap() {
    let (mut c, cat) = inputs();
    c.budget = Some(wattson_sim::cluster::Budget { power_w: 140_000.0 });
    let t = wattson_sim::trace::parse(
        &read(&data("traces/itp-elasticflow/cluster04.csv")),
        "cluster04.csv",
        TraceFormat::Auto,
    )
    .expect("trace parses");
    let policies = [ClusterPolicy::Wattson, ClusterPolicy::UniformCap];
    let o = wattson_sim::run(&c, &cat, &t, "cluster04.csv", &policies, 1).unwrap();
    check_conservation(&c, &o);
    let by = |p: ClusterPolicy| o.report.summary(p).unwrap();
    let (w, u) = (by(ClusterPolicy::Wattson), by(ClusterPolicy::UniformCap));
    for s in [w, u] {
        assert_eq!(s.over_budget_s, 0.0, "{} went above the budget", s.policy);
        assert!(s.peak_kw <= 140.0, "{} peak {}", s.policy, s.peak_kw);
    }
    assert!(w.jct_mean_s < u.jct_mean_s, "wattson {} vs uniform cap {}", w.jct_mean_s, u.jct_mean_s);
    assert_eq!(w.bound_violations, 0);
    assert!(u.bound_violations > 0, "a 168.75 W cap slows the jobs that asked for no slowdown");
    // The cap itself: (140 kW / 80 nodes - 400 W) / 8 GPUs = 168.75 W.
    assert_eq!(c.uniform_cap_w(), Some(168.75));
}

/// With a budget, wattson's gating and shedding and the uniform cap are deterministic,
/// conserve energy and GPUs, and stay under the budget (1,500-job prefix of cluster04, 100 kW).
#[test]
fn budget_runs_are_deterministic_and_conserve() {
    let (mut c, cat) = inputs();
    c.budget = Some(wattson_sim::cluster::Budget { power_w: 100_000.0 });
    let mut t = wattson_sim::trace::parse(
        &read(&data("traces/itp-elasticflow/cluster04.csv")),
        "cluster04.csv",
        TraceFormat::Auto,
    )
    .expect("trace parses");
    t.truncate(1500);
    let go = || wattson_sim::run(&c, &cat, &t, "c04", &wattson_sim::policies::ALL, 4).unwrap();
    let (a, b) = (go(), go());
    assert_eq!(wattson_sim::metrics::to_csv(&a.report), wattson_sim::metrics::to_csv(&b.report));
    assert_eq!(wattson_sim::plot::power_over_time(&a.report), wattson_sim::plot::power_over_time(&b.report));
    check_conservation(&c, &a);
    check_no_double_booking(&c, &a);
    let by = |p: ClusterPolicy| a.report.summary(p).unwrap();
    assert_eq!(by(ClusterPolicy::Wattson).over_budget_s, 0.0);
    assert_eq!(by(ClusterPolicy::UniformCap).over_budget_s, 0.0);
    assert!(by(ClusterPolicy::SlurmDefault).over_budget_s > 0.0, "the budget binds on this prefix");
    assert!(wattson_sim::plot::power_over_time(&a.report).contains("budget 100"));
}
