//! No two modules of a crate import each other, directly or in a loop: each crate's top-level
//! modules (`src/x.rs`, `src/x/`) form a graph by the `crate::x` paths in their code (doc
//! comments and test code left out: what follows a file's first `#[cfg(test)]`, `tests.rs`
//! files and `tests/` folders), and the graph has no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, recursively (none if it is not a directory).
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return files };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// A file's code: before its first `#[cfg(test)]`, without `//` comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The modules `code` names as `crate::x` (also inside `use crate::{x, y}`).
fn named(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let list = match rest.strip_prefix('{') {
            Some(group) => group.split('}').next().unwrap_or(""),
            None => rest,
        };
        let words = list.split(|c: char| !(c.is_alphanumeric() || c == '_'));
        let mut words = words.filter(|w| !w.is_empty());
        let firsts: Vec<&str> =
            if rest.starts_with('{') { words.collect() } else { words.next().into_iter().collect() };
        out.extend(firsts.into_iter().filter(|w| modules.contains(*w)).map(str::to_string));
    }
    out
}

/// A cycle in `edges`, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|m| m == at) {
            return Some([&path[i..], &[at.to_string()]].concat());
        }
        if !done.insert(at.to_string()) {
            return None;
        }
        path.push(at.to_string());
        let found = edges[at].iter().find_map(|next| visit(next, edges, path, done));
        path.pop();
        found
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|m| visit(m, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources: Vec<PathBuf> = vec![root.join("src"), root.join("tests/harness/src")];
    for group in ["crates", "slurm-glue"] {
        for entry in std::fs::read_dir(root.join(group)).unwrap().flatten() {
            sources.push(entry.path().join("src"));
        }
    }
    let mut checked = 0;
    for src in sources.iter().filter(|s| s.is_dir()) {
        let modules: BTreeSet<String> = std::fs::read_dir(src)
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let module = if e.path().is_dir() { name } else { name.strip_suffix(".rs")?.to_string() };
                (!["lib", "main", "bin", "tests"].contains(&module.as_str())).then_some(module)
            })
            .collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for module in &modules {
            let mut files = rust_files(&src.join(module));
            files.push(src.join(format!("{module}.rs")));
            let uses = edges.entry(module.clone()).or_default();
            // Test code: `tests.rs` files and files in a `tests/` folder of the module.
            let test_code = |f: &Path| {
                f.ends_with("tests.rs")
                    || f.strip_prefix(src).is_ok_and(|rel| rel.components().any(|c| c.as_os_str() == "tests"))
            };
            for file in files.iter().filter(|f| f.is_file() && !test_code(f)) {
                uses.extend(
                    named(&code(&std::fs::read_to_string(file).unwrap()), &modules)
                        .into_iter()
                        .filter(|m| m != module),
                );
            }
        }
        checked += modules.len();
        assert_eq!(cycle(&edges), None, "modules of {} that import each other", src.display());
    }
    assert!(checked > 100, "only {checked} modules found");
}

#[test]
fn a_loop_of_imports_is_found() {
    let modules: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    let code = "use crate::{b, x};\nfn f() { crate::c::g(); } // crate::a\n";
    assert_eq!(named(&self::code(code), &modules), ["b", "c"].map(String::from).into());
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.insert("a".into(), ["b".to_string()].into());
    edges.insert("b".into(), ["c".to_string()].into());
    edges.insert("c".into(), BTreeSet::new());
    assert_eq!(cycle(&edges), None);
    edges.insert("c".into(), ["a".to_string()].into());
    assert_eq!(cycle(&edges), Some(["a", "b", "c", "a"].map(String::from).to_vec()));
}
