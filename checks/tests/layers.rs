//! Every crate of the workspace is built in layers, and no module directory has an import cycle.
//!
//! This test reads the sources of every workspace member (no compilation involved), follows the
//! `mod` declarations from each crate root, and builds, for every module that has child modules
//! (the crate root, `emulator/src/front`, `spanner-queues/src/worker`, …), the graph of which
//! child uses which sibling. A use is any path that resolves to a sibling: `crate::a::b`,
//! `super::b` (any number of `super`s, from any depth), `self::b`, grouped paths
//! (`super::{a, b::C}`), and names the parent re-exports (`crate::Error` counts as a use of
//! `error` when the root says `pub use error::Error`). Test code (`#[cfg(test)]` items), comments
//! and string literals are left out.
//!
//! Three rules:
//! - no cycle among the children of any module, in any crate;
//! - where a module's children are listed in [`LAYERED`], each uses only lower layers, every
//!   child is placed, and the list names no module that is gone;
//! - no glob import of the parent (`use super::*`) outside tests: it hides which siblings a
//!   module uses.
//!
//! `docs/architecture.md` describes the same layers.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module directory whose children form layers, lowest first: a child may use the children of
/// the layers before its own, and no other.
struct Layered {
    /// The directory of the module's children, relative to the workspace root.
    dir: &'static str,
    layers: &'static [&'static [&'static str]],
}

const LAYERED: &[Layered] = &[
    Layered {
        dir: "spanner-queues/src",
        layers: &[
            // Leaves: no dependency on the rest of the crate.
            &["dialect", "status", "telemetry", "util"],
            // The pure model: names, column types, keys, schemas, payloads, commit outcomes.
            &["ident"],
            &["types"],
            &["key"],
            &["codec", "schema"],
            &["outcome"],
            // The crate's one error type; the range checks of settings, the message trait and
            // the row-reading loop, which return it.
            &["error"],
            &["bounds", "message", "query"],
            // A database handle and its dialect.
            &["database", "ordering"],
            // Talking to Spanner: transactions, then sending and acking inside them.
            &["transaction"],
            &["queue"],
            &["ddl"],
            // Runtimes.
            &["receive"],
            &["worker"],
            // Setting up a database for all of the above.
            &["admin"],
        ],
    },
    Layered {
        dir: "spanner-queues-macros/src",
        layers: &[&["attr", "rules"], &["expand"]],
    },
    Layered {
        dir: "emulator/src",
        layers: &[
            // Tokens, and the reaper of child processes.
            &["lexer", "reaper"],
            // Parsing DDL and SQL, PostgreSQL interval arithmetic; starting the official emulator.
            &["ddl", "sql", "interval", "backend"],
            // The queue-aware gRPC front.
            &["front"],
            // The front and the emulator run together on this machine.
            &["local"],
        ],
    },
    Layered {
        dir: "emulator/src/front",
        layers: &[
            // Leaves: the wire types, settings, locks, the lease table, the clock floor.
            &["config", "floor", "lease", "proto", "sync"],
            // Pure helpers over the wire types, and the admission of read-write transactions.
            &["admission", "deferred", "limits", "mutations", "rpc"],
            // What a statement becomes (pure: no I/O).
            &["plan"],
            // Per-database state, then the state the whole front shares.
            &["state"],
            &["shared"],
            // The front's own reads (locking turns in its own sessions); PostgreSQL interval
            // arithmetic rewritten for the official emulator.
            &["reads", "intervals"],
            // What the rewritten calls share (admission, inline begins, rollbacks, planning
            // against the schema), then the held-DML executor.
            &["calls"],
            &["held"],
            // The RPC groups: admin and the queue functions, then commits and queries.
            &["admin", "receive"],
            &["commit", "query"],
            // Batch writes: each mutation group one commit.
            &["batch_write"],
            // Routing by gRPC path, then the server.
            &["grpc"],
            &["server"],
        ],
    },
    Layered {
        dir: "cli/src",
        layers: &[
            // Leaves: the CLI's error, time formatting, table/JSON output, reading CREATE QUEUE.
            &["ddl", "error", "output", "times"],
            // Parsing what the user typed; SQL it runs.
            &["input", "sql"],
            // A connection to the database.
            &["session"],
            // What the subcommands share: the queues' metadata, the run context.
            &["catalog", "context"],
            // One module per subcommand.
            &["commands"],
        ],
    },
    Layered {
        dir: "fault-proxy/src",
        layers: &[
            // The public vocabulary: errors, faults and how they match; counters (by fault kind).
            &["error", "plan"],
            &["stats"],
            // What every task of one proxy shares.
            &["shared"],
            // A test's handle on a fault; a handler's view of its connection.
            &["armed", "link"],
            // Response bodies, one request, client connections, the proxy.
            &["body"],
            &["forward"],
            &["conn"],
            &["proxy"],
        ],
    },
    Layered {
        dir: "bench/src",
        layers: &[
            &["cpu", "report"],
            &["emulator", "targets"],
            &["db"],
            &["consume", "renew", "send"],
            &["latency", "memory", "ordered", "soak"],
        ],
    },
    Layered {
        dir: "testing/src",
        layers: &[&["provision", "queues"]],
    },
    Layered {
        dir: "emulator/src/interval",
        layers: &[
            // The statement's tokens and text; expression nodes written and recognized.
            &["source"],
            &["build"],
            // The pieces of a chain and of an interval's text; a chain's evaluation.
            &["terms"],
            &["fold"],
            // The visitor that rewrites a parsed statement.
            &["rewrite"],
        ],
    },
    Layered {
        dir: "emulator/src/ddl",
        layers: &[
            // The error type.
            &["error"],
            // Tokens, quoting and option lists; the metadata literal of a queue table.
            &["metadata", "tokens"],
            // The model (columns, queues, tables) and how it renders; what kind of statement a
            // client sent.
            &["classify", "model"],
            // Parsing table and queue bodies: GoogleSQL, then PostgreSQL (same syntax tree).
            &["bodies"],
            &["pg_bodies"],
            // Building and validating queues, then the catalog of one database.
            &["queues"],
            &["catalog"],
            // Translating client statements: PostgreSQL, then both dialects.
            &["postgres"],
            &["translate"],
        ],
    },
];

/// Module directories that do not meet the rules yet, each with what is left to do. Empty is the
/// goal; an entry here is skipped by the cycle and glob checks, and the test fails once the entry
/// is no longer needed, so the list cannot go stale.
const NOT_YET: &[(&str, &str)] = &[];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the checks crate sits in the workspace")
        .to_path_buf()
}

