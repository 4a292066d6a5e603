//! The reference says what the reader does: its defaults are the defaults, its ranges are the
//! ranges the reader enforces, and the example file names every key.

use std::time::Duration;

use super::{Key, tables};
use crate::Config;

/// Keys whose reader also checks them against another key: a value in range may still be
/// refused for that reason, which the error names.
const CROSS_CHECKED: &[(&str, &str)] =
    &[("engine.probe_settle", "must be shorter"), ("engine.probe_window", "must be shorter")];

fn parse_one(table: &str, key: &str, value: &str) -> Result<Config, String> {
    Config::parse(&format!("[{table}]\n{key} = {value}\n"), "t.toml").map_err(|e| e.0)
}

/// The bounds of an `A to B` range, as TOML values just inside and just outside it.
fn probes(key: &Key, allowed: &str) -> Option<([String; 2], Vec<String>)> {
    let (low, high) = allowed.split_once(" to ")?;
    if key.kind.starts_with("duration") {
        let parse =
            |s: &str| humantime::parse_duration(s).unwrap_or_else(|e| panic!("{}: {s}: {e}", key.name));
        let (lo, hi) = (parse(low), parse(high));
        let text = |d: Duration| format!("\"{}ms\"", d.as_millis());
        let mut outside = vec![text(hi + Duration::from_secs(1))];
        if lo > Duration::ZERO {
            outside.push(text(lo - Duration::from_millis(1)));
        }
        return Some(([text(lo), text(hi)], outside));
    }
    let lo: f64 = low.parse().ok()?;
    let hi: f64 = high.parse().ok()?;
    let (below, above) = if key.kind == "integer" {
        ((lo - 1.0).to_string(), (hi + 1.0).to_string())
    } else {
        (format!("{:?}", lo - 1e-3 * lo.abs().max(1.0)), format!("{:?}", hi + 1e-3 * hi.abs().max(1.0)))
    };
    let number = |x: f64| if key.kind == "integer" { format!("{x}") } else { format!("{x:?}") };
    Some(([number(lo), number(hi)], vec![below, above]))
}

#[test]
fn every_range_shown_is_the_range_the_reader_enforces() {
    let mut probed = 0;
    for table in tables().iter().filter(|t| !t.array) {
        for key in &table.keys {
            let Some(allowed) = &key.allowed else { continue };
            let Some((inside, outside)) = probes(key, allowed) else { continue };
            let path = format!("{}.{}", table.name, key.name);
            let cross = CROSS_CHECKED.iter().find(|(k, _)| *k == path).map(|(_, why)| *why);
            for value in &inside {
                match (parse_one(&table.name, &key.name, value), cross) {
                    (Ok(_), _) => {}
                    (Err(e), Some(why)) if e.contains(why) => {}
                    (Err(e), _) => panic!("{path} = {value} is within {allowed:?} yet refused: {e}"),
                }
            }
            for value in &outside {
                assert!(
                    parse_one(&table.name, &key.name, value).is_err(),
                    "{path} = {value} is outside {allowed:?} yet accepted"
                );
            }
            probed += 1;
        }
    }
    assert!(probed >= 30, "only {probed} ranges probed");
}

#[test]
fn every_default_shown_is_the_default_the_reader_gives() {
    let mut text = String::new();
    let mut shown = 0;
    for table in tables().iter().filter(|t| !t.array) {
        text.push_str(&format!("[{}]\n", table.name));
        for key in &table.keys {
            if let Some(default) = &key.default {
                text.push_str(&format!("{} = {default}\n", key.name));
                shown += 1;
            }
        }
    }
    let parsed = Config::parse(&text, "defaults.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(format!("{parsed:?}"), format!("{:?}", Config::default()), "{text}");
    assert!(shown >= 50, "only {shown} defaults shown");
}

#[test]
fn the_example_file_names_every_key_in_its_table() {
    let example = include_str!("../../../../etc/wattson.toml");
    let mut current = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for line in example.lines() {
        let line = line.trim_start_matches('#').trim();
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")) {
            current = name.to_string();
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            // A sub-table of free names (`[engine.knobs]`) names its key of the parent.
            seen.insert(name.to_string());
            current = name.to_string();
        } else if let Some((key, _)) = line.split_once(" = ") {
            seen.insert(format!("{current}.{key}"));
        }
    }
    let missing: Vec<String> = tables()
        .iter()
        .flat_map(|t| t.keys.iter().map(move |k| format!("{}.{}", t.name, k.name)))
        .filter(|path| !seen.contains(path))
        .collect();
    assert!(missing.is_empty(), "etc/wattson.toml does not name {missing:?}");
}

#[test]
fn tables_keys_and_choices_come_from_the_definitions() {
    let all = tables();
    let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
    for expected in
        ["daemon", "gpu", "metrics", "policy", "engine", "ctld", "ctld.node", "power", "power.group", "link"]
    {
        assert!(names.contains(&expected), "no [{expected}] in {names:?}");
    }
    let engine = all.iter().find(|t| t.name == "engine").unwrap();
    let knob = engine.keys.iter().find(|k| k.name == "knob").unwrap();
    let choices: Vec<&str> = knob.choices.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(choices, ["power-limit", "sm-clock"]);
    let daemon = all.iter().find(|t| t.name == "daemon").unwrap();
    let sample = daemon.keys.iter().find(|k| k.name == "sample_interval").unwrap();
    assert_eq!((sample.default.as_deref(), sample.allowed.as_deref()), (Some("\"1s\""), Some("100ms to 1h")));
    let group = all.iter().find(|t| t.name == "power.group").unwrap();
    assert!(group.array && group.keys.iter().any(|k| k.name == "nodes" && k.required));
}
