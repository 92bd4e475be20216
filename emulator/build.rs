//! Computes a build id from the crate's sources, so that the test harness can tell whether the
//! container image it finds was built from the same front as the library it is linked with.

use std::hash::{Hash, Hasher};
use std::path::Path;

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            visit(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

fn main() {
    // Read when the script runs, not baked in when it is compiled: a target directory copied
    // from another checkout keeps its compiled build script, which would hash that checkout.
    let manifest_dir =
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest_dir);
    let mut files = Vec::new();
    visit(&root.join("src"), &mut files);
    files.push(root.join("Cargo.toml"));
    files.sort();
    // SipHash with fixed keys: deterministic for the same sources and toolchain.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for file in &files {
        file.strip_prefix(root).unwrap_or(file).hash(&mut hasher);
        std::fs::read(file).unwrap_or_default().hash(&mut hasher);
    }
    println!(
        "cargo:rustc-env=SPANNER_QUEUES_EMULATOR_BUILD_ID={:016x}",
        hasher.finish()
    );
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=Cargo.toml");
}
