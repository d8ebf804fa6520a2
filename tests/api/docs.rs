//! The documents cannot drift from the code: every server flag is in the settings guide; every
//! protection kind, defence, dead-letter cause and preset is in the catalogue; every route of the
//! OpenAPI description is in the API guide; every relative link in `README.md` and `docs/`
//! resolves (to a file, and to a heading when it names one); the `--help` texts list every
//! preset and show `{n}` as written; the lab's module map names its files as they are.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use retrylab::compare::presets;
use retrylab::dlq::Cause;
use retrylab::retry::protection::ProtectionKind;
use serde_json::Value;

use crate::helpers::TestApp;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Each name that `doc` lacks in backquotes (`name`), the way the guides write code's words.
fn missing_from(doc: &str, names: impl IntoIterator<Item = String>) -> Vec<String> {
    names.into_iter().filter(|name| !doc.contains(&format!("`{name}`"))).collect()
}

#[test]
fn every_server_flag_is_in_the_settings_guide() {
    let guide = read("docs/settings.md");
    let command = retrylab::cli::command();
    let flags: Vec<String> = command
        .get_arguments()
        .filter_map(|arg| arg.get_long())
        .filter(|long| !["help", "version"].contains(long))
        .map(|long| format!("--{long}"))
        .collect();
    assert!(flags.len() > 40, "read the server's flags: {flags:?}");
    let missing = missing_from(&guide, flags);
    assert!(missing.is_empty(), "docs/settings.md lacks {missing:?}");
}

#[test]
fn every_protection_kind_cause_and_preset_is_in_the_catalogue() {
    let catalogue = read("docs/protections-and-defences.md") + &read("docs/story-and-chapters.md");
    let kinds = ProtectionKind::ALL.iter().map(|k| k.name().to_owned());
    let causes = Cause::all().map(|c| c.as_str().to_owned());
    let presets =
        presets::all().iter().flat_map(|p| std::iter::once(p.name.clone()).chain(p.aliases.clone()));
    let named = retrylab::compare::defences::named().into_iter().map(|(row, _)| row.name);
    let missing = missing_from(&catalogue, kinds.chain(causes).chain(presets).chain(named));
    assert!(missing.is_empty(), "docs/protections-and-defences.md lacks {missing:?}");
}

/// Every kind a `"kind"` in `value` may take.
fn kinds_under(value: &Value, found: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(kinds) = map.get("properties").and_then(|p| p["kind"]["enum"].as_array()) {
                found.extend(kinds.iter().filter_map(|k| k.as_str().map(str::to_owned)));
            }
            map.values().for_each(|v| kinds_under(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| kinds_under(v, found)),
        _ => {}
    }
}

