//! The README and docs/ link to each other and to files in the repository: every relative link
//! must name a file that exists, and every `#anchor` a heading of the page it points to (as
//! GitHub renders headings into anchors), so that nothing is lost when a page moves.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap_or_default();
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// `(target, line)` of every inline Markdown link outside code blocks.
fn links(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut in_code = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((after[..end].to_string(), n + 1));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let root = root();
    let mut pages = vec![root.join("README.md"), root.join("infra/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 8, "docs/ holds the reference pages: {docs:?}");
    pages.extend(docs);
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        for (target, line) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, frag) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a folder").join(file)
            };
            let place = format!("{}:{line}: ({target})", page.display());
            if !dest.exists() {
                broken.push(format!("{place}: no such file"));
                continue;
            }
            if let Some(a) = frag
                && dest.extension().is_some_and(|e| e == "md")
                && !anchors(&dest).contains(a)
            {
                broken.push(format!("{place}: no heading with that anchor"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_short_and_names_the_two_commands() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README");
    let lines = text.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: reference material goes to docs/"
    );
    assert!(text.contains("scripts/test"), "the test command");
    assert!(
        text.contains("cargo run -q -- ingest examples/dms"),
        "the main job"
    );
    // `cargo run` at the root picks a binary among every default member's (the functions have
    // theirs too): the CLI's package must name it, or the README's first command fails with
    // "could not determine which binary to run".
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let package = cargo
        .split("\n[")
        .find(|section| section.starts_with("package]"))
        .expect("[package] in Cargo.toml");
    assert!(
        package
            .lines()
            .any(|l| l.trim() == "default-run = \"dms2iceberg\""),
        "Cargo.toml's [package] needs `default-run = \"dms2iceberg\"` for the README's `cargo run`"
    );
    assert!(
        cargo.contains("[[bin]]\nname = \"dms2iceberg\""),
        "the CLI's binary is `dms2iceberg`"
    );
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(
        anchor(" Quick start (fresh machine: Rust toolchain, Python 3)"),
        "quick-start-fresh-machine-rust-toolchain-python-3"
    );
    assert_eq!(
        anchor("Exactly once: the applied-file record"),
        "exactly-once-the-applied-file-record"
    );
    assert_eq!(anchor("`dms2iceberg` on S3"), "dms2iceberg-on-s3");
}

/// The version users pin is the workspace's: the README names it, the changelog has its entry,
/// and every package takes it from the workspace (what `dms2iceberg --version` prints).
#[test]
fn the_readme_and_changelog_name_the_workspace_version() {
    let root = root();
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let mut in_workspace_package = false;
    let mut version = None;
    for line in cargo.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_workspace_package = line == "[workspace.package]";
            continue;
        }
        if in_workspace_package && let Some(v) = line.strip_prefix("version = ") {
            version = Some(v.trim_matches('"').to_string());
        }
    }
    let version = version.expect("[workspace.package] version in Cargo.toml");
    assert_eq!(
        env!("CARGO_PKG_VERSION"),
        version,
        "the CLI's version is the workspace's"
    );
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).expect("CHANGELOG.md");
    assert!(
        changelog
            .lines()
            .any(|l| l.starts_with(&format!("## {version} - "))),
        "CHANGELOG.md has no `## {version} - <date>` entry"
    );
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    assert!(
        readme.contains(&format!("dms2iceberg {version}"))
            && readme.contains(&format!("v{version}")),
        "README.md names the version ({version}) and its tag (v{version})"
    );
    assert!(
        root.join("LICENSE").exists(),
        "the LICENSE Cargo.toml names"
    );
}
