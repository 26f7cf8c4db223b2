//! The layers of `shared/src`: which module stands on which. Each top-level module (a file or a
//! folder under `shared/src`) has a place in [`LAYERS`], lowest first, and may import only
//! modules below it; within one module imports are free. An import is a `use crate::…` (or
//! `use super::…` that climbs to the crate root) or a `crate::…` path in code; test code
//! (`#[cfg(test)]` items and the files they declare) may import anything, and comments and
//! strings are not code. An import of a name `lib.rs` re-exports (`crate::Error`) counts as one
//! of the module it comes from. docs/repository.md draws the same order.
//!
//! The check reads the sources as text and needs no part of the library: it builds in a second
//! and runs in the fast tier.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// Every top-level module of `shared/src`, lowest layer first, with why it stands there.
const LAYERS: &[(&str, &str)] = &[
    // The foundation: what every layer needs, needing nothing of them.
    ("error", "every module returns it; it needs nothing"),
    (
        "types",
        "column types, from the config's names to the files written",
    ),
    ("config", "settings in those types, which every step reads"),
    (
        "process",
        "how the process runs (allocator, work beside a task)",
    ),
    (
        "direct_io",
        "file I/O around the page cache, for spill and the local catalog",
    ),
    // What a table is made of.
    (
        "files",
        "the table's own files and the format rules (lineage, our keys and file names) every \
         layer above reads or writes a table through; needs only the foundation",
    ),
    (
        "catalog",
        "finds a table's current metadata, read through files",
    ),
    (
        "table",
        "a catalog's pointer with the metadata it names (LoadedTable)",
    ),
    // The pipeline's steps, each free to use the earlier ones.
    (
        "locate",
        "an object key's table, kind and order; what is known of its content",
    ),
    (
        "read",
        "an object's rows: needs locate's object, nothing of later steps",
    ),
    (
        "evolve",
        "the table's schema for a file's columns, bound by read's column limit",
    ),
    (
        "spill",
        "rows sorted on disk, for inputs larger than memory",
    ),
    (
        "dedupe",
        "the last change per key of the rows read, in locate's order",
    ),
    (
        "lookup",
        "where the table holds each key, in the key order evolve defines",
    ),
    (
        "write",
        "data and delete files for what dedupe kept and lookup found",
    ),
    (
        "commit",
        "lands what write wrote as one snapshot, through the catalog",
    ),
    // What the library does.
    ("ops", "table operations strung from the steps and commit"),
    // The AWS edge, on top of everything.
    (
        "secrets",
        "credentials read at start (a REST catalog's), for aws",
    ),
    (
        "storage",
        "the traits the functions take (objects, parameters, dead letters): below both their \
         AWS implementation and the handlers",
    ),
    (
        "aws",
        "AWS clients: the catalogs, S3, and storage's traits implemented",
    ),
    (
        "lambda",
        "the two functions: handlers on storage's traits, aws's clients",
    ),
];

/// Imports allowed against the order, each with the reason. The check fails on an exception
/// no import needs any more, so that none outlives its reason.
const EXCEPTIONS: &[Exception] = &[];

struct Exception {
    /// Path under `shared/src`.
    file: &'static str,
    /// The module imported.
    target: &'static str,
    why: &'static str,
}

