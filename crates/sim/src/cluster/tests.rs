//! The cluster file's parsing and checks.

use super::*;

/// A small valid cluster file for unit tests.
pub(crate) const SMALL: &str = r#"
nodes = 4
gpus_per_node = 8
gpu = "V100"
zeus_csv = "zeus.csv"
[node]
base_w = 300.0
off_w = 10.0
shutdown_s = 60.0
shutdown_w = 400.0
boot_s = 300.0
boot_w = 500.0
[slurm]
suspend_times_s = [600.0]
suspend_timeout_s = 120.0
resume_timeout_s = 600.0
[prices]
hourly_utc = [0.1,0.1,0.1,0.1,0.1,0.1,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2]
[hints]
slowdown = [[0.0, 0.5], [0.1, 0.5]]
defer_fraction = 0.1
defer_window_s = [3600.0, 7200.0]
"#;

#[test]
fn small_file_parses_and_break_even_matches_the_formula() {
    let c = ClusterConfig::from_toml(SMALL, "small.toml").unwrap();
    assert_eq!(c.total_gpus(), 32);
    assert_eq!(c.groups[0].gpu_idle_w(), 57.0);
    assert_eq!(c.node_idle_w(0), 300.0 + 8.0 * 57.0);
    let idle = 300.0 + 8.0 * 57.0;
    let want = (400.0 * 60.0 + 500.0 * 300.0 - 10.0 * 360.0) / (idle - 10.0);
    assert!((c.node.break_even_s(idle) - want).abs() < 1e-9);
}

#[test]
fn groups_give_each_node_its_gpu_type() {
    let two = SMALL.replace(
        "nodes = 4\ngpus_per_node = 8\ngpu = \"V100\"\nzeus_csv = \"zeus.csv\"\n",
        "gpus_per_node = 8\n[[group]]\nnodes = 2\ngpu = \"V100\"\nzeus_csv = \"v.csv\"\n\
         [[group]]\nnodes = 3\ngpu = \"A40\"\nzeus_csv = \"a.csv\"\ngpu_idle_w = 30.0\n",
    );
    let c = ClusterConfig::from_toml(&two, "two.toml").unwrap();
    assert_eq!((c.nodes(), c.total_gpus()), (5, 40));
    assert_eq!(c.node_groups(), vec![0, 0, 1, 1, 1]);
    assert_eq!((c.groups[0].gpu_idle_w(), c.node_idle_w(1)), (57.0, 300.0 + 8.0 * 30.0));
    let both = two.replace("gpus_per_node = 8\n[[group]]", "gpus_per_node = 8\ngpu = \"V100\"\n[[group]]");
    let e = ClusterConfig::from_toml(&both, "b.toml").unwrap_err().to_string();
    assert!(e.starts_with("b.toml: gpu is given at the top level and in [[group]]"), "{e}");
    let bad = two.replace("gpu = \"A40\"", "gpu = \"K80\"");
    let e = ClusterConfig::from_toml(&bad, "b.toml").unwrap_err().to_string();
    assert!(e.starts_with("b.toml: group 2: gpu = \"K80\""), "{e}");
}

#[test]
fn errors_name_the_file_and_the_problem() {
    let bad = SMALL.replace("gpus_per_node = 8", "gpus_per_node = 0");
    let e = ClusterConfig::from_toml(&bad, "c.toml").unwrap_err().to_string();
    assert!(e.starts_with("c.toml: gpus_per_node = 0"), "{e}");
    let bad = SMALL.replace("boot_s = 300.0", "boot_s = 900.0");
    let e = ClusterConfig::from_toml(&bad, "c.toml").unwrap_err().to_string();
    assert!(e.contains("resume_timeout_s"), "{e}");
    let bad = SMALL.replace("[[0.0, 0.5], [0.1, 0.5]]", "[[0.0, 0.5]]");
    let e = ClusterConfig::from_toml(&bad, "c.toml").unwrap_err().to_string();
    assert!(e.contains("add up to 0.5"), "{e}");
    for q in ["0.0", "1.0"] {
        let e = ClusterConfig::from_toml(&format!("{SMALL}[wattson]\nwarm_shortfall = {q}\n"), "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml: wattson.warm_shortfall = "), "{e}");
    }
    let e = ClusterConfig::from_toml(&format!("{SMALL}[wattson]\nsize_exponent = -0.5\n"), "c.toml")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "c.toml: wattson.size_exponent = -0.5: allowed 0 to 4");
    let e = ClusterConfig::from_toml(&format!("{SMALL}[wattson]\nqueue_order = \"lifo\"\n"), "c.toml")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("c.toml: [wattson]: unknown variant `lifo`"), "{e}");
    let e = ClusterConfig::from_toml(&format!("{SMALL}[wattson]\nsuspend_time_s = 60\n"), "c.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `suspend_time_s`"), "not a knob of wattson: {e}");
    let bad = SMALL.replace("nodes = 4", "nodes = 4\nbogus = 1");
    let e = ClusterConfig::from_toml(&bad, "c.toml").unwrap_err().to_string();
    assert!(e.starts_with("c.toml: ") && e.contains("bogus"), "{e}");
}