/// The workspace members, read from the root `Cargo.toml`.
fn members(root: &Path) -> Vec<String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
    let start = manifest.find("members").expect("a members list");
    let list = &manifest[start..];
    let list = &list[list.find('[').expect("[") + 1..list.find(']').expect("]")];
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

/// One source file of a crate: its module path from the crate root, its file, and its code
/// without comments, literals and test items.
#[derive(Debug)]
struct ModFile {
    path: Vec<String>,
    file: PathBuf,
    code: String,
}

/// Every module file of the crate whose root file is `root`, following `mod name;` declarations
/// (test modules excluded, since their declarations are `#[cfg(test)]` items).
fn crate_files(root: &Path) -> Vec<ModFile> {
    fn load(path: Vec<String>, file: PathBuf, out: &mut Vec<ModFile>) {
        let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let code = strip_test_items(&strip_comments_and_literals(&text));
        // Where the children of this module live: next to a root or `mod.rs`, else in a
        // directory named after the file.
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let dir = if path.is_empty() || stem == "mod" {
            file.parent().expect("parent").to_path_buf()
        } else {
            file.with_extension("")
        };
        let children = declared_modules(&code);
        out.push(ModFile {
            path: path.clone(),
            file,
            code,
        });
        for child in children {
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(&child).join("mod.rs");
            let child_file = if flat.exists() { flat } else { nested };
            assert!(
                child_file.exists(),
                "`mod {child};` declared next to {} has no file",
                dir.display()
            );
            let mut child_path = path.clone();
            child_path.push(child);
            load(child_path, child_file, out);
        }
    }
    let mut out = Vec::new();
    load(Vec::new(), root.to_path_buf(), &mut out);
    out
}

/// The names of the `mod name;` declarations in `code` (inline `mod name { … }` are not files).
fn declared_modules(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("mod ") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + 4..];
        if before.is_some_and(is_ident_char) {
            continue;
        }
        let tail = rest.trim_start();
        let end = tail.find(|c: char| !is_ident_char(c)).unwrap_or(tail.len());
        let (name, after) = tail.split_at(end);
        if !name.is_empty() && after.trim_start().starts_with(';') {
            found.push(name.to_owned());
        }
    }
    found
}

/// One path of a use tree, with the name it is bound to (`as` alias or last segment).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone)]
struct UsePath {
    segments: Vec<String>,
    alias: Option<String>,
}