#[test]
fn shared_src_is_layered() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = sources(&src);
    let rank: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .map(|(i, (m, _))| (*m, i))
        .collect();
    let mut problems: Vec<String> = Vec::new();

    let units: BTreeSet<String> = files.keys().filter_map(|f| unit_of(f)).collect();
    for u in &units {
        if !rank.contains_key(u.as_str()) {
            problems.push(format!(
                "shared/src/{u}: a module LAYERS does not place; add it"
            ));
        }
    }
    for (m, _) in LAYERS {
        if !units.contains(*m) {
            problems.push(format!(
                "LAYERS names `{m}`, which shared/src does not have"
            ));
        }
    }

    let lib = Code::parse(&files[Path::new("lib.rs")], &[]);
    let root_names = root_reexports(&lib, &rank.keys().copied().collect());
    let test_files = test_only_files(&files);
    let mut used_exceptions = BTreeSet::new();
    for (file, text) in &files {
        let Some(unit) = unit_of(file) else { continue };
        if test_files.contains(file) {
            continue;
        }
        let code = Code::parse(text, &module_path(file));
        for import in &code.imports {
            let target = match import.path.first() {
                None => continue,
                Some(first) if rank.contains_key(first.as_str()) => first.clone(),
                Some(first) => match root_names.get(first) {
                    Some(origin) => origin.clone(),
                    None => {
                        problems.push(format!(
                            "shared/src/{}:{}: `crate::{}`: not a module LAYERS places, nor a \
                             name lib.rs re-exports",
                            file.display(),
                            import.line,
                            import.path.join("::")
                        ));
                        continue;
                    }
                },
            };
            let (Some(&from), Some(&to)) = (rank.get(unit.as_str()), rank.get(target.as_str()))
            else {
                continue;
            };
            if to < from || target == unit {
                continue;
            }
            let file_name = file.to_string_lossy();
            if let Some(i) = EXCEPTIONS
                .iter()
                .position(|e| e.file == file_name && e.target == target)
            {
                used_exceptions.insert(i);
                continue;
            }
            problems.push(format!(
                "shared/src/{}:{}: {unit} imports `crate::{}`, but {target} stands above {unit} \
                 in LAYERS (move the name down, or the import up)",
                file.display(),
                import.line,
                import.path.join("::")
            ));
        }
    }
    for (i, e) in EXCEPTIONS.iter().enumerate() {
        if !used_exceptions.contains(&i) {
            problems.push(format!(
                "EXCEPTIONS allows {} -> {} ({}), which no import needs any more: remove the \
                 entry",
                e.file, e.target, e.why
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the import graph of shared/src is not layered:\n{}",
        problems.join("\n")
    );
}

/// Longest a source file of `shared/src` may be: a file that outgrows it holds more than one
/// concept (docs/repository.md says which file holds which). Test-only files are exempt.
const MAX_LINES: usize = 1_000;

#[test]
fn no_source_file_is_over_the_line_cap() {
    let files = sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let test_files = test_only_files(&files);
    let long: Vec<String> = files
        .iter()
        .filter(|(f, _)| !test_files.contains(*f))
        .map(|(f, text)| (f, text.lines().count()))
        .filter(|(_, n)| *n > MAX_LINES)
        .map(|(f, n)| format!("shared/src/{}: {n} lines", f.display()))
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines (split by concept; a `#[cfg(test)] mod tests` can move to its \
         own file):\n{}",
        long.join("\n")
    );
}

/// Every `.rs` file under `dir`, by path relative to it.
fn sources(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let rel = path.strip_prefix(dir).expect("under src").to_path_buf();
                out.insert(rel, text);
            }
        }
    }
    out
}

/// The top-level module a file belongs to (`files/cost.rs`: `files`); `None` for `lib.rs`.
fn unit_of(file: &Path) -> Option<String> {
    let first = file.components().next()?.as_os_str().to_str()?;
    match first.strip_suffix(".rs") {
        Some("lib") => None,
        Some(m) => Some(m.to_string()),
        None => Some(first.to_string()),
    }
}

/// The module path of a file (`files/mod.rs`: `[files]`, `files/cost.rs`: `[files, cost]`).
fn module_path(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// Files declared by `#[cfg(test)] mod x;`: test code, free to import anything.
fn test_only_files(files: &BTreeMap<PathBuf, String>) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for (file, text) in files {
        let dir: PathBuf = module_path(file).iter().collect();
        for m in Code::parse(text, &[]).test_modules {
            out.insert(dir.join(format!("{m}.rs")));
            out.insert(dir.join(&m).join("mod.rs"));
        }
    }
    // A test module's own children are test code too.
    loop {
        let more: Vec<PathBuf> = files
            .keys()
            .filter(|f| !out.contains(*f))
            .filter(|f| {
                out.iter().any(|t| {
                    let dir: PathBuf = module_path(t).iter().collect();
                    f.starts_with(&dir) && dir.components().count() > 0 && *f != t
                })
            })
            .cloned()
            .collect();
        if more.is_empty() {
            return out;
        }
        out.extend(more);
    }
}