#[test]
fn an_override_sets_a_key_as_the_file_does() {
    let knobs = [
        ("forecast_window_s", "600.0"),
        ("warm_break_evens", "2.5"),
        ("keep_break_evens", "1.0"),
        ("warm_shortfall", "0.5"),
        ("pack", "false"),
        ("min_price_drop", "0.5"),
        ("dvfs_min_free", "0.3"),
        ("dvfs_horizon_s", "7200.0"),
        ("congestion_raise", "0.25"),
        ("size_exponent", "1.0"),
        ("raise_after_runs", "0.0"),
        ("count_node_base", "false"),
        ("type_aware", "false"),
        ("type_max_cost", "3.0"),
        ("queue_order", "\"response-ratio\""),
        ("max_wait_cost", "0.5"),
        ("max_lag_s", "1800.0"),
        ("share_first", "false"),
        ("share_min_gain", "0.3"),
        ("share_try_bound", "0.5"),
        ("share_learn", "true"),
        ("loop_interval_s", "10.0"),
        ("clairvoyant", "true"),
        ("learn", "false"),
    ];
    let set_in_file: Vec<&str> = knobs.iter().map(|(key, _)| *key).collect();
    for key in wattson_engine::cluster::Tuning::KEYS {
        assert!(set_in_file.contains(key), "{key} is not tried here");
    }
    for (key, literal) in knobs {
        let file = ClusterConfig::from_toml(&format!("{SMALL}[wattson]\n{key} = {literal}\n"), "w.toml")
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        let mut set = ClusterConfig::from_toml(SMALL, "w.toml").unwrap().wattson;
        assert_ne!(set, file.wattson, "{key}: the test value is the default");
        set.set_pair(&format!("{key}={}", literal.trim_matches('"'))).unwrap();
        assert_eq!(set, file.wattson, "{key}");
    }
    let mut w = ClusterConfig::from_toml(SMALL, "w.toml").unwrap().wattson;
    let e = w.set_pair("warm=1").unwrap_err().to_string();
    assert_eq!(e, "override `warm=1`: unknown [wattson] knob `warm`");
    w.set_pair("pack=0").unwrap();
    assert!(!w.tuning.pack, "a boolean may be written 0 or 1");
    let e = w.set_pair("queue_order=lifo").unwrap_err().to_string();
    assert!(e.starts_with("override `queue_order=lifo`: [wattson]: unknown variant `lifo`"), "{e}");
    assert_eq!(w.set_pair("pack").unwrap_err().to_string(), "override `pack`: expected key=value");
    let e = w.set_pair("pack=yes").unwrap_err().to_string();
    assert!(e.starts_with("override `pack=yes`: [wattson]: invalid type"), "{e}");
    let e = w.set_pair("congestion_raise=2").unwrap_err().to_string();
    assert_eq!(e, "override `congestion_raise=2`: wattson.congestion_raise = 2: allowed 0 to 1");
}

#[test]
fn opting_in_to_shared_gpus_needs_the_pair_data_and_sane_shares() {
    let with = |hints: &str, top: &str| {
        let text = SMALL.replace(
            "defer_window_s = [3600.0, 7200.0]\n",
            &format!("defer_window_s = [3600.0, 7200.0]\n{hints}"),
        );
        ClusterConfig::from_toml(&format!("{top}{text}"), "s.toml")
    };
    let err = with("share_fraction = 0.5\n", "").unwrap_err().to_string();
    assert!(
        err.contains("s.toml: hints.share_fraction = 0.5: jobs that share GPUs need colocation_json"),
        "{err}"
    );
    let c = with("share_fraction = 0.5\nshare_bound = 0.4\n", "colocation_json = \"g.json\"\n").unwrap();
    assert_eq!((c.hints.share_fraction, c.hints.share_bound), (0.5, 0.4));
    let err = with("share_fraction = 1.5\n", "colocation_json = \"g.json\"\n").unwrap_err().to_string();
    assert!(err.contains("hints.share_fraction = 1.5: allowed 0..=1"), "{err}");
    let err = with("share_bound = -1\n", "").unwrap_err().to_string();
    assert!(err.contains("hints.share_bound = -1: allowed 0..=10"), "{err}");
}
