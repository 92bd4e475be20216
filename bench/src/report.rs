//! The printed tables and `summary.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// A printed table: a title, a header and rows of cells.
#[derive(Debug)]
pub(crate) struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(title: impl Into<String>, header: &[&str]) -> Self {
        Self {
            title: title.into(),
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut text = String::from("|");
            for (i, width) in widths.iter().enumerate() {
                let cell = cells.get(i).map(String::as_str).unwrap_or("");
                let pad = width - cell.chars().count();
                if i == 0 {
                    text.push_str(&format!(" {cell}{} |", " ".repeat(pad)));
                } else {
                    text.push_str(&format!(" {}{cell} |", " ".repeat(pad)));
                }
            }
            text.push('\n');
            text
        };
        let mut out = format!("\n## {}\n\n", self.title);
        out.push_str(&line(&self.header));
        let mut rule = String::from("|");
        for (i, width) in widths.iter().enumerate() {
            if i == 0 {
                rule.push_str(&format!("{}|", "-".repeat(width + 2)));
            } else {
                rule.push_str(&format!("{}:|", "-".repeat(width + 1)));
            }
        }
        out.push_str(&rule);
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }
}

/// Everything the run measured.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// The stable ratios, by name (top level of `summary.json`).
    pub(crate) ratios: BTreeMap<String, f64>,
    /// Other stable top-level values that are not one number (lists), by name.
    pub(crate) values: Map<String, Value>,
    /// Everything else, by section.
    pub(crate) details: Map<String, Value>,
    /// Behaviour problems found (a lost or duplicated effect, a lost lease, …).
    pub(crate) problems: Vec<String>,
    pub(crate) tables: Vec<Table>,
}

impl Report {
    /// Records ratio `name`. A value that is not a finite number (one side of it was not
    /// measured in this run, as 4x4 in a gate run, or its measurement failed) is left out:
    /// the ratio reads as not measured, never as a value.
    pub(crate) fn ratio(&mut self, name: &str, value: f64) {
        if value.is_finite() {
            self.ratios.insert(name.to_owned(), round(value, 3));
        }
    }

    /// A top-level value that is not one number (a list of rates).
    pub(crate) fn value(&mut self, name: &str, value: Value) {
        self.values.insert(name.to_owned(), value);
    }

    pub(crate) fn detail(&mut self, section: &str, value: Value) {
        self.details.insert(section.to_owned(), value);
    }

    pub(crate) fn table(&mut self, table: Table) {
        print!("{}", table.render());
        self.tables.push(table);
    }

    pub(crate) fn to_json(&self, mode: &str, elapsed_secs: f64) -> Value {
        let mut top = Map::new();
        top.insert("schema".into(), json!(1));
        top.insert("mode".into(), json!(mode));
        top.insert("elapsed_secs".into(), json!(round(elapsed_secs, 1)));
        for (name, value) in &self.ratios {
            top.insert(name.clone(), json!(value));
        }
        for (name, value) in &self.values {
            top.insert(name.clone(), value.clone());
        }
        top.insert("problems".into(), json!(self.problems));
        top.insert("details".into(), Value::Object(self.details.clone()));
        Value::Object(top)
    }
}

/// Rounds to `digits` decimals (for readable JSON).
pub(crate) fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// `target/bench`, next to the running binary (`target/<profile>/spanner-queues-bench`).
pub(crate) fn output_dir() -> PathBuf {
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        let profile_dir = exe.parent()?;
        let target = profile_dir.parent()?;
        Some(target.join("bench"))
    });
    from_exe.unwrap_or_else(|| Path::new("target").join("bench"))
}
