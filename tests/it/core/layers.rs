//! The crate's folders import one another in one direction: no folder of
//! `src/` imports one that imports it back, read from every `crate::` path
//! outside comments and unit tests. The doors (`api`, `flight`, `pg`) are
//! the only importers of one another's neighbours, and nothing below them
//! imports a door.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module of `src/` (a folder or a file) and the top-level
/// modules its code names through `crate::`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            name.trim_end_matches(".rs").to_string()
        })
        .collect();
    // `crate::problems` is the engine's catalogue, re-exported at the root.
    let alias = |m: &str| {
        if m == "problems" {
            "engine".to_string()
        } else {
            m.to_string()
        }
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&src).unwrap();
            let top = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for (i, _) in line.match_indices("crate::") {
                    let name: String = line[i + 7..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    let name = alias(&name);
                    if modules.contains(&name) && name != top && top != "lib" {
                        graph.entry(top.clone()).or_default().insert(name);
                    }
                }
            }
        }
    }
    graph
}

/// Whether `to` is reachable from `from`.
fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut next = vec![from.to_string()];
    while let Some(m) = next.pop() {
        for n in graph.get(&m).into_iter().flatten() {
            if n == to {
                return true;
            }
            if seen.insert(n.clone()) {
                next.push(n.clone());
            }
        }
    }
    false
}

#[test]
fn no_folder_imports_one_that_imports_it_back() {
    let graph = imports();
    assert!(
        graph
            .get("api")
            .is_some_and(|i| i.contains("core") && i.contains("engine")),
        "the scan found too little: {graph:?}"
    );
    let circles: Vec<String> = graph
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |t| (from, t)))
        .filter(|(from, to)| reaches(&graph, to, from))
        .map(|(from, to)| format!("{from} -> {to} -> ... -> {from}"))
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
    // Nothing below the doors imports the HTTP door.
    for (from, to) in &graph {
        if !["api", "cli", "startup"].contains(&from.as_str()) {
            assert!(!to.contains("api"), "{from} imports api: {to:?}");
        }
    }
}