/// What `lib.rs` re-exports at the crate root (its `use` paths start there, with or without
/// `crate::`): name -> the module of `modules` it comes from.
fn root_reexports(lib: &Code, modules: &BTreeSet<&str>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for u in &lib.uses {
        let path = match u.path.first().map(String::as_str) {
            Some("crate") | Some("self") => &u.path[1..],
            _ => &u.path[..],
        };
        if let (Some(first), Some(name)) = (path.first(), u.name.as_ref())
            && modules.contains(first.as_str())
        {
            out.insert(name.clone(), first.clone());
        }
    }
    out
}

/// An import found in a file: the path from the crate root, and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Import {
    path: Vec<String>,
    line: usize,
}

/// One leaf of a `use` tree: its path as written and the name it binds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Use {
    path: Vec<String>,
    name: Option<String>,
}

/// What a file's code (test code, comments and strings left out) imports.
#[derive(Debug, Default)]
struct Code {
    /// `crate::` and root-reaching `super::` paths, in `use` lines and in code.
    imports: Vec<Import>,
    /// Leaves of every `use` tree (for lib.rs's re-exports).
    uses: Vec<Use>,
    /// Modules declared `#[cfg(test)] mod x;`.
    test_modules: Vec<String>,
}

impl Code {
    /// `module`: the file's module path, which `super::` climbs from.
    fn parse(text: &str, module: &[String]) -> Code {
        let mut code = Code::default();
        let (text, test_modules) = without_tests(&blank_comments_and_strings(text));
        code.test_modules = test_modules;
        let chars: Vec<char> = text.chars().collect();
        let line_of = |at: usize| chars[..at].iter().filter(|c| **c == '\n').count() + 1;
        let mut i = 0;
        while i < chars.len() {
            if !starts_word(&chars, i) {
                i += 1;
                continue;
            }
            if word_at(&chars, i, "use") {
                let end = (i..chars.len())
                    .find(|&j| chars[j] == ';')
                    .unwrap_or(chars.len());
                let tokens = tokens(&chars, i + 3, end);
                let mut leaves = Vec::new();
                use_tree(&tokens, &mut 0, &[], &mut leaves);
                for (path, name, at) in leaves {
                    if let Some(path) = from_root(&path, module) {
                        code.imports.push(Import {
                            path,
                            line: line_of(at),
                        });
                    }
                    code.uses.push(Use { path, name });
                }
                i = end;
                continue;
            }
            if word_at(&chars, i, "crate") || word_at(&chars, i, "super") {
                let tokens = tokens(&chars, i, chars.len().min(i + 400));
                let mut path = Vec::new();
                let mut k = 0;
                while let Some(Token::Ident(s, _)) = tokens.get(k) {
                    path.push(s.clone());
                    if tokens.get(k + 1) != Some(&Token::Colons) {
                        break;
                    }
                    k += 2;
                }
                if path.len() > 1
                    && let Some(path) = from_root(&path, module)
                {
                    code.imports.push(Import {
                        path,
                        line: line_of(i),
                    });
                }
                i += path.iter().map(|s| s.len() + 2).sum::<usize>().max(1);
                continue;
            }
            i += 1;
        }
        code
    }
}

