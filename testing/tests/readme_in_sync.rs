//! The README's "Testing your queue code" example is `readme_example.rs`, word for word, so the
//! code users copy is the code the test suite runs.

#[test]
fn the_readme_example_is_the_tested_file() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let Ok(readme) = std::fs::read_to_string(path) else {
        // A packaged copy of this crate has no repository README next to it.
        eprintln!("SKIPPING: no repository README at {path}");
        return;
    };
    let example = include_str!("readme_example.rs");
    let section = readme
        .split_once("## Testing your queue code")
        .expect("the README has a \"Testing your queue code\" section")
        .1;
    let code = section
        .split_once("```rust,ignore\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(code, _)| code)
        .expect("the section has a ```rust,ignore code block");
    assert!(
        code == example,
        "README.md's example differs from testing/tests/readme_example.rs: copy the file into \
         the README's code block"
    );
}
