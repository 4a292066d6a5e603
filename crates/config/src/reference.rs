//! Every table and key of `wattson.toml` with its meaning, default and allowed values, read off
//! the configuration's own definitions (the types, their doc comments, their defaults and the
//! ranges their readers enforce) through their JSON schema: `wattson.toml(5)` is written from it.

use serde_json::{Map, Value};

use crate::Config;

/// One `[table]` of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Its dotted name (`daemon`, `ctld.node`, `power.group` for `[[power.group]]`).
    pub name: String,
    /// An array of tables (`[[power.group]]`), not one table.
    pub array: bool,
    /// What it is for.
    pub doc: String,
    /// Its keys, in the order of the definitions.
    pub keys: Vec<Key>,
}

/// One key of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// Its name within the table.
    pub name: String,
    /// What it means.
    pub doc: String,
    /// Its kind of value (`duration`, `number`, `one of a, b`, `list of strings`...).
    pub kind: String,
    /// Its default as TOML would write it; `None` when unset by default or required.
    pub default: Option<String>,
    /// The table cannot go without it.
    pub required: bool,
    /// The values allowed beyond the kind (`100ms to 1h`), where the reader bounds them.
    pub allowed: Option<String>,
    /// The choices of a `one of` key, each with what it means.
    pub choices: Vec<(String, String)>,
}

/// The tables of `wattson.toml`, in the order of [`Config`]'s definition, each followed by its
/// sub-tables.
pub fn tables() -> Vec<Table> {
    let schema = serde_json::to_value(schemars::schema_for!(Config)).expect("a schema is JSON");
    let defs = schema.get("$defs").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for (name, field) in properties(&schema) {
        let doc = describe(field);
        if let Some(def) = reference(field, &defs) {
            walk(&name, false, &doc, def, &defs, &mut out);
        }
    }
    out
}

/// Adds the table `name` described by `def`, then its sub-tables.
fn walk(name: &str, array: bool, doc: &str, def: &Value, defs: &Map<String, Value>, out: &mut Vec<Table>) {
    let mut keys = Vec::new();
    let mut subtables = Vec::new();
    for (key, field) in properties(def) {
        let item = field.get("items").and_then(|i| reference(i, defs)).filter(|d| is_table(d));
        match (reference(field, defs).filter(|d| is_table(d)), item) {
            (Some(sub), _) => subtables.push((format!("{name}.{key}"), false, describe(field), sub)),
            (None, Some(sub)) => subtables.push((format!("{name}.{key}"), true, describe(field), sub)),
            (None, None) => {
                let required = def
                    .get("required")
                    .and_then(Value::as_array)
                    .is_some_and(|r| r.contains(&Value::from(key.as_str())));
                keys.push(Key { required, ..key_of(&key, field, defs) })
            }
        }
    }
    out.push(Table { name: name.to_string(), array, doc: doc.to_string(), keys });
    for (sub, array, doc, def) in subtables {
        walk(&sub, array, &doc, def, defs, out);
    }
}

fn key_of(name: &str, field: &Value, defs: &Map<String, Value>) -> Key {
    let choices: Vec<(String, String)> = reference(field, defs)
        .and_then(|d| d.get("oneOf"))
        .and_then(Value::as_array)
        .map(|variants| {
            variants
                .iter()
                .filter_map(|v| Some((v.get("const")?.as_str()?.to_string(), describe(v))))
                .collect()
        })
        .unwrap_or_default();
    let default = field.get("default").and_then(toml_value);
    let duration = field.get("default").is_some_and(is_duration)
        || field
            .get("x-allowed")
            .and_then(Value::as_str)
            .is_some_and(|a| a.ends_with(|c: char| c.is_alphabetic()));
    let kind = if !choices.is_empty() {
        let names: Vec<_> = choices.iter().map(|(name, _)| name.as_str()).collect();
        format!("one of {}", names.join(", "))
    } else if duration {
        "duration (e.g. \"500ms\", \"10s\", \"5m\")".to_string()
    } else {
        kind_of(field)
    };
    Key {
        name: name.to_string(),
        doc: describe(field),
        kind,
        default,
        required: false,
        allowed: field.get("x-allowed").and_then(Value::as_str).map(str::to_string),
        choices,
    }
}

/// The kind of a plain value, from its JSON schema type.
fn kind_of(field: &Value) -> String {
    let types: Vec<&str> = match field.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
        _ => Vec::new(),
    };
    match types.first().copied() {
        Some("array") => match field.get("items").map(kind_of).as_deref() {
            Some(item) => format!("list of {item}s"),
            None => "list".to_string(),
        },
        Some("object") => match field.get("additionalProperties").map(kind_of) {
            Some(value) => format!("table of name = {value}"),
            None => "table".to_string(),
        },
        Some("integer") => "integer".to_string(),
        Some(other) => other.to_string(),
        None => "value".to_string(),
    }
}

fn is_duration(value: &Value) -> bool {
    value.as_object().is_some_and(|o| o.len() == 2 && o.contains_key("secs") && o.contains_key("nanos"))
}

/// `value` as TOML writes it (a duration as its text); `None` for null (unset).
fn toml_value(value: &Value) -> Option<String> {
    if is_duration(value) {
        let secs = value["secs"].as_u64()?;
        let nanos = value["nanos"].as_u64()?;
        let d = std::time::Duration::new(secs, nanos as u32);
        return Some(format!("\"{}\"", humantime::format_duration(d)));
    }
    match value {
        Value::Null => None,
        Value::String(s) => Some(format!("{s:?}")),
        Value::Array(items) => {
            let items: Option<Vec<String>> = items.iter().map(toml_value).collect();
            Some(format!("[{}]", items?.join(", ")))
        }
        Value::Object(o) if o.is_empty() => Some("{}".to_string()),
        Value::Object(_) => None,
        other => Some(other.to_string()),
    }
}

fn properties(schema: &Value) -> Vec<(String, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v)).collect())
        .unwrap_or_default()
}

/// The definition a field refers to (`"$ref": "#/$defs/X"`), if any.
fn reference<'a>(field: &Value, defs: &'a Map<String, Value>) -> Option<&'a Value> {
    let name = field.get("$ref")?.as_str()?.strip_prefix("#/$defs/")?;
    defs.get(name)
}

fn is_table(def: &Value) -> bool {
    def.get("type").and_then(Value::as_str) == Some("object") && def.get("properties").is_some()
}

/// A doc comment as one paragraph.
fn describe(field: &Value) -> String {
    let text = field.get("description").and_then(Value::as_str).unwrap_or_default();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
