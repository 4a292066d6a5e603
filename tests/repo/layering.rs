//! The workspace's layering, read from `cargo metadata`: what each crate may (not) link.
//! The Slurm plugins are loaded into slurmctld, slurmd and slurmstepd, so they carry no async
//! runtime, database or GPU library; the engine and the shared types are pure (no I/O, no
//! async, no OS bindings); only `wattson-gpu` talks to NVML.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::process::Command;

use serde_json::Value;

/// What the controller, the link and the programs Slurm runs must not link.
const NOT_IN_CTLD: [&str; 7] =
    ["tokio", "rusqlite", "libsqlite3-sys", "nvml-wrapper", "wattson-rocm-smi-sys", "axum", "hyper"];
/// What the plugins and their logic must not link: that, and libmunge (Slurm authenticates).
const NOT_IN_PLUGINS: [&str; 8] = [
    "tokio",
    "rusqlite",
    "libsqlite3-sys",
    "nvml-wrapper",
    "wattson-rocm-smi-sys",
    "axum",
    "hyper",
    "munge-sys",
];
const PLUGIN_CRATES: [&str; 6] = [
    "spank-wattson",
    "job-submit-wattson",
    "acct-gather-energy-wattson",
    "wattson-slurm",
    "wattson-slurm-sys",
    "wattson-slurm-ffi",
];

/// What the pure crates must not link: I/O, async, OS bindings.
const NOT_IN_PURE: [&str; 12] = [
    "tokio",
    "mio",
    "rusqlite",
    "libsqlite3-sys",
    "nvml-wrapper",
    "wattson-rocm-smi-sys",
    "libloading",
    "axum",
    "hyper",
    "nix",
    "libc",
    "socket2",
];
const PURE_CRATES: [&str; 3] = ["wattson-engine", "wattson-types", "wattson-chart"];

/// The resolved graph for this host: package names, workspace members, and each package's
/// dependencies with the kinds (`normal`, `dev`, `build`) they are used as.
struct Graph {
    names: BTreeMap<String, String>,
    members: BTreeMap<String, String>,
    deps: BTreeMap<String, Vec<(String, BTreeSet<&'static str>)>>,
}

fn host_triple(cargo: &str) -> String {
    let out = Command::new(cargo).arg("-vV").output().expect("cargo -vV");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().find_map(|l| l.strip_prefix("host: ")).expect("cargo -vV names the host").to_string()
}

fn graph() -> Graph {
    let cargo = env!("CARGO");
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    // Only this host's dependencies: the others are neither built nor (maybe) downloaded.
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path", manifest, "--filter-platform"])
        .arg(host_triple(cargo))
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let text = |v: &Value| v.as_str().expect("a string").to_string();
    let names: BTreeMap<String, String> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (text(&p["id"]), text(&p["name"])))
        .collect();
    let members = meta["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .map(|id| (names[&text(id)].clone(), text(id)))
        .collect();
    let mut deps = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().expect("resolve.nodes") {
        let edges = node["deps"]
            .as_array()
            .expect("deps")
            .iter()
            .map(|d| {
                let kinds = d["dep_kinds"]
                    .as_array()
                    .expect("dep_kinds")
                    .iter()
                    .map(|k| match k["kind"].as_str() {
                        None => "normal",
                        Some("dev") => "dev",
                        Some(_) => "build",
                    })
                    .collect();
                (text(&d["pkg"]), kinds)
            })
            .collect();
        deps.insert(text(&node["id"]), edges);
    }
    Graph { names, members, deps }
}

impl Graph {
    fn id(&self, member: &str) -> &str {
        self.members.get(member).unwrap_or_else(|| panic!("{member} is not a workspace member"))
    }

