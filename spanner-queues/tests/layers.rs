//! The SDK's modules form layers: a module uses only modules of lower layers, so there is no
//! import cycle. This test reads `src/`, builds the graph of `crate::` paths between top-level
//! modules (test code excluded) and fails on a cycle, on an edge that goes up or sideways, and on
//! a module that is not placed in a layer. `docs/architecture.md` describes the same layers.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Lowest layer first. A module may use the modules of the layers before its own, and no other.
const LAYERS: &[&[&str]] = &[
    // Leaves: no dependency on the rest of the crate.
    &["dialect", "status", "telemetry", "util"],
    // The pure model: names, column types, keys, schemas, payloads, commit outcomes.
    &["ident"],
    &["types"],
    &["key"],
    &["codec", "schema"],
    &["outcome"],
    // The crate's one error type; the range checks of settings, the message trait and the
    // row-reading loop, which return it.
    &["error"],
    &["bounds", "message", "query"],
    // A database handle and its dialect.
    &["database"],
    // Talking to Spanner: transactions, then sending and acking inside them.
    &["transaction"],
    &["queue"],
    &["ddl"],
    // Runtimes.
    &["receive"],
    &["worker"],
    // Setting up a database for all of the above.
    &["admin"],
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The `.rs` files of each top-level module (`foo.rs`, or everything under `foo/`).
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("read module directory") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut modules = BTreeMap::new();
    for entry in fs::read_dir(src).expect("read src/") {
        let path = entry.expect("directory entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("UTF-8 file name")
            .to_owned();
        let mut files = Vec::new();
        if path.is_dir() {
            walk(&path, &mut files);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" {
            files.push(path);
        }
        if !files.is_empty() {
            modules.entry(name).or_insert_with(Vec::new).extend(files);
        }
    }
    modules
}

/// `text` without comments (doc comments included: doc links are not imports) and without the
/// contents of string and character literals.
fn strip_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && matches!(next, Some('"' | '#')) && !ident_char_before(&chars, i) {
            // A raw string r"…" or r#"…"#: no escapes, ends at `"` and as many `#`.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                // Skip the escaped character, then up to the closing quote.
                let mut j = i + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// `code` (already stripped) without the items marked `#[cfg(test)]`: from the attribute to the
/// end of the item's `{ … }` block, or to its `;`.
fn strip_test_items(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        let end = match item.find(['{', ';']) {
            Some(open) if item[open..].starts_with(';') => open + 1,
            Some(open) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (k, ch) in item[open..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            None => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first path segment after each `crate::` (every branch of a `crate::{a, b::c}` group).
fn crate_paths(code: &str) -> BTreeSet<String> {
    fn ident_at(s: &str) -> &str {
        let s = s.trim_start();
        let end = s.find(|c: char| !is_ident_char(c)).unwrap_or(s.len());
        &s[..end]
    }
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(is_ident_char) {
            continue; // `foo_crate::`, not this crate
        }
        let tail = rest.trim_start();
        if let Some(group) = tail.strip_prefix('{') {
            // The first segment of every top-level element of the group.
            let mut depth = 0usize;
            let mut element_start = true;
            for (k, ch) in group.char_indices() {
                if element_start && !ch.is_whitespace() {
                    names.insert(ident_at(&group[k..]).to_owned());
                    element_start = false;
                }
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => element_start = true,
                    _ => {}
                }
            }
        } else {
            names.insert(ident_at(tail).to_owned());
        }
    }
    names.remove("");
    names
}

/// Names the crate root re-exports (`pub use module::{A, B}` in `lib.rs`), by the module that
/// defines them, so that `crate::Error` counts as a use of `error`.
fn root_reexports(lib: &str, modules: &BTreeMap<String, Vec<PathBuf>>) -> BTreeMap<String, String> {
    let code = strip_comments_and_literals(lib);
    let mut names = BTreeMap::new();
    for statement in code.split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        if !modules.contains_key(module.trim()) {
            continue;
        }
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = item.rsplit("::").next().unwrap_or(item).trim();
            let name = name.rsplit(" as ").next().unwrap_or(name).trim();
            if !name.is_empty() {
                names.insert(name.to_owned(), module.trim().to_owned());
            }
        }
    }
    names
}

/// Module → the other modules it uses.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = src_dir();
    let modules = modules(&src);
    let lib = fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let reexports = root_reexports(&lib, &modules);
    let mut edges = BTreeMap::new();
    for (module, files) in &modules {
        let mut used = BTreeSet::new();
        for file in files {
            let text = fs::read_to_string(file).expect("read source file");
            let code = strip_test_items(&strip_comments_and_literals(&text));
            for name in crate_paths(&code) {
                let target = if modules.contains_key(&name) {
                    Some(name)
                } else {
                    reexports.get(&name).cloned()
                };
                if let Some(target) = target.filter(|t| t != module) {
                    used.insert(target);
                }
            }
        }
        edges.insert(module.clone(), used);
    }
    edges
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The modules on a cycle, if any (depth-first search for a back edge).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

#[test]
fn the_module_graph_has_no_cycle() {
    let edges = graph();
    assert!(
        edges.len() >= 10,
        "expected the crate's modules, found {:?}",
        edges.keys().collect::<Vec<_>>()
    );
    if let Some(cycle) = find_cycle(&edges) {
        panic!("module cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn every_module_uses_only_lower_layers() {
    let edges = graph();
    let mut problems = BTreeSet::new();
    for (module, used) in &edges {
        let Some(own) = layer_of(module) else {
            problems.insert(format!(
                "module `{module}` is not placed in LAYERS (tests/layers.rs)"
            ));
            continue;
        };
        for target in used {
            match layer_of(target) {
                Some(layer) if layer < own => {}
                Some(_) => {
                    problems.insert(format!(
                        "`{module}` (layer {own}) uses `{target}`, which is not below it"
                    ));
                }
                None => {
                    problems.insert(format!("module `{target}` is not placed in LAYERS"));
                }
            }
        }
    }
    for name in LAYERS.iter().flat_map(|layer| layer.iter()) {
        if !edges.contains_key(*name) {
            problems.insert(format!(
                "LAYERS names `{name}`, which is not a module of src/"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}",
        problems.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The parser the two tests rely on: it must see grouped, nested and re-exported paths, and
/// must not see comments, strings or test code.
#[test]
fn the_path_scanner_sees_uses_and_nothing_else() {
    let code = strip_test_items(&strip_comments_and_literals(
        r##"
        use crate::{codec::Codec, key::{KeyType, MessageKey}, types};
        use crate::error::Error;
        /// [`Queue`](crate::queue::Queue) in a doc comment
        // crate::worker in a comment
        /* crate::admin in a block comment */
        let s = "crate::receive in a string";
        let r = r#"crate::ddl in a raw string"#;
        let c = '{';
        let q = ('\'', '"', '\u{7b}');
        fn f<'a>(x: &'a crate::Result<()>) {}
        #[cfg(test)]
        mod tests { use crate::transaction; fn g() { let _ = '}'; } }
        let after = crate::telemetry::SENT;
        "##,
    ));
    let found = crate_paths(&code);
    let expected: BTreeSet<String> = ["codec", "key", "types", "error", "Result", "telemetry"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(found, expected);
}
