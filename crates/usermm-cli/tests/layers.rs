//! The crate's layers run one way (see `src/lib.rs`): `cli` → `cmd` → `sweep` → `args`,
//! `report`, and `args` → `report::format`. A module may name only layers below it, so no two files import
//! each other through a layer (an `args` ↔ `cmd` cycle, which once existed, cannot come back).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(sources(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// The code of a file: comments (doc links may point anywhere) and unit tests left out.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[track_caller]
fn assert_names_none(layer: &str, forbidden: &[&str]) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dir = src.join(layer);
    let files = if dir.is_dir() {
        sources(&dir)
    } else {
        vec![src.join(format!("{layer}.rs"))]
    };
    assert!(!files.is_empty(), "no sources for {layer}");
    for f in files {
        let c = code(&f);
        for path in forbidden {
            assert!(
                !c.contains(path),
                "{} names {path}: a layer may only use those below it",
                f.display()
            );
        }
    }
}

#[test]
fn layers_only_look_down() {
    assert_names_none("cmd", &["crate::cli"]);
    assert_names_none("sweep", &["crate::cli", "crate::cmd"]);
    assert_names_none("args", &["crate::cli", "crate::cmd", "crate::sweep"]);
    assert_names_none(
        "report",
        &["crate::cli", "crate::cmd", "crate::sweep", "crate::args"],
    );
}
