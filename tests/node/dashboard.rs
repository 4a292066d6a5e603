//! The Grafana dashboard in `etc/grafana/wattson.json` queries only what wattson exports: every
//! metric a query names is one a running wattsond serves on `/metrics` or one `wattson ctld`
//! writes to its metrics file; and the example metrics port stays off dcgm-exporter's.

use wattson_harness::node as common;

use std::collections::BTreeSet;

use common::{Node, http_get};

/// PromQL's functions, aggregations and keywords: the identifiers in a query that are not
/// metric names.
const PROMQL: &[&str] = &[
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "topk",
    "bottomk",
    "stddev",
    "stdvar",
    "quantile",
    "group",
    "count_values",
    "rate",
    "irate",
    "increase",
    "delta",
    "idelta",
    "deriv",
    "avg_over_time",
    "max_over_time",
    "min_over_time",
    "sum_over_time",
    "count_over_time",
    "last_over_time",
    "abs",
    "ceil",
    "floor",
    "round",
    "clamp",
    "clamp_min",
    "clamp_max",
    "histogram_quantile",
    "label_replace",
    "label_join",
    "time",
    "timestamp",
    "vector",
    "scalar",
    "sort",
    "sort_desc",
    "absent",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
];

fn dashboard() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/etc/grafana/wattson.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("the dashboard is JSON")
}

/// Every `expr` (panel queries) and templating `query` string in the dashboard.
fn queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map {
                match (k.as_str(), child) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => queries(child, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|c| queries(c, out)),
        _ => {}
    }
}

/// The metric names a PromQL query names: its identifiers outside label matchers `{...}`,
/// ranges `[...]`, strings and `by (...)` lists, less PromQL's own words.
fn metric_names(query: &str) -> BTreeSet<String> {
    // label_values(metric, label): the metric only.
    if let Some(args) = query.strip_prefix("label_values(") {
        return args.split(',').next().map(|m| m.trim().to_string()).into_iter().collect();
    }
    let mut plain = String::new();
    let (mut depth_brace, mut depth_bracket, mut in_string) = (0, 0, false);
    for c in query.chars() {
        match c {
            '"' => in_string = !in_string,
            _ if in_string => {}
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            _ => plain.push(c),
        }
        if matches!(c, '{' | '[' | '"') {
            plain.push(' ');
        }
    }
    // `by (a, b)` / `without (...)` name labels, not metrics.
    let mut words = Vec::new();
    let mut skip_group = false;
    for token in
        plain.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '(' || c == ')'))
    {
        for part in token.split_inclusive(['(', ')']) {
            let word = part.trim_end_matches(['(', ')']);
            if skip_group {
                if part.ends_with(')') {
                    skip_group = false;
                }
                continue;
            }
            if matches!(word, "by" | "without") {
                skip_group = true;
                continue;
            }
            if !word.is_empty() {
                words.push(word.to_string());
            }
        }
    }
    words
        .into_iter()
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
        .filter(|w| !PROMQL.contains(&w.as_str()))
        .collect()
}

/// The series names in Prometheus text (`# TYPE name kind`, counters with `_total`).
fn exported(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else { continue };
            match kind {
                "counter" => out.insert(format!("{name}_total")),
                _ => out.insert(name.to_string()),
            };
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            out.insert(line.split(['{', ' ']).next().unwrap_or_default().to_string());
        }
    }
    out
}

#[test]
fn the_query_parser_finds_metrics_and_only_metrics() {
    let names =
        metric_names(r#"sum by (node, gpu) (rate(wattson_a_total{node=~"$node",x="by (y)"}[5m])) / 3600"#);
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["wattson_a_total"]);
    let names = metric_names("topk(10, wattson_b) or max(wattson_c)");
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["wattson_b", "wattson_c"]);
    assert_eq!(metric_names("label_values(wattson_d, node)").into_iter().collect::<Vec<_>>(), ["wattson_d"]);
}

#[test]
fn every_dashboard_query_names_a_metric_wattson_exports() {
    // What a running wattsond serves, per-job series included.
    let mut node = Node::h100(2);
    let port = node.serve_metrics("jobs = true");
    node.start();
    node.begin("77", 1000, "0");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let page = http_get(port, "/metrics");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let body = page.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let mut known = exported(body);
    assert!(known.contains("wattson_job_gpu_energy_joules"), "{known:?}");
    // What wattson ctld writes for node_exporter's textfile collector, after a failed loop
    // over one idle node and one decision (labelled families appear once they have a value).
    let ctld = wattson_ctld::metrics::Metrics::default();
    let nodes = wattson_ctld::slurm::parse_nodes("NodeName=n1 Gres=gpu:4 State=IDLE").unwrap();
    ctld.looped(None, &nodes, 0.2);
    ctld.decided(wattson_ctld::metrics::Action::Weight, 1);
    known.extend(exported(&ctld.encode()));
    assert!(known.contains("wattson_ctld_decisions_total"), "{known:?}");

    let mut all = Vec::new();
    queries(&dashboard(), &mut all);
    assert!(all.len() >= 10, "{all:?}");
    let mut used = BTreeSet::new();
    for q in &all {
        let names = metric_names(q);
        assert!(!names.is_empty(), "query names no metric: {q}");
        for name in names {
            assert!(known.contains(&name), "{q}: {name} is not exported (wattson exports {known:?})");
            used.insert(name);
        }
    }
    // The dashboard shows both sides.
    assert!(used.iter().any(|n| n.starts_with("wattson_gpu_")), "{used:?}");
    assert!(used.iter().any(|n| n.starts_with("wattson_ctld_")), "{used:?}");
    node.end("77");
}

#[test]
fn the_metrics_example_stays_off_dcgm_exporters_port() {
    let example = include_str!("../../etc/wattson.toml");
    let listen = example.lines().find(|l| l.trim_start_matches("# ").starts_with("listen = \"127.0.0.1:"));
    let listen = listen.expect("an example [metrics] listen line");
    assert!(!listen.contains(":9400"), "{listen}: dcgm-exporter's default port");
}
