//! Embeds the web console's built files (`console/dist`, or the directory
//! in `BURROW_CONSOLE_DIST`) as `ASSETS` in `$OUT_DIR/console_assets.rs`.
//! Without a build, `ASSETS` is empty and `/ui/` says how to build it.

use std::path::{Path, PathBuf};
use std::{env, fs};

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        // Dotfiles are no part of a build.
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            let rel = rel.to_string_lossy().replace('\\', "/");
            out.push((rel, path));
        }
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=BURROW_CONSOLE_DIST");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let dist = env::var_os("BURROW_CONSOLE_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../console/dist"));
    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        println!("cargo:rerun-if-changed={}", dist.display());
        walk(&dist, &dist, &mut files);
    } else if let Some(parent) = dist.parent().filter(|p| p.is_dir()) {
        // A build appearing later changes its parent.
        println!("cargo:rerun-if-changed={}", parent.display());
    }
    files.sort();
    let mut src = String::from("static ASSETS: &[(&str, &[u8])] = &[\n");
    for (rel, path) in &files {
        let abs = fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        src.push_str(&format!(
            "    ({rel:?}, include_bytes!({:?})),\n",
            abs.display().to_string()
        ));
    }
    src.push_str("];\n");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    fs::write(out.join("console_assets.rs"), src).expect("writing console_assets.rs");
}
