//! The module layering of DESIGN.md, enforced: every `crate::` path in `src/` names a module
//! in the same layer or a lower one.
//!
//! The test reads the source, strips comments and literals, expands `use crate::{..}` groups,
//! and maps each path to the longest module prefix listed in [`LAYERS`]. A path that names no
//! listed module (an item re-exported at the crate root, such as `crate::spawn`) counts as the
//! facade, the top layer: lower modules import items from the module that defines them. The
//! crate root (`lib.rs`) is the facade and may import anything. A module missing from the
//! table fails the test, so a new module must be given its layer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// `(module path, layer)`. Submodules inherit their parent's layer unless listed themselves.
const LAYERS: &[(&str, u8)] = &[
    // 0 switch
    ("context", 0),
    ("stack", 0),
    ("zeroed", 0),
    ("loom_shim", 0),
    ("backoff", 0),
    // 1 queues and parking
    ("run_queue", 1),
    ("local_queue", 1),
    ("free_chain", 1),
    ("trace_ring", 1),
    ("raw_mutex", 1),
    ("wheel", 1),
    ("runtime::idle", 1),
    ("runtime::park", 1),
    ("runtime::lifecycle", 1),
    // 2 scheduler
    ("exit", 2),
    ("error", 2),
    ("actor", 2),
    ("slot_state", 2),
    ("runtime", 2),
    ("io", 2),
    // 3 actors' world
    ("process", 3),
    ("timer", 3),
    ("mailbox", 3),
    ("receive", 3),
    ("channel", 3),
    ("sync", 3),
    ("hand", 3),
    ("reply", 3),
    ("preempt", 3),
    ("actor_local", 3),
    ("task", 3),
    ("groups", 3),
    ("registry", 3),
    ("net", 3),
    ("offload", 3),
    // 4 behaviours
    ("behaviour", 4),
    ("gen_server", 4),
    ("gen_statem", 4),
    ("supervisor", 4),
    ("pg", 4),
    ("run", 4),
    // 5 reach
    ("cluster", 5),
    ("info", 5),
    ("profile", 3),
    ("observer", 5),
];

const FACADE: u8 = u8::MAX;

const LAYER_NAMES: &[&str] =
    &["0 switch", "1 queues and parking", "2 scheduler", "3 actors' world", "4 behaviours", "5 reach"];

fn layer_name(l: u8) -> String {
    LAYER_NAMES.get(l as usize).map_or_else(|| "the crate-root facade".to_string(), |s| s.to_string())
}

/// The longest listed prefix of `segments`, with its layer.
fn layer_of(segments: &[String]) -> Option<(String, u8)> {
    (1..=segments.len()).rev().find_map(|n| {
        let path = segments[..n].join("::");
        LAYERS.iter().find(|(m, _)| *m == path).map(|(m, l)| (m.to_string(), *l))
    })
}

/// The module path of a source file (`src/runtime/worker.rs` -> `runtime::worker`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Source without comments, string/char literals (so doc links and messages do not count).
fn strip(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'r' if b.get(i + 1) == Some(&b'"') || (b.get(i + 1) == Some(&b'#') && b.get(i + 2) != Some(&b'[')) => {
                // Raw string: r"..." or r#"..."#.
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                j += 1;
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat(b'#').take(hashes)).collect();
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = j + close.len();
                out.push_str("\"\"");
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): skip only the former.
                let lit_end = if b.get(i + 1) == Some(&b'\\') {
                    (i + 2..b.len()).find(|&j| b[j] == b'\'')
                } else if b.get(i + 2) == Some(&b'\'') {
                    Some(i + 2)
                } else {
                    None
                };
                match lit_end {
                    Some(e) => {
                        out.push_str("' '");
                        i = e + 1;
                    }
                    None => {
                        out.push('\'');
                        i += 1;
                    }
                }
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Every path that follows `crate::` in `code`, with `{..}` groups expanded.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let mut paths = Vec::new();
    let mut from = 0;
    while let Some(off) = code[from..].find("crate::") {
        let at = from + off;
        from = at + 7;
        if at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b':' || b[at - 1] == b'$') {
            continue; // `super::crate::`, `$crate::`, part of a longer identifier
        }
        let (group, _) = parse_tree(b, at + 7, Vec::new());
        paths.extend(group);
    }
    paths
}

/// Parses `a::b::{c, d::e}` at `i`; returns the paths (each prefixed with `prefix`).
fn parse_tree(b: &[u8], mut i: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    let mut path = prefix;
    loop {
        skip_ws(&mut i);
        if b.get(i) == Some(&b'{') {
            i += 1;
            let mut all = Vec::new();
            loop {
                skip_ws(&mut i);
                match b.get(i) {
                    Some(b'}') => return (all, i + 1),
                    Some(b',') => i += 1,
                    None => return (all, i),
                    _ => {
                        let (sub, j) = parse_tree(b, i, path.clone());
                        all.extend(sub);
                        // Skip an `as name` and anything else up to the separator.
                        i = j;
                        while i < b.len() && b[i] != b',' && b[i] != b'}' {
                            if b[i] == b'{' {
                                break;
                            }
                            i += 1;
                        }
                    }
                }
            }
        }
        let start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        if i > start {
            let seg = String::from_utf8_lossy(&b[start..i]).into_owned();
            if seg != "self" {
                path.push(seg);
            }
        }
        if b.get(i) == Some(&b':') && b.get(i + 1) == Some(&b':') {
            i += 2;
            continue;
        }
        return (vec![path], i);
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every import that points up the table, as `file: import (from layer to layer)`.
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut bad = BTreeSet::new();
    for file in files {
        let module = module_of(src, &file);
        if module.is_empty() {
            continue; // lib.rs: the facade
        }
        let rel = file.strip_prefix(src.parent().unwrap()).unwrap().display().to_string();
        let Some((_, own)) = layer_of(&module) else {
            bad.insert(format!("{rel}: module `{}` has no layer in tests/layering.rs", module.join("::")));
            continue;
        };
        let code = strip(&std::fs::read_to_string(&file).unwrap());
        for path in crate_paths(&code) {
            let (target, layer) = layer_of(&path).unwrap_or_else(|| (path.join("::"), FACADE));
            if layer > own {
                bad.insert(format!(
                    "{rel} (layer {}): imports `crate::{}` (`{target}`, layer {})",
                    layer_name(own),
                    path.join("::"),
                    layer_name(layer)
                ));
            }
        }
    }
    bad.into_iter().collect()
}

#[test]
fn no_module_imports_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(bad.is_empty(), "{} upward import(s) (see the layer table in DESIGN.md):\n{}", bad.len(), bad.join("\n"));
}

/// The checker itself: it must see upward imports in the forms the crate uses.
#[test]
fn checker_sees_grouped_and_inline_upward_paths() {
    let code = strip(
        "use crate::{runtime::{Shared, worker::park}, supervisor as s};\n\
         // crate::pg in a comment\n\
         let x = \"crate::gen_server\";\n\
         fn f() { crate::process::on_exit(); let c = 'a'; $crate::timer::x(); }",
    );
    let mut got: Vec<String> = crate_paths(&code).into_iter().map(|p| p.join("::")).collect();
    got.sort();
    assert_eq!(got, ["process::on_exit", "runtime::Shared", "runtime::worker::park", "supervisor"]);
    assert_eq!(layer_of(&["runtime".into(), "idle".into(), "Idle".into()]).unwrap().1, 1);
    assert_eq!(layer_of(&["runtime".into(), "worker".into()]).unwrap().1, 2);
    assert!(layer_of(&["spawn".into()]).is_none());
}
