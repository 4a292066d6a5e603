//! Man pages and shell completions: generated from the command-line definitions, they render
//! with man(1) without warnings, say what `--help` says, and the completions load in bash.

use std::process::Command;

#[test]
fn man_pages_render_and_completions_load() {
    let dir = tempfile::tempdir().unwrap();
    let files = wattson_docs::write_all(dir.path()).unwrap();
    let page = |name: &str| {
        files.iter().find(|f| f.ends_with(name)).unwrap_or_else(|| panic!("no {name}: {files:?}"))
    };
    let render = |name: &str| -> String {
        let out = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(page(name))
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .output()
            .expect("man(1) runs (scripts/install-deps installs man-db)");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && stderr.trim().is_empty(), "{name}: {stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let wattson = render("man1/wattson.1");
    for sub in ["acct", "status", "job", "sim", "ctld", "power"] {
        assert!(wattson.contains(&format!("wattson-{sub}(1)")), "wattson(1) lists {sub}:\n{wattson}");
    }
    let acct = render("man1/wattson-acct.1");
    assert!(acct.contains("--format") || acct.contains("-o"), "{acct}");
    let daemon = render("man8/wattsond.8");
    assert!(daemon.contains("--check-config") && daemon.contains("WATTSON_CONFIG"), "{daemon}");
    assert!(render("man1/wattson-power-status.1").contains("--json"));

    // The configuration's page names every table and key, with its default.
    let config = render("man5/wattson.toml.5");
    for table in wattson_config::reference::tables() {
        assert!(config.contains(&format!("[{}]", table.name)), "wattson.toml(5) misses [{}]", table.name);
        for key in &table.keys {
            let head = match &key.default {
                Some(default) => format!("{} = {default}", key.name),
                None => key.name.clone(),
            };
            assert!(config.contains(&head), "wattson.toml(5) misses {head} in [{}]", table.name);
        }
    }
    assert!(config.contains("allowed: 100ms to 1h") && config.contains("one of power-limit, sm-clock"));

    // The plugins' page lists every option the SPANK plugin registers.
    let slurm = render("man8/wattson-slurm.8");
    for option in wattson_slurm::hints::OPTIONS {
        assert!(slurm.contains(&format!("--{}=", option.name)), "wattson-slurm(8) misses --{}", option.name);
    }
    // It covers all three plugins, and where the configuration is found.
    for plugin in common_plugin_names() {
        assert!(slurm.contains(plugin), "wattson-slurm(8) misses {plugin}:\n{slurm}");
    }
    for place in
        wattson_config::locate::candidates(Some(std::ffi::OsStr::new("/x/slurm.conf"))).iter().skip(1)
    {
        assert!(slurm.contains(&place.display().to_string()), "wattson-slurm(8) misses {}", place.display());
    }

    for name in ["wattson", "wattsond"] {
        let script = page(&format!("completions/{name}.bash"));
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("source {}; complete -p {name}", script.display()))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains(&format!(" {name}")),
            "{name}: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn version_names_the_slurm_the_plugins_are_built_for() {
    for program in
        [wattson_harness::programs::program("wattson"), wattson_harness::programs::program("wattsond")]
    {
        let out = Command::new(&program).arg("--version").output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        let slurm = wattson_slurm::slurm_version();
        assert!(
            out.status.success() && said.contains(&format!("built for Slurm {slurm}")),
            "{}: {said}",
            program.display()
        );
    }
}

/// The plugins' file names as Slurm loads them.
fn common_plugin_names() -> [&'static str; 3] {
    ["spank_wattson.so", "job_submit_wattson.so", "acct_gather_energy_wattson.so"]
}
