//! Every crate of the workspace is built in layers, and no module directory has an import cycle.
//!
//! This test parses the sources of every workspace member with `syn` (no compilation involved),
//! follows the `mod` declarations from each crate root, and builds, for every module that has
//! child modules (the crate root, `emulator/src/front`, `spanner-queues/src/worker`, …), the
//! graph of which child uses which sibling. A use is any path that resolves to a sibling:
//! `crate::a::b`, `super::b` (any number of `super`s, from any depth, inline modules counted),
//! `self::b`, grouped paths (`super::{a, b::C}`), paths inside macro invocations, and names the
//! parent re-exports (`crate::Error` counts as a use of `error` when the root says
//! `pub use error::Error`). Test code is left out: every item whose `#[cfg]` needs `test`
//! (`cfg(test)`, `cfg(any(test, feature = "…"))`, `cfg(all(test, …))`), and files whose inner
//! `#![cfg]` does. Comments and literals are not code, so they are never seen.
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

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, Item, Meta, Token, UseTree};

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
            // Queues known by name only (their columns read from the database).
            &["dynamic"],
            // Runtimes.
            &["receive"],
            &["worker"],
            // The names of the SDK's own tables; the grants a role needs on them and on queues;
            // setting up a database for all of the above.
            &["tables"],
            &["grants"],
            &["admin"],
        ],
    },
    Layered {
        dir: "sql/src",
        layers: &[
            // The keyword lists, the tokenizer, durations: leaves.
            &["duration", "keywords", "lexer"],
            // Quoting (by the keyword lists) and the cursor over tokens.
            &["cursor", "quote"],
        ],
    },
    Layered {
        dir: "spanner-queues-macros/src",
        layers: &[&["attr", "rules"], &["expand"]],
    },
    Layered {
        dir: "emulator/src",
        layers: &[
            // The reaper of child processes (tokens are `spanner-queues-sql`'s).
            &["reaper"],
            // Parsing DDL and SQL, PostgreSQL interval arithmetic; starting the official emulator.
            &["ddl", "sql", "interval", "backend"],
            // The queue-aware gRPC front.
            &["front"],
            // The front and the emulator run together on this machine.
            &["local"],
        ],
    },
    Layered {
        dir: "emulator/src/sql",
        layers: &[
            // The arguments of the queue functions; DML statements.
            &["args", "dml"],
            // The calls of the queue functions and the queries around them.
            &["functions"],
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
            // Whether `interval` is a name or a type; the statement's tokens and text; expression
            // nodes written and recognized.
            &["spelling"],
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

/// Reads a source file: `None` if there is none. The tests below pass the file system; the
/// scanner's own tests pass a map of small sources.
type Read<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// One path of a use tree or of code, with the name it is bound to (`as` alias, for uses).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone)]
struct UsePath {
    segments: Vec<String>,
    alias: Option<String>,
}

/// A path that starts with `crate`, `super` or `self`, and the module it stands in (inline
/// modules included), from which it resolves.
#[derive(Debug)]
struct Found {
    at: Vec<String>,
    path: UsePath,
}

/// One source file of a crate: its module path from the crate root, its file, and what it uses
/// outside test code.
#[derive(Debug)]
struct ModFile {
    path: Vec<String>,
    file: PathBuf,
    /// The paths of the module's own top-level `use` items: the names it brings into its scope.
    scope_uses: Vec<UsePath>,
    /// Every path in the file that starts with `crate`, `super` or `self`.
    paths: Vec<Found>,
}

/// Every module file of the crate whose root file is `root`, following `mod name;` declarations
/// (test modules excluded).
fn crate_files(root: &Path, read: Read<'_>) -> Vec<ModFile> {
    fn load(path: Vec<String>, file: PathBuf, read: Read<'_>, out: &mut Vec<ModFile>) {
        let text = read(&file).unwrap_or_else(|| panic!("{}: no such file", file.display()));
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if is_test_only(&parsed.attrs) {
            return;
        }
        let mut scan = Scan {
            at: path.clone(),
            depth: path.len(),
            paths: Vec::new(),
            declared: Vec::new(),
        };
        scan.visit_file(&parsed);
        let scope_uses = parsed
            .items
            .iter()
            .filter_map(|item| match item {
                Item::Use(u) if !is_test_only(&u.attrs) => Some(use_paths(&u.tree)),
                _ => None,
            })
            .flatten()
            .collect();
        // Where the children of this module live: next to a root or `mod.rs`, else in a
        // directory named after the file.
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let dir = if path.is_empty() || stem == "mod" {
            file.parent().expect("parent").to_path_buf()
        } else {
            file.with_extension("")
        };
        out.push(ModFile {
            path: path.clone(),
            file,
            scope_uses,
            paths: scan.paths,
        });
        // Its `mod name;` declarations (inline `mod name { … }` are not files).
        for child in scan.declared {
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(&child).join("mod.rs");
            let child_file = if read(&flat).is_some() { flat } else { nested };
            let mut child_path = path.clone();
            child_path.push(child);
            load(child_path, child_file, read, out);
        }
    }
    let mut out = Vec::new();
    load(Vec::new(), root.to_path_buf(), read, &mut out);
    out
}

/// What one file uses, collected by walking its syntax tree and skipping test-only items.
struct Scan {
    /// The module being walked: the file's, then an inline module's inside it.
    at: Vec<String>,
    /// The depth of the file's own module: `mod name;` is read only there.
    depth: usize,
    paths: Vec<Found>,
    declared: Vec<String>,
}

impl Scan {
    fn found(&mut self, path: UsePath) {
        let relative = matches!(
            path.segments.first().map(String::as_str),
            Some("crate" | "super" | "self")
        );
        // A lone `self`, `super` or `crate` (a receiver, `pub(super)`) names no sibling.
        if relative && path.segments.len() > 1 {
            self.paths.push(Found {
                at: self.at.clone(),
                path,
            });
        }
    }
}

impl<'ast> Visit<'ast> for Scan {
    fn visit_item(&mut self, item: &'ast Item) {
        if !is_test_only(item_attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if module.content.is_none() {
            assert!(
                self.at.len() == self.depth,
                "`mod {};` inside an inline module is not supported by this test",
                module.ident
            );
            self.declared.push(module.ident.to_string());
            return;
        }
        self.at.push(module.ident.to_string());
        visit::visit_item_mod(self, module);
        self.at.pop();
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        for path in use_paths(&item.tree) {
            self.found(path);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.found(UsePath {
            segments: path.segments.iter().map(|s| s.ident.to_string()).collect(),
            alias: None,
        });
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        visit::visit_macro(self, mac);
        for path in token_paths(mac.tokens.clone()) {
            self.found(path);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs: &[Attribute] = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => &[],
        };
        if !is_test_only(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs: &[Attribute] = match item {
            syn::TraitItem::Const(i) => &i.attrs,
            syn::TraitItem::Fn(i) => &i.attrs,
            syn::TraitItem::Type(i) => &i.attrs,
            syn::TraitItem::Macro(i) => &i.attrs,
            _ => &[],
        };
        if !is_test_only(attrs) {
            visit::visit_trait_item(self, item);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !is_test_only(&field.attrs) {
            visit::visit_field(self, field);
        }
    }
}

/// The attributes of an item.
fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Whether the attributes make their item exist only in tests: a `#[cfg]` whose predicate needs
/// `test` (`test`, or `any`/`all` with such an argument; `not(test)` does not).
///
/// `cfg(any(test, feature = "x"))` counts as test code although the feature also builds it: it
/// is test support, and its imports are not the module's layering.
fn is_test_only(attrs: &[Attribute]) -> bool {
    fn needs_test(meta: &Meta) -> bool {
        match meta {
            Meta::Path(path) => path.is_ident("test"),
            Meta::List(list) if list.path.is_ident("any") || list.path.is_ident("all") => list
                .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
                .is_ok_and(|args| args.iter().any(needs_test)),
            _ => false,
        }
    }
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg") && attr.parse_args::<Meta>().is_ok_and(|m| needs_test(&m))
    })
}

/// The paths of a use tree: `super::{a, b::{C, D as E}}` gives `super::a`, `super::b::C`,
/// `super::b::D` (as `E`); a glob ends in `*`.
fn use_paths(tree: &UseTree) -> Vec<UsePath> {
    fn walk(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<UsePath>) {
        let mut leaf = |last: String, alias: Option<String>| {
            let mut segments = prefix.clone();
            segments.push(last);
            out.push(UsePath { segments, alias });
        };
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(&p.tree, prefix, out);
                prefix.pop();
            }
            UseTree::Name(n) => leaf(n.ident.to_string(), None),
            UseTree::Rename(r) => leaf(r.ident.to_string(), Some(r.rename.to_string())),
            UseTree::Glob(_) => leaf("*".to_owned(), None),
            UseTree::Group(g) => {
                for tree in &g.items {
                    walk(tree, prefix, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(tree, &mut Vec::new(), &mut out);
    out
}

/// The paths starting with `crate`, `super` or `self` (or `$crate`) in a macro's tokens, which
/// `syn` leaves unparsed: `a::b::c` chains, and use trees (`crate::x::{a, b}`).
fn token_paths(tokens: TokenStream) -> Vec<UsePath> {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let path_sep = |i: usize| {
        matches!((tokens.get(i), tokens.get(i + 1)),
            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':')
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(group) => out.extend(token_paths(group.stream())),
            TokenTree::Ident(start)
                if ["crate", "super", "self"].contains(&start.to_string().as_str())
                    && path_sep(i + 1) =>
            {
                let mut segments = vec![start.to_string()];
                while path_sep(i + 1) {
                    match tokens.get(i + 3) {
                        Some(TokenTree::Ident(next)) => segments.push(next.to_string()),
                        Some(TokenTree::Group(group)) if group.delimiter() == Delimiter::Brace => {
                            if let Ok(tree) =
                                syn::parse2::<UseTree>(TokenTree::Group(group.clone()).into())
                            {
                                out.extend(use_paths(&tree).into_iter().map(|p| UsePath {
                                    segments: segments.iter().cloned().chain(p.segments).collect(),
                                    alias: p.alias,
                                }));
                                segments.clear();
                            }
                            i += 3;
                            break;
                        }
                        _ => break,
                    }
                    i += 3;
                }
                if !segments.is_empty() {
                    out.push(UsePath {
                        segments,
                        alias: None,
                    });
                }
            }
            _ => {}
        }
        i += 1;
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
fn crate_graphs(workspace: &Path, root_file: &Path, read: Read<'_>) -> BTreeMap<String, DirGraph> {
    let files = crate_files(root_file, read);
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
        for used in &parent.scope_uses {
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
            for Found { at, path: used } in &file.paths {
                let Some(abs) = resolve(at, &used.segments) else {
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
    let read = |file: &Path| fs::read_to_string(file).ok();
    let mut all = BTreeMap::new();
    for member in members(&root) {
        for root_file in ["src/lib.rs", "src/main.rs"] {
            let file = root.join(&member).join(root_file);
            if file.exists() {
                all.extend(crate_graphs(&root, &file, &read));
            }
        }
    }
    all
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

fn globs(graphs: &BTreeMap<String, DirGraph>) -> Vec<&str> {
    graphs
        .iter()
        .filter(|(dir, _)| !not_yet(dir))
        .flat_map(|(_, graph)| graph.globs.iter().map(String::as_str))
        .collect()
}

/// What breaks the layers of `layered`: an edge that is not downward, a child with no layer, a
/// layer entry that is no child.
fn layering_problems(graphs: &BTreeMap<String, DirGraph>, layered: &[Layered]) -> BTreeSet<String> {
    let mut problems = BTreeSet::new();
    for Layered { dir, layers } in layered {
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
    problems
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
    let globs = globs(workspace_graphs());
    assert!(
        globs.is_empty(),
        "glob imports of a parent module hide which siblings a module uses; import by name:\n{}",
        globs.join("\n")
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
    let problems = layering_problems(workspace_graphs(), LAYERED);
    assert!(
        problems.is_empty(),
        "{}",
        problems.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The graphs of a small crate `x` given as `(file, source)` pairs (`x/src/lib.rs` first).
fn graphs_of(files: &[(&str, &str)]) -> BTreeMap<String, DirGraph> {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(path, text)| (Path::new("/ws").join(path), (*text).to_owned()))
        .collect();
    let read = |file: &Path| files.get(file).cloned();
    crate_graphs(Path::new("/ws"), Path::new("/ws/x/src/lib.rs"), &read)
}

fn edges_of(graphs: &BTreeMap<String, DirGraph>, dir: &str) -> Vec<String> {
    graphs[dir]
        .edges
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |to| format!("{from} -> {to}")))
        .collect()
}

/// The scanner sees grouped, nested, `super`, inline-module, macro and re-exported paths, and
/// no comments, strings or test code (any `cfg` that needs `test`).
#[test]
fn the_path_scanner_sees_uses_and_nothing_else() {
    let graphs = graphs_of(&[
        (
            "x/src/lib.rs",
            "mod a; mod b; mod c; mod d; mod e; mod f; mod g; mod h; mod k; mod t; mod z;\n\
             pub use h::Reexported;\n\
             #[cfg(test)] pub use z::NotBrought;",
        ),
        (
            "x/src/a.rs",
            r##"
            use crate::{b::B, c::{self, C as Renamed}};
            /// [`Queue`](crate::z::Queue) in a doc comment
            // crate::z in a comment
            /* crate::z in a block comment */
            const S: &str = "crate::z in a string";
            const R: &str = r#"crate::z in a raw string"#;
            fn f<'a>(x: &'a crate::d::Thing) { super::e::helper::<u8>(); let _ = ('{', '"'); }
            fn m() { tracing::info!(value = crate::f::SENT, "{}", self::inner::X); }
            mod inner { use super::super::g::G; }
            fn r() -> crate::Reexported { todo!() }
            fn n(_: crate::NotBrought) {}
            #[cfg(test)]
            mod tests { use crate::z; fn g() { let _ = '}'; } }
            #[cfg(any(test, feature = "testing"))]
            fn test_support() { crate::z::helper(); }
            #[cfg(all(test, unix))]
            use crate::z::Unix;
            #[cfg(not(test))]
            fn kept() { crate::k::kept(); }
            impl Thing { #[cfg(test)] fn in_test() { crate::z::x(); } }
            "##,
        ),
        ("x/src/b.rs", ""),
        ("x/src/c.rs", ""),
        ("x/src/d.rs", ""),
        ("x/src/e.rs", ""),
        ("x/src/f.rs", ""),
        ("x/src/g.rs", ""),
        ("x/src/h.rs", ""),
        ("x/src/k.rs", ""),
        ("x/src/t.rs", "#![cfg(test)]"),
        ("x/src/z.rs", ""),
    ]);
    assert_eq!(
        edges_of(&graphs, "x/src"),
        [
            "a -> b", "a -> c", "a -> d", "a -> e", "a -> f", "a -> g", "a -> h", "a -> k"
        ]
    );
    // `z` is used only by test code, comments and literals; the test-only module `t` is no
    // child at all.
    assert_eq!(
        graphs["x/src"].edges.keys().collect::<Vec<_>>(),
        ["a", "b", "c", "d", "e", "f", "g", "h", "k", "z"]
    );
}

#[test]
fn an_upward_import_breaks_the_layers() {
    const LOW_HIGH: &[Layered] = &[Layered {
        dir: "x/src",
        layers: &[&["low"], &["high"]],
    }];
    let upward = graphs_of(&[
        ("x/src/lib.rs", "mod low; mod high;"),
        ("x/src/low.rs", "use crate::high::Thing;"),
        ("x/src/high.rs", "use crate::low::Other;"),
    ]);
    assert_eq!(
        layering_problems(&upward, LOW_HIGH)
            .into_iter()
            .collect::<Vec<_>>(),
        ["x/src: `low` (layer 0) uses `high`, which is not below it"]
    );
    let downward = graphs_of(&[
        ("x/src/lib.rs", "mod low; mod high; mod new;"),
        ("x/src/low.rs", "#[cfg(test)] use crate::high::Thing;"),
        ("x/src/high.rs", "use crate::low::Other;"),
        ("x/src/new.rs", ""),
    ]);
    assert_eq!(
        layering_problems(&downward, LOW_HIGH)
            .into_iter()
            .collect::<Vec<_>>(),
        ["x/src: module `new` is not placed in LAYERED (checks/tests/layers.rs)"]
    );
}

#[test]
fn a_super_path_from_any_depth_is_an_edge() {
    let graphs = graphs_of(&[
        ("x/src/lib.rs", "mod a; mod b;"),
        ("x/src/a/mod.rs", "mod deep;"),
        (
            "x/src/a/deep.rs",
            "fn f() -> usize { super::super::b::helper() }",
        ),
        (
            "x/src/b.rs",
            "pub(super) fn helper() -> usize { super::a::N }",
        ),
    ]);
    assert_eq!(edges_of(&graphs, "x/src"), ["a -> b", "b -> a"]);
    assert_eq!(
        cycles(&graphs),
        ["x/src: a -> b -> a"],
        "a cycle through a grandchild"
    );
    assert_eq!(edges_of(&graphs, "x/src/a"), Vec::<String>::new());
}

#[test]
fn a_glob_of_the_parent_is_reported() {
    let graphs = graphs_of(&[
        ("x/src/lib.rs", "mod a; mod b;"),
        (
            "x/src/a.rs",
            "use super::*;\n#[cfg(test)] mod tests { use super::*; }",
        ),
        ("x/src/b.rs", "#[cfg(test)] use super::*;"),
    ]);
    assert_eq!(globs(&graphs), ["x/src/a.rs: use super::*"]);
}

#[test]
fn a_cycle_through_a_reexport_is_found() {
    let graphs = graphs_of(&[
        ("x/src/lib.rs", "mod a; mod b; mod c;\npub use c::Error;"),
        ("x/src/a.rs", "use crate::b::B;"),
        ("x/src/b.rs", "use crate::Error;"),
        ("x/src/c.rs", "use super::a::A;"),
    ]);
    assert_eq!(cycles(&graphs), ["x/src: a -> b -> c -> a"]);
    let acyclic = graphs_of(&[
        ("x/src/lib.rs", "mod a; mod b; mod c;\npub use c::Error;"),
        ("x/src/a.rs", "use crate::b::B;"),
        ("x/src/b.rs", "use crate::Error;"),
        ("x/src/c.rs", "fn f() { let _ = \"super::a::A\"; }"),
    ]);
    assert_eq!(cycles(&acyclic), Vec::<String>::new());
}