/// `path` from the crate root, if it starts there (`crate::`) or climbs there (`super::`); a
/// path within the file's own top-level module, or from another crate, is `None`.
fn from_root(path: &[String], module: &[String]) -> Option<Vec<String>> {
    let rooted = match path.first().map(String::as_str) {
        Some("crate") => Some(path[1..].to_vec()),
        Some("super") | Some("self") => {
            let mut at = module.to_vec();
            let mut rest = path;
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        at.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
            // Still inside a top-level module: not an import between modules.
            if !at.is_empty() {
                return None;
            }
            Some(rest.to_vec())
        }
        _ => None,
    };
    rooted.filter(|p| !p.is_empty())
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// An identifier and the char index it starts at.
    Ident(String, usize),
    Colons,
    Open,
    Close,
    Comma,
    Star,
}

fn tokens(chars: &[char], from: usize, to: usize) -> Vec<Token> {
    let mut out = Vec::new();
    let mut i = from;
    while i < to {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < to && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push(Token::Ident(
                word.trim_start_matches("r#").to_string(),
                start,
            ));
            continue;
        }
        match c {
            ':' if chars.get(i + 1) == Some(&':') => {
                out.push(Token::Colons);
                i += 1;
            }
            '{' => out.push(Token::Open),
            '}' => out.push(Token::Close),
            ',' => out.push(Token::Comma),
            '*' => out.push(Token::Star),
            c if c.is_whitespace() => {}
            // A path ends at anything else.
            _ => break,
        }
        i += 1;
    }
    out
}

/// The leaves of a `use` tree as (path, name bound, char index of the last segment).
fn use_tree(
    tokens: &[Token],
    k: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Option<String>, usize)>,
) {
    let mut path = prefix.to_vec();
    let mut at = 0;
    if tokens.get(*k) == Some(&Token::Colons) {
        *k += 1;
    }
    loop {
        match tokens.get(*k) {
            Some(Token::Ident(s, pos)) => {
                path.push(s.clone());
                at = *pos;
                *k += 1;
                match tokens.get(*k) {
                    Some(Token::Colons) => *k += 1,
                    Some(Token::Ident(kw, _)) if kw == "as" => {
                        let alias = match tokens.get(*k + 1) {
                            Some(Token::Ident(a, _)) => Some(a.clone()),
                            _ => None,
                        };
                        *k += 2;
                        finish(path, alias, at, out);
                        return;
                    }
                    _ => {
                        let name = path.last().cloned();
                        finish(path, name, at, out);
                        return;
                    }
                }
            }
            Some(Token::Open) => {
                *k += 1;
                while !matches!(tokens.get(*k), None | Some(Token::Close)) {
                    use_tree(tokens, k, &path, out);
                    if tokens.get(*k) == Some(&Token::Comma) {
                        *k += 1;
                    }
                }
                *k += 1;
                return;
            }
            Some(Token::Star) => {
                *k += 1;
                finish(path, None, at, out);
                return;
            }
            _ => return,
        }
    }
}

/// One leaf: `a::b::self` is `a::b`, bound as `b`.
fn finish(
    mut path: Vec<String>,
    name: Option<String>,
    at: usize,
    out: &mut Vec<(Vec<String>, Option<String>, usize)>,
) {
    let mut name = name;
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
        if name.as_deref() == Some("self") {
            name = path.last().cloned();
        }
    }
    out.push((path, name, at));
}

fn starts_word(chars: &[char], i: usize) -> bool {
    i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == '$')
}

fn word_at(chars: &[char], i: usize, word: &str) -> bool {
    let w: Vec<char> = word.chars().collect();
    chars.len() >= i + w.len()
        && chars[i..i + w.len()] == w[..]
        && chars
            .get(i + w.len())
            .is_none_or(|c| !(c.is_alphanumeric() || *c == '_'))
}