/// Expands the path (or use tree) that starts at `code[i..]` into its paths:
/// `super::{a, b::{C, D as E}}` gives `super::a`, `super::b::C`, `super::b::D` (as `E`).
fn parse_tree(code: &[char], mut i: usize) -> (Vec<UsePath>, usize) {
    fn skip_ws(code: &[char], mut i: usize) -> usize {
        while i < code.len() && code[i].is_whitespace() {
            i += 1;
        }
        i
    }
    fn ident(code: &[char], mut i: usize) -> (String, usize) {
        let start = i;
        if code.get(i) == Some(&'r') && code.get(i + 1) == Some(&'#') {
            i += 2;
        }
        while i < code.len() && is_ident_char(code[i]) {
            i += 1;
        }
        let word: String = code[start..i].iter().collect();
        (word.trim_start_matches("r#").to_owned(), i)
    }
    let mut prefix = Vec::new();
    loop {
        i = skip_ws(code, i);
        match code.get(i) {
            Some('{') => {
                let mut out = Vec::new();
                i += 1;
                loop {
                    i = skip_ws(code, i);
                    match code.get(i) {
                        None => return (out, i),
                        Some('}') => return (out, i + 1),
                        Some(',') => i += 1,
                        Some(_) => {
                            let (paths, next) = parse_tree(code, i);
                            if next == i {
                                return (out, i); // not a use tree after all
                            }
                            i = next;
                            out.extend(paths.into_iter().map(|p| UsePath {
                                segments: prefix.iter().cloned().chain(p.segments).collect(),
                                alias: p.alias,
                            }));
                        }
                    }
                }
            }
            Some('*') => {
                prefix.push("*".to_owned());
                return (
                    vec![UsePath {
                        segments: prefix,
                        alias: None,
                    }],
                    i + 1,
                );
            }
            _ => {}
        }
        let (word, next) = ident(code, i);
        if word.is_empty() {
            let paths = if prefix.is_empty() {
                Vec::new()
            } else {
                vec![UsePath {
                    segments: prefix,
                    alias: None,
                }]
            };
            return (paths, i);
        }
        prefix.push(word);
        i = skip_ws(code, next);
        if code.get(i) == Some(&':') && code.get(i + 1) == Some(&':') {
            i += 2;
            continue;
        }
        let mut alias = None;
        if code.get(i) == Some(&'a')
            && code.get(i + 1) == Some(&'s')
            && code.get(i + 2).is_some_and(|c| c.is_whitespace())
        {
            let (name, after) = ident(code, skip_ws(code, i + 2));
            alias = Some(name);
            i = after;
        }
        return (
            vec![UsePath {
                segments: prefix,
                alias,
            }],
            i,
        );
    }
}