    /// Every package `member` links (normal dependencies, transitively), each with the
    /// chain of packages that brings it in.
    fn normal_closure(&self, member: &str) -> BTreeMap<String, Vec<String>> {
        let root = self.id(member).to_string();
        let mut via: BTreeMap<String, Option<String>> = BTreeMap::from([(root.clone(), None)]);
        let mut queue = VecDeque::from([root]);
        while let Some(id) = queue.pop_front() {
            for (dep, kinds) in &self.deps[&id] {
                if kinds.contains("normal") && !via.contains_key(dep) {
                    via.insert(dep.clone(), Some(id.clone()));
                    queue.push_back(dep.clone());
                }
            }
        }
        via.keys()
            .map(|id| {
                let mut path = vec![self.names[id].clone()];
                let mut at = id;
                while let Some(Some(parent)) = via.get(at) {
                    path.push(self.names[parent].clone());
                    at = parent;
                }
                path.reverse();
                (self.names[id].clone(), path)
            })
            .collect()
    }

    /// The members that depend on `name` directly, with the kinds of dependency.
    fn direct_dependents(&self, name: &str) -> Vec<(String, BTreeSet<&'static str>)> {
        self.members
            .iter()
            .flat_map(|(member, id)| {
                self.deps[id]
                    .iter()
                    .filter(|(dep, _)| self.names[dep] == name)
                    .map(move |(_, kinds)| (member.clone(), kinds.clone()))
            })
            .collect()
    }
}

/// The forbidden crates in each member's closure, as `member: a -> b -> forbidden` lines.
fn violations(g: &Graph, members: &[&str], forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for member in members {
        let closure = g.normal_closure(member);
        for bad in forbidden {
            if let Some(path) = closure.get(*bad) {
                found.push(format!("{member} links {bad}: {}", path.join(" -> ")));
            }
        }
    }
    found
}

#[test]
fn each_crate_links_only_what_its_layer_allows() {
    let g = graph();
    for member in g.members.keys() {
        println!(
            "{member}: {} packages in its normal dependency closure",
            g.normal_closure(member).len() - 1
        );
    }
    let plugins = violations(&g, &PLUGIN_CRATES, &NOT_IN_PLUGINS);
    assert!(plugins.is_empty(), "the Slurm plugins must stay small and synchronous:\n{}", plugins.join("\n"));
    // The controller, its link to the nodes and the programs Slurm runs for it: plain
    // blocking processes, no GPU, no database, no async runtime.
    let ctld = violations(&g, &["wattson-ctld", "wattson-link", "wattson-sacct"], &NOT_IN_CTLD);
    assert!(ctld.is_empty(), "wattson-ctld must stay a plain synchronous program:\n{}", ctld.join("\n"));
    let pure = violations(&g, &PURE_CRATES, &NOT_IN_PURE);
    assert!(pure.is_empty(), "the engine and the types must do no I/O:\n{}", pure.join("\n"));
}

/// Each role's programs and what they must not link: another role's code. The user's command
/// reads reports (no simulator, controller or daemon in it); the node daemon links no
/// simulator, controller or report code; the controller no daemon, store or simulator; the
/// daemon's wire types no site configuration.
const ROLES: [(&str, &[&str]); 6] = [
    (
        "wattson",
        &["wattson-sim", "wattson-ctld", "wattson-daemon", "wattson-link", "wattson-gpu", "wattson-docs"],
    ),
    (
        "wattson-daemon",
        &["wattson-sim", "wattson-ctld", "wattson-sacct", "wattson-chart", "wattson", "wattson-docs"],
    ),
    (
        "wattson-ctld",
        &["wattson-sim", "wattson-daemon", "wattson-store", "wattson-gpu", "wattson-chart", "wattson"],
    ),
    (
        "wattson-sim",
        &["wattson-ctld", "wattson-daemon", "wattson-store", "wattson-config", "wattson-sacct", "wattson"],
    ),
    ("wattson-protocol", &["wattson-config"]),
    ("wattson-sacct", &["wattson-config", "wattson-protocol", "wattson-engine"]),
];

/// The only members that may read the site configuration (`wattson-config`): the programs
/// (the command, the daemon, the controller) and the plugins Slurm loads, with their logic; and
/// the man-page generator, which writes `wattson.toml(5)` from its definitions.
const CONFIG_READERS: [&str; 8] = [
    "wattson-docs",
    "wattson",
    "wattson-daemon",
    "wattson-ctld",
    "wattson-slurm",
    "spank-wattson",
    "job-submit-wattson",
    "acct-gather-energy-wattson",
];

#[test]
fn no_role_links_another_roles_code() {
    let g = graph();
    let mut found = Vec::new();
    for (member, forbidden) in ROLES {
        found.extend(violations(&g, &[member], forbidden));
    }
    assert!(found.is_empty(), "a role links another role's code:\n{}", found.join("\n"));
}

#[test]
fn only_the_programs_and_plugins_read_the_configuration() {
    let g = graph();
    let readers: Vec<String> = g
        .direct_dependents("wattson-config")
        .into_iter()
        .filter(|(member, kinds)| kinds.contains("normal") && !CONFIG_READERS.contains(&member.as_str()))
        .map(|(member, _)| member)
        .collect();
    assert!(readers.is_empty(), "only programs and plugins may depend on wattson-config: {readers:?}");
}

#[test]
fn only_the_gpu_crate_depends_on_nvml_wrapper() {
    let g = graph();
    let dependents = g.direct_dependents("nvml-wrapper");
    assert!(
        dependents.iter().any(|(m, kinds)| m == "wattson-gpu" && kinds.contains("normal")),
        "wattson-gpu no longer depends on nvml-wrapper: update this test ({dependents:?})"
    );
    // fake-nvml's own tests drive the simulated library through the real wrapper.
    let others: Vec<String> = dependents
        .iter()
        .filter(|(m, kinds)| m != "wattson-gpu" && !(m == "fake-nvml" && kinds.iter().all(|k| *k == "dev")))
        .map(|(m, kinds)| format!("{m} ({})", kinds.iter().copied().collect::<Vec<_>>().join(", ")))
        .collect();
    assert!(others.is_empty(), "only wattson-gpu may depend on nvml-wrapper directly: {}", others.join("; "));
}

/// ROCm SMI's bindings are the AMD backend's (wattson-gpu) and its fake library's alone.
#[test]
fn only_the_gpu_crate_and_the_fake_load_rocm_smi() {
    let g = graph();
    let dependents = g.direct_dependents("wattson-rocm-smi-sys");
    assert!(
        dependents.iter().any(|(m, kinds)| m == "wattson-gpu" && kinds.contains("normal")),
        "wattson-gpu no longer depends on wattson-rocm-smi-sys: update this test ({dependents:?})"
    );
    let others: Vec<&str> = dependents
        .iter()
        .filter(|(m, kinds)| m != "wattson-gpu" && m != "fake-amdsmi" && !kinds.iter().all(|k| *k == "dev"))
        .map(|(m, _)| m.as_str())
        .collect();
    assert!(others.is_empty(), "only wattson-gpu may load ROCm SMI: {others:?}");
}

/// The programs need no Slurm bindings (nor bindgen and libclang to build them): they read
/// the Slurm release as text (crates/program/build.rs). Only the Slurm glue links them.
#[test]
fn only_the_slurm_glue_links_slurms_bindings() {
    let g = graph();
    let outside: Vec<String> = g
        .direct_dependents("wattson-slurm-sys")
        .into_iter()
        .filter(|(member, kinds)| {
            !kinds.iter().all(|k| *k == "dev") && !PLUGIN_CRATES.contains(&member.as_str())
        })
        .map(|(member, _)| member)
        .collect();
    assert!(outside.is_empty(), "only the Slurm glue may depend on wattson-slurm-sys: {outside:?}");
    let programs = violations(&g, &PROGRAMS, &["wattson-slurm-sys", "wattson-slurm", "wattson-slurm-ffi"]);
    assert!(programs.is_empty(), "a program links Slurm's bindings:\n{}", programs.join("\n"));
}

/// The packages of wattson's programs: the command, the daemon, the controller, the simulator.
pub const PROGRAMS: [&str; 4] = ["wattson", "wattson-daemon", "wattson-ctld", "wattson-sim"];