async fn openapi() -> Value {
    let app = TestApp::spawn().await;
    let response = app.client.get(app.url("/api/openapi.json")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test]
async fn every_defence_setting_is_in_the_catalogue() {
    let description = openapi().await;
    let schemas = &description["components"]["schemas"];
    let mut names: BTreeSet<String> =
        schemas["Defences"]["properties"].as_object().unwrap().keys().cloned().collect();
    assert!(names.contains("deadline") && names.contains("admission"), "{names:?}");
    names.extend(
        schemas["Discipline"]["enum"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().to_owned()),
    );
    let mut limits = BTreeSet::new();
    kinds_under(&schemas["LimitSettings"], &mut limits);
    assert!(limits.contains("aimd"), "{limits:?}");
    names.extend(limits);
    let catalogue = read("docs/protections-and-defences.md");
    let missing = missing_from(&catalogue, names);
    assert!(missing.is_empty(), "docs/protections-and-defences.md lacks {missing:?}");
}

#[tokio::test]
async fn every_route_of_the_openapi_description_is_in_the_api_guide() {
    let description = openapi().await;
    let guide = read("docs/api.md");
    let mut routes = Vec::new();
    for (path, operations) in description["paths"].as_object().unwrap() {
        for method in operations.as_object().unwrap().keys() {
            routes.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    assert!(routes.len() > 20, "{routes:?}");
    let missing = missing_from(&guide, routes);
    assert!(missing.is_empty(), "docs/api.md lacks {missing:?}");
}

/// A heading's anchor as GitHub makes it: lowercased, punctuation dropped, spaces to hyphens,
/// and `-1`, `-2`, ... after a repeat.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose_lines(markdown) {
        let Some(heading) = line.strip_prefix('#') else { continue };
        let text = heading.trim_start_matches('#').trim();
        let slug: String = text
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// A markdown file's lines outside its code blocks (the fences left out too).
fn prose_lines(markdown: &str) -> impl Iterator<Item = &str> {
    let mut in_code = false;
    markdown.lines().filter(move |line| {
        if line.starts_with("```") {
            in_code = !in_code;
            return false;
        }
        !in_code
    })
}

/// The targets of a markdown file's links and images, outside code blocks.
fn links(markdown: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose_lines(markdown) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    found
}

#[test]
fn every_relative_link_in_the_readme_and_the_guides_resolves() {
    let mut files: Vec<PathBuf> = vec![root().join("README.md"), root().join("BENCHMARKS.md")];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    guides.sort();
    assert!(guides.len() >= 10, "{guides:?}");
    files.extend(guides.iter().cloned());
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (target, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let path = if target.is_empty() { file.clone() } else { file.parent().unwrap().join(target) };
            if !path.exists() {
                broken.push(format!("{}: {link} (no such file)", file.display()));
                continue;
            }
            if !anchor.is_empty() && path.extension().is_some_and(|e| e == "md") {
                let headings = anchors(&std::fs::read_to_string(&path).unwrap());
                if !headings.contains(anchor) {
                    broken.push(format!("{}: {link} (no such heading)", file.display()));
                }
            }
        }
    }
    assert!(checked > 30, "read the links: {checked}");
    assert!(broken.is_empty(), "broken links: {broken:#?}");
    // The index links every guide.
    let index = read("docs/README.md");
    for guide in &guides {
        let name = guide.file_name().unwrap().to_str().unwrap();
        if name != "README.md" {
            assert!(index.contains(&format!("]({name})")), "docs/README.md does not link {name}");
        }
    }
}

#[test]
fn the_readme_is_read_in_a_minute_and_benchmarks_say_where_things_stand() {
    let readme = read("README.md");
    assert!(readme.lines().count() <= 120, "README.md has {} lines", readme.lines().count());
    let first_screen: String = readme.lines().take(40).collect::<Vec<_>>().join("\n");
    assert!(first_screen.contains("cargo run") && first_screen.contains("cargo test"), "{first_screen}");
    // CI runs the README's test command.
    assert!(read(".ci/run").lines().any(|line| line.trim() == "cargo test --locked"));
    let benchmarks = read("BENCHMARKS.md");
    assert!(benchmarks.lines().count() <= 300, "BENCHMARKS.md has {} lines", benchmarks.lines().count());
}

fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_retrylab")).args(args).output().unwrap();
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn compare_help_lists_every_preset_and_check_help_shows_its_placeholder() {
    let compare = help(&["compare", "--help"]).split_whitespace().collect::<Vec<_>>().join(" ");
    let policy = compare.split("--policy <POLICIES>").last().unwrap();
    let listed = policy.split("A preset (").nth(1).unwrap().split(';').next().unwrap();
    let listed: BTreeSet<&str> = listed.split(", ").collect();
    let presets: BTreeSet<&str> = presets::all().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(listed, presets, "compare --help (left) against the presets table (right)");
    let check = help(&["check", "--help"]);
    assert!(check.contains("each `{n}` is replaced with a number"), "{check}");
}

#[test]
fn the_lab_module_map_names_its_files_as_they_are() {
    let header: String =
        read("src/lab/mod.rs").lines().take_while(|l| l.starts_with("//!")).collect::<Vec<_>>().join(" ");
    let named: BTreeSet<String> = header
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| !word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_owned)
        .collect();
    let files: BTreeSet<String> = std::fs::read_dir(root().join("src/lab"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().trim_end_matches(".rs").to_owned())
        .filter(|name| name != "mod")
        .collect();
    assert_eq!(named, files, "src/lab/mod.rs's map (left) against src/lab's files (right)");
}