/// Every path in `code` that starts with `crate`, `super` or `self` (a path's first segment
/// only: the `super` inside `super::super::x` does not start a second path).
fn relative_paths(code: &str) -> Vec<UsePath> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !(is_ident_char(chars[i - 1]) || chars[i - 1] == ':');
        let word_at = |w: &str| {
            let w: Vec<char> = w.chars().collect();
            chars[i..].starts_with(&w)
                && chars.get(i + w.len()) == Some(&':')
                && chars.get(i + w.len() + 1) == Some(&':')
        };
        if starts_word && (word_at("crate") || word_at("super") || word_at("self")) {
            let (paths, next) = parse_tree(&chars, i);
            out.extend(paths);
            i = next.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The paths of the `use` declarations in `code` (their trees expanded).
fn use_declarations(code: &str) -> Vec<UsePath> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= chars.len() {
        let starts_word = i == 0 || !is_ident_char(chars[i - 1]);
        if starts_word && chars[i..].starts_with(&['u', 's', 'e']) && chars[i + 3].is_whitespace() {
            let (paths, next) = parse_tree(&chars, i + 4);
            out.extend(paths);
            i = next.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// `path` as seen from the module `at`, made absolute (from the crate root), if it starts with
/// `crate`, `super` or `self`. A `self` after the first segment names the path before it.
fn resolve(at: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut abs: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") => at.to_vec(),
        Some("super") => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            if ups > at.len() {
                return None;
            }
            let mut abs = at[..at.len() - ups].to_vec();
            abs.extend(path[ups..].iter().cloned());
            return Some(abs.into_iter().filter(|s| s != "self").collect());
        }
        _ => return None,
    };
    abs.extend(path[1..].iter().filter(|s| *s != "self").cloned());
    Some(abs)
}

/// A module with child modules: which child uses which sibling, and the globs that hide it.
#[derive(Debug, Default)]
struct DirGraph {
    edges: BTreeMap<String, BTreeSet<String>>,
    globs: BTreeSet<String>,
}

/// For each module of the crate rooted at `root_file` that has children, keyed by the directory
/// of its children relative to the workspace root.
fn crate_graphs(workspace: &Path, root_file: &Path) -> BTreeMap<String, DirGraph> {
    let files = crate_files(root_file);
    let mut graphs = BTreeMap::new();
    for parent in &files {
        let children: BTreeSet<String> = files
            .iter()
            .filter(|f| f.path.len() == parent.path.len() + 1 && f.path.starts_with(&parent.path))
            .map(|f| f.path[parent.path.len()].clone())
            .collect();
        if children.is_empty() {
            continue;
        }
        let depth = parent.path.len();
        // Names the parent brings into its scope from a child (`pub use error::Error`,
        // `use spanner::Shared`): children reach them as `super::Name` / `crate::…::Name`.
        let mut brought: BTreeMap<String, String> = BTreeMap::new();
        for used in use_declarations(&parent.code) {
            let abs = if used.segments.first().is_some_and(|s| children.contains(s)) {
                let mut abs = parent.path.clone();
                abs.extend(used.segments.iter().cloned());
                Some(abs)
            } else {
                resolve(&parent.path, &used.segments)
            };
            let Some(abs) = abs else { continue };
            if abs.len() > depth + 1
                && abs.starts_with(&parent.path)
                && children.contains(&abs[depth])
            {
                let name = used
                    .alias
                    .clone()
                    .unwrap_or_else(|| abs.last().cloned().unwrap_or_default());
                if name != "*" {
                    brought.insert(name, abs[depth].clone());
                }
            }
        }
        let mut graph = DirGraph::default();
        for child in &children {
            graph.edges.insert(child.clone(), BTreeSet::new());
        }
        for file in files
            .iter()
            .filter(|f| f.path.len() > depth && f.path.starts_with(&parent.path))
        {
            let own = &file.path[depth];
            for used in relative_paths(&file.code) {
                let Some(abs) = resolve(&file.path, &used.segments) else {
                    continue;
                };
                if abs.len() <= depth || !abs.starts_with(&parent.path) {
                    continue;
                }
                let name = &abs[depth];
                if name == "*" {
                    graph.globs.insert(format!(
                        "{}: use {}",
                        file.file
                            .strip_prefix(workspace)
                            .unwrap_or(&file.file)
                            .display(),
                        used.segments.join("::")
                    ));
                    continue;
                }
                let target = if children.contains(name) {
                    Some(name)
                } else {
                    brought.get(name)
                };
                if let Some(target) = target.filter(|t| *t != own) {
                    graph
                        .edges
                        .get_mut(own)
                        .expect("child")
                        .insert(target.clone());
                }
            }
        }
        let dir = parent.file.parent().expect("parent dir");
        let dir = if depth == 0 || parent.file.file_stem().is_some_and(|s| s == "mod") {
            dir.to_path_buf()
        } else {
            parent.file.with_extension("")
        };
        let key = dir
            .strip_prefix(workspace)
            .expect("inside the workspace")
            .to_string_lossy()
            .into_owned();
        graphs.insert(key, graph);
    }
    graphs
}

/// Every module directory of every workspace member (library and binary roots; `src/bin/*`
/// binaries have no modules of their own here). Read once and shared by the tests.
fn workspace_graphs() -> &'static BTreeMap<String, DirGraph> {
    static GRAPHS: std::sync::OnceLock<BTreeMap<String, DirGraph>> = std::sync::OnceLock::new();
    GRAPHS.get_or_init(read_workspace_graphs)
}

