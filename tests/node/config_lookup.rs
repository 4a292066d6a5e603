//! Without `-c` or `$WATTSON_CONFIG`, the programs find `wattson.toml` beside `slurm.conf` as
//! Slurm finds its own (`$SLURM_CONF`), before `/etc/wattson/wattson.toml`.

use std::process::Command;

#[test]
fn wattsond_finds_its_configuration_beside_slurm_conf() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("slurm.conf"), "ClusterName=lab\n").unwrap();
    // wattsond --check-config with no -c and no $WATTSON_CONFIG, beside this slurm.conf.
    let check = || {
        Command::new(wattson_harness::programs::program("wattsond"))
            .arg("--check-config")
            .env_remove("WATTSON_CONFIG")
            .env("SLURM_CONF", dir.path().join("slurm.conf"))
            .output()
            .unwrap()
    };
    // A file wattsond refuses (with its path) shows which file it read.
    std::fs::write(dir.path().join("wattson.toml"), "[daemon]\nsample_interval = 3\n").unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&dir.path().join("wattson.toml").display().to_string()), "{stderr}");

    // A valid one beside it is the one checked.
    std::fs::write(dir.path().join("wattson.toml"), "[daemon]\nsample_interval = \"2s\"\n").unwrap();
    let out = check();
    assert!(out.status.success(), "{out:?}");
}
