//! Architecture suite. Property: the code's module dependencies are the ones
//! ARCHITECTURE.md declares. The layer order is read from ARCHITECTURE.md's
//! `layers` block (so the document and the code cannot drift apart), and
//! every `crate::` path in the library's code (comments and `#[cfg(test)]`
//! modules aside) is checked against it: a module may name its own layer
//! and the layers below, never one above, and never a module its layer's
//! `never` line forbids. Every module must be in a layer, and only
//! `storage/` may touch the file system (`std::fs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The declared architecture: module → layer index, and forbidden edges.
struct Layers {
    rank: BTreeMap<String, usize>,
    names: Vec<String>,
    never: BTreeMap<String, BTreeSet<String>>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Parses the fenced block opened by "```layers" in ARCHITECTURE.md:
/// `name: module module …` lines, bottom layer first, and
/// `never: module -> module module …` lines.
fn declared(text: &str) -> Result<Layers, String> {
    let start = text
        .find("```layers")
        .ok_or("ARCHITECTURE.md has no ```layers block")?;
    let body = &text[start + "```layers".len()..];
    let end = body
        .find("```")
        .ok_or("the ```layers block is not closed")?;
    let mut l = Layers {
        rank: BTreeMap::new(),
        names: Vec::new(),
        never: BTreeMap::new(),
    };
    for line in body[..end].lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (head, rest) = line
            .split_once(':')
            .ok_or_else(|| format!("layers line without ':': {line:?}"))?;
        if head.trim() == "never" {
            let (from, to) = rest
                .split_once("->")
                .ok_or_else(|| format!("never line without '->': {line:?}"))?;
            l.never
                .entry(from.trim().to_string())
                .or_default()
                .extend(to.split_whitespace().map(str::to_string));
            continue;
        }
        let idx = l.names.len();
        l.names.push(head.trim().to_string());
        for m in rest.split_whitespace() {
            if l.rank.insert(m.to_string(), idx).is_some() {
                return Err(format!("module {m} is in two layers"));
            }
        }
    }
    Ok(l)
}

/// Every `.rs` file under `dir`, with its top-level module name
/// (`btree/node.rs` → `btree`, `db.rs` → `db`).
fn sources(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(dir).unwrap();
                let first = rel.components().next().unwrap();
                let name = first.as_os_str().to_string_lossy();
                let module = name.strip_suffix(".rs").unwrap_or(&name).to_string();
                out.push((module, p));
            }
        }
    }
    out.sort();
    out
}

/// The code of a file without comments and without its trailing
/// `#[cfg(test)] mod …` (unit tests may reach anywhere).
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        // Line and doc comments. (A "//" inside a string literal would cut
        // the line short; the library has none before a crate:: path.)
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The top-level modules a piece of code names through `crate::` paths,
/// with the line of each (`crate::a::b`, and `crate::{a::x, b}` groups).
fn crate_paths(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().last();
            rest = &rest[i + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // e.g. `some_crate::`
            }
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let id: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !id.is_empty() {
                        out.push((id, n + 1));
                    }
                }
                continue;
            }
            let id: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !id.is_empty() {
                out.push((id, n + 1));
            }
        }
    }
    out
}

/// Checks the library's sources against the declared layers; returns every
/// violation found.
fn violations(src: &Path, layers: &Layers) -> Vec<String> {
    let mut bad = Vec::new();
    for (module, path) in sources(src) {
        let rel = path.strip_prefix(src).unwrap().display().to_string();
        if module == "lib" {
            continue; // the crate root re-exports every layer
        }
        let Some(&own) = layers.rank.get(&module) else {
            bad.push(format!(
                "{rel}: module {module} is in no layer of ARCHITECTURE.md"
            ));
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let code = code(&text);
        for (target, line) in crate_paths(&code) {
            if target == module || target == "self" || target == "super" {
                continue;
            }
            // Items re-exported at the crate root (`crate::Result`) belong
            // to the top: a module below it must name their home module.
            let Some(&theirs) = layers.rank.get(&target) else {
                if target.chars().next().is_some_and(char::is_uppercase) {
                    bad.push(format!(
                        "{rel}:{line}: crate::{target} is a crate-root item; name its module"
                    ));
                }
                continue;
            };
            if theirs > own {
                bad.push(format!(
                    "{rel}:{line}: {module} (layer {}) uses crate::{target} (layer {}, above it)",
                    layers.names[own], layers.names[theirs]
                ));
            }
            if layers
                .never
                .get(&module)
                .is_some_and(|n| n.contains(&target))
            {
                bad.push(format!(
                    "{rel}:{line}: {module} must never use crate::{target} (ARCHITECTURE.md)"
                ));
            }
        }
        if module != "storage" {
            for (n, l) in code.lines().enumerate() {
                if l.contains("std::fs") || l.contains("std::os::unix::fs") {
                    bad.push(format!(
                        "{rel}:{}: only storage/ touches the file system (std::fs)",
                        n + 1
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn imports_follow_the_declared_layers() {
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let layers = declared(&doc).unwrap_or_else(|e| panic!("{e}"));
    let src = root.join("crates/cairndb/src");
    let bad = violations(&src, &layers);
    assert!(
        bad.is_empty(),
        "the code does not follow ARCHITECTURE.md's layers:\n{}",
        bad.join("\n")
    );
}

/// The checker itself catches an upward `use`, a forbidden edge, a module
/// in no layer and `std::fs` outside storage (on files written here).
#[test]
fn the_layer_check_catches_violations() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("low")).unwrap();
    std::fs::write(
        src.join("low/mod.rs"),
        "use crate::high::Thing; // upward\nfn f() { crate::low::x(); }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("high.rs"),
        "use crate::{low::A, mid};\nfn g() { let _ = std::fs::read(\"x\"); }\n\
         #[cfg(test)]\nmod tests { use crate::top::Z; }\n",
    )
    .unwrap();
    std::fs::write(src.join("mid.rs"), "// crate::high in a comment\n").unwrap();
    std::fs::write(src.join("stray.rs"), "").unwrap();
    let layers =
        declared("```layers\nbottom: low\nmiddle: mid\ntop: high\nnever: high -> mid\n```")
            .unwrap();
    let bad = violations(src, &layers);
    let has = |s: &str| bad.iter().any(|b| b.contains(s));
    assert!(
        has("low/mod.rs:1: low (layer bottom) uses crate::high"),
        "{bad:#?}"
    );
    assert!(has("high.rs:1: high must never use crate::mid"), "{bad:#?}");
    assert!(has("high.rs:2: only storage/"), "{bad:#?}");
    assert!(has("stray.rs: module stray is in no layer"), "{bad:#?}");
    assert_eq!(
        bad.len(),
        4,
        "comments and test modules are not checked: {bad:#?}"
    );
}