fn read_workspace_graphs() -> BTreeMap<String, DirGraph> {
    let root = workspace_root();
    let mut all = BTreeMap::new();
    for member in members(&root) {
        for root_file in ["src/lib.rs", "src/main.rs"] {
            let file = root.join(&member).join(root_file);
            if file.exists() {
                all.extend(crate_graphs(&root, &file));
            }
        }
    }
    all
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

fn layer_of(layers: &[&[&str]], module: &str) -> Option<usize> {
    layers.iter().position(|layer| layer.contains(&module))
}

fn not_yet(dir: &str) -> bool {
    NOT_YET.iter().any(|(d, _)| *d == dir)
}

fn cycles(graphs: &BTreeMap<String, DirGraph>) -> Vec<String> {
    graphs
        .iter()
        .filter_map(|(dir, graph)| {
            find_cycle(&graph.edges).map(|c| format!("{dir}: {}", c.join(" -> ")))
        })
        .collect()
}

#[test]
fn no_module_directory_has_an_import_cycle() {
    let graphs = workspace_graphs();
    assert!(
        graphs.contains_key("spanner-queues/src")
            && graphs.contains_key("emulator/src/front")
            && graphs.len() >= 10,
        "expected every crate's module directories, found {:?}",
        graphs.keys().collect::<Vec<_>>()
    );
    let found: Vec<String> = cycles(graphs)
        .into_iter()
        .filter(|c| !not_yet(c.split(':').next().unwrap_or_default()))
        .collect();
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

#[test]
fn no_module_imports_its_parent_by_glob() {
    let graphs = workspace_graphs();
    let globs: Vec<&String> = graphs
        .iter()
        .filter(|(dir, _)| !not_yet(dir))
        .flat_map(|(_, graph)| &graph.globs)
        .collect();
    assert!(
        globs.is_empty(),
        "glob imports of a parent module hide which siblings a module uses; import by name:\n{}",
        globs
            .iter()
            .map(|g| g.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_not_yet_list_names_only_directories_that_still_need_it() {
    let graphs = workspace_graphs();
    for (dir, why) in NOT_YET {
        let graph = graphs
            .get(*dir)
            .unwrap_or_else(|| panic!("NOT_YET names `{dir}`, which has no child modules"));
        assert!(
            find_cycle(&graph.edges).is_some() || !graph.globs.is_empty(),
            "`{dir}` meets the rules now ({why}): remove it from NOT_YET"
        );
    }
}

#[test]
fn layered_modules_use_only_lower_layers() {
    let graphs = workspace_graphs();
    let mut problems = BTreeSet::new();
    for Layered { dir, layers } in LAYERED {
        let Some(graph) = graphs.get(*dir) else {
            problems.insert(format!("LAYERED names `{dir}`, which has no child modules"));
            continue;
        };
        for (module, used) in &graph.edges {
            let Some(own) = layer_of(layers, module) else {
                problems.insert(format!(
                    "{dir}: module `{module}` is not placed in LAYERED (checks/tests/layers.rs)"
                ));
                continue;
            };
            for target in used {
                match layer_of(layers, target) {
                    Some(layer) if layer < own => {}
                    Some(_) => {
                        problems.insert(format!(
                            "{dir}: `{module}` (layer {own}) uses `{target}`, which is not below it"
                        ));
                    }
                    None => {}
                }
            }
        }
        for name in layers.iter().flat_map(|layer| layer.iter()) {
            if !graph.edges.contains_key(*name) {
                problems.insert(format!(
                    "{dir}: LAYERED names `{name}`, which is not a child module"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{}",
        problems.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The scanner the tests rely on: it must see grouped, nested, `super` and re-exported paths,
/// and must not see comments, strings or test code.
#[test]
fn the_path_scanner_sees_uses_and_nothing_else() {
    let code = strip_test_items(&strip_comments_and_literals(
        r##"
        use crate::{codec::Codec, key::{KeyType, MessageKey}, types};
        use super::{super::grand, sibling::{self, Item as Renamed}};
        use self::child::Thing;
        /// [`Queue`](crate::queue::Queue) in a doc comment
        // crate::worker in a comment
        /* crate::admin in a block comment */
        let s = "crate::receive in a string";
        let r = r#"crate::ddl in a raw string"#;
        let c = '{';
        let q = ('\'', '"', '\u{7b}');
        fn f<'a>(x: &'a crate::Result<()>) { super::helper::<u8>(); }
        #[cfg(test)]
        mod tests { use crate::transaction; fn g() { let _ = '}'; } }
        let after = crate::telemetry::SENT;
        mod declared;
        pub(crate) mod also_declared;
        mod inline { }
        "##,
    ));
    let at = vec!["front".to_owned(), "spanner".to_owned()];
    let found: BTreeSet<String> = relative_paths(&code)
        .into_iter()
        .filter_map(|p| resolve(&at, &p.segments))
        .map(|p| p.join("::"))
        .collect();
    let expected: BTreeSet<String> = [
        "codec::Codec",
        "key::KeyType",
        "key::MessageKey",
        "types",
        "grand",
        "front::sibling",
        "front::sibling::Item",
        "front::spanner::child::Thing",
        "Result",
        "front::helper",
        "telemetry::SENT",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(found, expected);
    assert_eq!(declared_modules(&code), ["declared", "also_declared"]);
    let aliases: Vec<Option<String>> = use_declarations(&code)
        .into_iter()
        .map(|p| p.alias)
        .collect();
    assert!(aliases.contains(&Some("Renamed".to_owned())), "{aliases:?}");
}
