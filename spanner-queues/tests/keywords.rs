//! One list of GoogleSQL reserved keywords: the SDK (which quotes them in the DDL and SQL it
//! writes) and the emulator (which parses that SQL) must agree, or the two crates quote different
//! identifiers. The emulator does not depend on the SDK, so each keeps its list and this test
//! compares them as written in the workspace.

use std::collections::BTreeSet;
use std::path::Path;

/// The string literals of the array `const <name>` in the file at `path` (relative to this
/// crate).
fn keyword_list(path: &str, name: &str) -> BTreeSet<String> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (this test runs in the workspace)", file.display()));
    let start = text
        .find(&format!("const {name}"))
        .unwrap_or_else(|| panic!("{}: no `const {name}`", file.display()));
    let body = &text[start..];
    let body = &body[body.find('[').expect("array")..body.find("];").expect("end of array")];
    let words: BTreeSet<String> = body
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(
        words.len() > 50,
        "{}: `{name}` looks truncated",
        file.display()
    );
    words
}

#[test]
fn the_sdk_and_the_emulator_reserve_the_same_googlesql_keywords() {
    let sdk = keyword_list("src/ident.rs", "GOOGLE_SQL_RESERVED");
    let emulator = keyword_list("../emulator/src/lexer.rs", "RESERVED");
    assert_eq!(
        sdk.difference(&emulator).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "reserved in the SDK only"
    );
    assert_eq!(
        emulator.difference(&sdk).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "reserved in the emulator only"
    );
}

#[test]
fn the_sdk_quotes_every_keyword_it_lists() {
    use spanner_queues::Dialect;
    use spanner_queues::ident::is_reserved_keyword;
    for word in keyword_list("src/ident.rs", "GOOGLE_SQL_RESERVED") {
        assert!(is_reserved_keyword(&word, Dialect::GoogleSql), "{word}");
        assert!(
            is_reserved_keyword(&word.to_ascii_lowercase(), Dialect::GoogleSql),
            "{word} in lower case"
        );
    }
}
