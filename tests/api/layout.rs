//! docs/architecture.md's "How it is built" lists what each module uses; this reads the `use crate::...`
//! lines (and inline `crate::` paths) of `src/`, tests aside, and fails when the two disagree,
//! as `pages` checks the page's modulepreload list against the scripts' imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// What each top-level module of `src/` names of the others, read from its files up to their
/// first `#[cfg(test)]`.
fn code_graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = Graph::new();
    for path in files_under(&src) {
        let relative = path.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
        if relative == "lib.rs" || relative == "main.rs" || !relative.ends_with(".rs") {
            continue;
        }
        let module = relative.split('/').next().unwrap().trim_end_matches(".rs").to_owned();
        let uses = graph.entry(module.clone()).or_default();
        for line in code_lines(&path) {
            for (at, _) in line.match_indices("crate::") {
                let name: String =
                    line[at + 7..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
                if !name.is_empty() && name != module {
                    uses.insert(name);
                }
            }
        }
    }
    graph
}

/// Every file below `dir`.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

/// A file's code, its tests aside: its lines up to its first `#[cfg(test)]`, trimmed, comments
/// left out.
fn code_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let code = text.lines().map(str::trim).take_while(|line| !line.starts_with("#[cfg(test)]"));
    code.filter(|line| !line.starts_with("//")).map(str::to_owned).collect()
}

/// The architecture guide's list: a module's line, then `-> what it uses` (or `-> nothing of ours`).
fn guide_graph() -> Graph {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    let guide = std::fs::read_to_string(path).unwrap();
    let section =
        guide.split("## How it is built").nth(1).expect("docs/architecture.md has \"How it is built\"");
    let block = section.split("```").nth(1).expect("a code block in \"How it is built\"");
    let mut graph = Graph::new();
    let mut current = None;
    for line in block.lines().skip(1) {
        if let Some(uses) = line.trim().strip_prefix("->") {
            let module = current.clone().expect("a `->` line follows its module's line");
            let uses = uses.trim();
            let uses: BTreeSet<String> = match uses {
                "nothing of ours" => BTreeSet::new(),
                _ => uses.split(',').map(|u| u.trim().to_owned()).collect(),
            };
            assert!(graph.insert(module, uses).is_none(), "a module listed twice");
        } else if !line.starts_with(' ') && !line.is_empty() {
            current = Some(line.split_whitespace().next().unwrap().to_owned());
        }
    }
    graph
}

#[test]
fn the_architecture_guide_lists_what_each_module_uses() {
    let (code, guide) = (code_graph(), guide_graph());
    for (module, uses) in &code {
        let listed =
            guide.get(module).unwrap_or_else(|| panic!("docs/architecture.md does not list module {module}"));
        assert_eq!(
            listed, uses,
            "what {module} uses: docs/architecture.md (left) against its `use` lines (right)"
        );
    }
    let extra: Vec<&String> = guide.keys().filter(|m| !code.contains_key(*m)).collect();
    assert!(extra.is_empty(), "docs/architecture.md lists modules src/ does not have: {extra:?}");
}

#[test]
fn the_modules_form_layers() {
    let code = code_graph();
    assert!(code["config"].is_empty(), "config is a leaf: {:?}", code["config"]);
    assert!(!code["domain"].contains("downstream"), "domain uses nothing of downstream");
    for (module, uses) in &code {
        if !["cli", "server"].contains(&module.as_str()) {
            assert!(!uses.contains("server"), "{module} calls the composition root");
        }
    }
    // No circle: take away modules that use nothing left, until none remain.
    let mut left = code.clone();
    while !left.is_empty() {
        let leaves: Vec<String> = left
            .iter()
            .filter(|(_, uses)| uses.iter().all(|u| !left.contains_key(u)))
            .map(|(m, _)| m.clone())
            .collect();
        assert!(!leaves.is_empty(), "an import circle among {:?}", left.keys().collect::<Vec<_>>());
        for leaf in leaves {
            left.remove(&leaf);
        }
    }
}

#[test]
fn the_retry_math_and_the_endpoint_run_on_no_runtime_and_no_http_stack() {
    for module in ["retry", "downstream"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(module);
        let code: Vec<(std::path::PathBuf, String)> = files_under(&dir)
            .into_iter()
            .flat_map(|file| code_lines(&file).into_iter().map(move |line| (file.clone(), line)))
            .collect();
        assert!(code.len() > 100, "read the code of src/{module}");
        for (file, line) in &code {
            for name in ["tokio", "reqwest", "axum"] {
                assert!(!line.contains(&format!("{name}::")), "{} uses {name}: {line}", file.display());
            }
        }
    }
}
