//! `wattson.toml(5)`: every table and key of the configuration file, written from the
//! configuration's own definitions ([`wattson_config::reference`]).

use roff::{Roff, bold, italic, roman};
use wattson_config::reference::{Key, Table};

/// The page, in roff.
pub fn render() -> String {
    let mut page = Roff::new();
    let version = format!("wattson {}", env!("CARGO_PKG_VERSION"));
    page.control("TH", ["WATTSON.TOML", "5", "", version.as_str(), "File Formats"]);
    page.control("SH", ["NAME"]);
    page.text([roman(
        "wattson.toml - configuration of wattsond, wattson ctld, the power programs and the Slurm plugins",
    )]);

    page.control("SH", ["SYNOPSIS"]);
    page.text([bold(wattson_config::DEFAULT_PATH)]);

    page.control("SH", ["DESCRIPTION"]);
    page.text([
        roman(
            "A TOML file. Every key is optional and has the default shown here. An unknown key or a \
         value outside what is allowed is an error that names the file and line, and the daemon \
         refuses to start on it rather than guess; ",
        ),
        bold("wattsond --check-config"),
        roman(" checks a file without starting anything."),
    ]);
    page.control("PP", []);
    page.text([roman(
        "Without -c or $WATTSON_CONFIG, the first of these files that exists is read, else the \
         defaults apply:",
    )]);
    for place in wattson_config::locate::candidates(Some(std::ffi::OsStr::new("DIR/slurm.conf"))) {
        page.control("IP", ["\\(bu", "2"]);
        page.text([roman(place.display().to_string())]);
    }
    page.control("PP", []);
    page.text([roman(
        "where DIR is the directory of the slurm.conf that $SLURM_CONF names (as Slurm finds its \
         own files). Durations are written as text with a unit: \"500ms\", \"10s\", \
         \"5m\", \"1h\", \"1d\".",
    )]);

    page.control("SH", ["TABLES"]);
    for table in wattson_config::reference::tables() {
        table_section(&mut page, &table);
    }

    page.control("SH", ["SEE ALSO"]);
    page.text([
        bold("wattsond"),
        roman("(8), "),
        bold("wattson"),
        roman("(1), "),
        bold("wattson-ctld"),
        roman("(1), "),
        bold("wattson-slurm"),
        roman("(8), "),
        bold("slurm.conf"),
        roman("(5)"),
    ]);
    page.render()
}

fn table_section(page: &mut Roff, table: &Table) {
    let heading = if table.array { format!("[[{}]]", table.name) } else { format!("[{}]", table.name) };
    page.control("SS", [heading.as_str()]);
    let doc = strip_marks(&table.doc);
    let doc = doc.strip_prefix(&format!("{heading}:")).unwrap_or(&doc).trim_start();
    page.text([roman(doc)]);
    for key in &table.keys {
        key_entry(page, key);
    }
}

fn key_entry(page: &mut Roff, key: &Key) {
    page.control("TP", []);
    let mut head = vec![bold(key.name.as_str())];
    if let Some(default) = &key.default {
        head.push(roman(format!(" = {default}")));
    }
    page.text(head);
    page.text([roman(strip_marks(&key.doc))]);
    page.control("br", []);
    let mut facts = vec![italic("Value:"), roman(format!(" {}", key.kind))];
    if let Some(allowed) = &key.allowed {
        facts.push(roman(format!("; allowed: {allowed}")));
    }
    if key.required {
        facts.push(roman("; required"));
    } else if key.default.is_none() {
        facts.push(roman("; unset by default"));
    }
    facts.push(roman("."));
    page.text(facts);
    if !key.choices.is_empty() {
        page.control("RS", []);
        for (choice, doc) in &key.choices {
            page.control("IP", [format!("\"{choice}\"").as_str(), "4"]);
            page.text([roman(strip_marks(doc))]);
        }
        page.control("RE", []);
    }
}

/// A doc comment without Markdown's code marks and the brackets of its links (`[`x`]`).
fn strip_marks(text: &str) -> String {
    text.replace("[`", "`").replace("`]", "`").replace('`', "")
}