/// `text` with comments, string and char literals blanked (newlines kept, so lines still count).
fn blank_comments_and_strings(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = c.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for x in out.iter_mut().take(to).skip(from) {
            if *x != '\n' {
                *x = ' ';
            }
        }
    };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let ident_before = i > 0 && ident(c[i - 1]);
        // `b'x'`: a byte literal, whose `b` is not an identifier before it.
        let byte_prefix = i > 0 && c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]));
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            let end = (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len());
            blank(&mut out, i, end);
            i = end;
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 1;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some((hashes, body)) = raw_string_at(&c, i).filter(|_| !ident_before) {
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let end = (body..c.len())
                .find(|&j| c[j..].starts_with(&close))
                .map_or(c.len(), |j| j + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c[i] == '\'' && (!ident_before || byte_prefix) {
            // A char literal ('x', '\n', '\'', '\u{..}'), not a lifetime ('a).
            let end = if c.get(i + 1) == Some(&'\\') {
                (i + 3..c.len()).find(|&j| c[j] == '\'')
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    blank(&mut out, i, e + 1);
                    i = e + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// At `i`, a raw string (`r"…"`, `r#"…"#`, `br"…"`): its `#`s and where its body starts.
fn raw_string_at(c: &[char], i: usize) -> Option<(usize, usize)> {
    let after_r = match (c.get(i), c.get(i + 1)) {
        (Some('r'), _) => i + 1,
        (Some('b'), Some('r')) => i + 2,
        _ => return None,
    };
    let hashes = c[after_r..].iter().take_while(|ch| **ch == '#').count();
    (c.get(after_r + hashes) == Some(&'"')).then_some((hashes, after_r + hashes + 1))
}

/// `text` (comments and strings blanked) with every `#[cfg(test)]` item blanked, and the names
/// of the modules declared `#[cfg(test)] mod x;`.
fn without_tests(text: &str) -> (String, Vec<String>) {
    let c: Vec<char> = text.chars().collect();
    let mut out = c.clone();
    let mut modules = Vec::new();
    let attr: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + attr.len() <= c.len() {
        if c[i..i + attr.len()] != attr[..] {
            i += 1;
            continue;
        }
        // The item after the attribute (and any more attributes): to its `;` or its block.
        let mut j = i + attr.len();
        let mut depth = 0i32;
        let item_start = j;
        let end = loop {
            let Some(&ch) = c.get(j) else { break c.len() };
            match ch {
                '[' | '(' => depth += 1,
                ']' | ')' => depth -= 1,
                ';' if depth == 0 => break j + 1,
                '{' if depth == 0 => {
                    let mut braces = 0;
                    let mut k = j;
                    while k < c.len() {
                        match c[k] {
                            '{' => braces += 1,
                            '}' => {
                                braces -= 1;
                                if braces == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        k += 1;
                    }
                    break (k + 1).min(c.len());
                }
                _ => {}
            }
            j += 1;
        };
        let item: String = c[item_start..end].iter().collect();
        let words: Vec<&str> = item
            .split(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == ';'))
            .filter(|w| !w.is_empty())
            .collect();
        if let Some(p) = words.iter().position(|w| *w == "mod")
            && let Some(name) = words.get(p + 1)
            && let Some(name) = name.strip_suffix(';')
        {
            modules.push(name.to_string());
        }
        for x in out.iter_mut().take(end).skip(i) {
            if *x != '\n' {
                *x = ' ';
            }
        }
        i = end;
    }
    (out.into_iter().collect(), modules)
}

impl fmt::Display for Import {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: crate::{}", self.line, self.path.join("::"))
    }
}

/// The parser on its own.
mod parser {
    use super::*;

    fn imports(text: &str, module: &[&str]) -> Vec<String> {
        let module: Vec<String> = module.iter().map(|s| s.to_string()).collect();
        Code::parse(text, &module)
            .imports
            .iter()
            .map(|i| i.to_string())
            .collect()
    }

    #[test]
    fn use_lines_and_grouped_trees_expand_to_one_path_each() {
        let text = "use std::sync::Arc;\n\
                    use crate::error::{Error, Result};\n\
                    pub(crate) use crate::{\n    files::{self, deletes::FileDeletes},\n    write as w,\n};\n\
                    use crate::ops::*;\n";
        assert_eq!(
            imports(text, &["lookup"]),
            [
                "2: crate::error::Error",
                "2: crate::error::Result",
                "4: crate::files",
                "4: crate::files::deletes::FileDeletes",
                "5: crate::write",
                "7: crate::ops",
            ]
        );
    }

    #[test]
    fn paths_in_code_are_imports_and_macros_crate_is_not() {
        let text = "fn f() {\n    let x = crate::write::ROW_GROUP_ROWS as u64;\n    \
                    $crate::files::x();\n    pub(crate) fn g() {}\n}\n";
        assert_eq!(
            imports(text, &["files", "index"]),
            ["2: crate::write::ROW_GROUP_ROWS"]
        );
    }

    #[test]
    fn comments_strings_and_chars_are_not_code() {
        let text = "//! see [`crate::write`]\n\
                    /* crate::ops /* nested */ crate::lambda */\n\
                    const A: &str = \"crate::aws::x\";\n\
                    const B: &str = r#\"crate::aws::\"y\"#;\n\
                    const C: char = '{';\n\
                    fn f<'a>(x: &'a str) -> &'a str { x }\n\
                    const D: u8 = b'\"';\n\
                    const E: char = '\\'';\n\
                    use crate::error::Error;\n";
        assert_eq!(imports(text, &["files"]), ["9: crate::error::Error"]);
    }

    #[test]
    fn test_items_and_test_modules_are_left_out() {
        let text = "use crate::error::Result;\n\
                    #[cfg(test)]\nmod tests;\n\
                    #[cfg(test)]\n#[allow(dead_code)]\npub(crate) fn helper(x: Vec<(i32, u8)>) {\n    crate::ops::x();\n}\n\
                    #[cfg(test)]\nmod more {\n    use crate::lambda::Y;\n    fn z() { if true { } }\n}\n\
                    fn after() { crate::types::t(); }\n";
        let code = Code::parse(text, &["files".to_string()]);
        assert_eq!(code.test_modules, ["tests"]);
        let found: Vec<String> = code.imports.iter().map(|i| i.to_string()).collect();
        assert_eq!(found, ["1: crate::error::Result", "14: crate::types::t"]);
    }

    #[test]
    fn super_counts_only_when_it_climbs_out_of_its_module() {
        // In files/cost.rs `super::` is files; in evolve.rs it is the crate root.
        assert!(imports("use super::deletes::Targets;", &["files", "cost"]).is_empty());
        assert_eq!(
            imports("use super::read::MAX_COLUMNS;", &["evolve"]),
            ["1: crate::read::MAX_COLUMNS"]
        );
        assert_eq!(
            imports("fn f() { super::super::write::x(); }", &["files", "cost"]),
            ["1: crate::write::x"]
        );
    }

    #[test]
    fn lib_reexports_map_root_names_to_their_module() {
        let lib = Code::parse(
            "pub mod files;\npub use error::{Error, Result};\npub use crate::files::metadata::{metadata_io as io};\n",
            &[],
        );
        let names = root_reexports(&lib, &["error", "files"].into());
        assert_eq!(names.get("Error").map(String::as_str), Some("error"));
        assert_eq!(names.get("Result").map(String::as_str), Some("error"));
        assert_eq!(names.get("io").map(String::as_str), Some("files"));
        assert_eq!(names.len(), 3);
    }

    #[test]
    fn file_paths_map_to_modules() {
        assert_eq!(
            unit_of(Path::new("files/cost.rs")).as_deref(),
            Some("files")
        );
        assert_eq!(unit_of(Path::new("table.rs")).as_deref(), Some("table"));
        assert_eq!(unit_of(Path::new("lib.rs")), None);
        assert_eq!(module_path(Path::new("files/mod.rs")), ["files"]);
        assert_eq!(
            module_path(Path::new("ops/ingest/plan/write.rs")),
            ["ops", "ingest", "plan", "write"]
        );
    }
}
