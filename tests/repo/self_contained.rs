//! The repository carries what it reads: no tracked file names a path in the folder beside the
//! checkout, the shipped simulator files name data inside the repository, and every data set
//! under `data/` has its licence beside it.

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn tracked_files() -> Vec<PathBuf> {
    let out = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(ROOT)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git ls-files: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| Path::new(ROOT).join(String::from_utf8_lossy(p).as_ref()))
        .collect()
}

#[test]
fn no_file_reads_the_folder_beside_the_checkout() {
    // Written in two pieces so that this file does not name it either.
    let beside = format!("../{}", "shared/");
    let mut offenders = Vec::new();
    for file in tracked_files() {
        let Ok(text) = std::fs::read_to_string(&file) else { continue }; // binary or deleted
        for (n, line) in text.lines().enumerate() {
            if line.contains(&beside) {
                offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(offenders.is_empty(), "paths outside the repository:\n{}", offenders.join("\n"));
}

#[test]
fn the_shipped_simulator_files_name_data_inside_the_repository() {
    let root = Path::new(ROOT).canonicalize().unwrap();
    let mut named = 0;
    for cluster in ["etc/sim/cluster.toml", "etc/sim/cluster-hetero.toml"] {
        let path = root.join(cluster);
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else { continue };
            if !matches!(key.trim(), "zeus_csv" | "colocation_json") {
                continue;
            }
            let rel = value.split('"').nth(1).unwrap_or_else(|| panic!("{cluster}: {line}"));
            let file = path
                .parent()
                .unwrap()
                .join(rel)
                .canonicalize()
                .unwrap_or_else(|e| panic!("{cluster}: {rel}: {e}"));
            assert!(file.starts_with(root.join("data")), "{cluster} names {} outside data/", file.display());
            named += 1;
        }
    }
    assert!(named >= 4, "the shipped files name the Zeus curves and the Gavel pairs ({named} found)");
}

#[test]
fn every_data_set_has_its_licence() {
    let data = Path::new(ROOT).join("data");
    let mut sets = 0;
    for kind in std::fs::read_dir(&data).unwrap().flatten().filter(|e| e.path().is_dir()) {
        for set in std::fs::read_dir(kind.path()).unwrap().flatten() {
            let licence = set.path().join("LICENSE");
            let text =
                std::fs::read_to_string(&licence).unwrap_or_else(|e| panic!("{}: {e}", licence.display()));
            assert!(text.contains("MIT License") || text.contains("Apache License"), "{}", licence.display());
            sets += 1;
        }
    }
    assert_eq!(sets, 3, "traces, DVFS curves and co-location pairs");
    let readme = std::fs::read_to_string(data.join("README.md")).unwrap();
    for folder in ["traces/itp-elasticflow/", "dvfs/zeus-power-limit/", "colocation/gavel/"] {
        assert!(readme.contains(folder), "data/README.md cites {folder}");
    }
}
