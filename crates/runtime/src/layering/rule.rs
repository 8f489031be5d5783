//! The layering rule, read from ARCHITECTURE.md's table of a crate and checked on its sources.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "lex.rs"]
mod lex;

use lex::{Token, tokens};

/// Everything in `manifest_dir`'s crate that breaks its layer table in ARCHITECTURE.md (found
/// in the nearest directory above): a module without a layer, a row naming no module, an import
/// of a layer above or, unless the table allows it, of the same layer. Empty when all is well.
pub fn check(manifest_dir: &Path, krate: &str) -> Vec<String> {
    let doc = manifest_dir.ancestors().map(|d| d.join("ARCHITECTURE.md")).find(|p| p.is_file());
    let doc = std::fs::read_to_string(doc.expect("no ARCHITECTURE.md above the crate")).unwrap();
    let src = manifest_dir.join("src");
    let sources = Crate::read(&src.join("lib.rs"), |path| std::fs::read_to_string(path).ok());
    match (Table::parse(&doc, krate), sources) {
        (Ok(table), Ok(sources)) => problems(&table, &sources, &src),
        (table, sources) => table.err().into_iter().chain(sources.err()).collect(),
    }
}

/// A crate's layer table: the ARCHITECTURE.md table whose header's second cell is
/// "`<crate>` modules", one row per layer from 0 up.
#[derive(Debug, Default)]
pub struct Table {
    /// Each module's layer; `crate` stands for the items lib.rs defines itself.
    layer: BTreeMap<String, usize>,
    /// Imports inside one layer that the row allows, written "`a` → `b`".
    beside: BTreeSet<(String, String)>,
    /// Layers whose modules may import each other, the row says "any": one cycle of modules.
    cycles: BTreeSet<usize>,
}

impl Table {
    /// Reads the table; each row is `| n | `a`, `b` | imports inside the layer | what |`, where
    /// the third cell is "—", "`a` → `b`, …" or starts with "any" (the modules are one cycle).
    pub fn parse(doc: &str, krate: &str) -> Result<Table, String> {
        let header = format!("`{krate}` modules");
        let mut lines = doc.lines().skip_while(|l| cells(l).get(1) != Some(&header.as_str())).skip(2);
        let mut table = Table::default();
        let mut row = 0;
        while let Some(line) = lines.next().filter(|l| l.starts_with('|')) {
            let bad = |what: &str| format!("ARCHITECTURE.md, {krate}'s layer {row}: {what}: {line}");
            let [number, modules, beside, ..] = cells(line)[..] else { return Err(bad("too few cells")) };
            if number.parse() != Ok(row) {
                return Err(bad("layers are numbered 0, 1, 2… in order"));
            }
            for module in list(modules).ok_or_else(|| bad("modules are `a`, `b`, … and nothing else"))? {
                if table.layer.insert(module.to_owned(), row).is_some() {
                    return Err(bad(&format!("`{module}` is in two layers")));
                }
            }
            if beside.starts_with("any") {
                table.cycles.insert(row);
            } else if beside != "—" {
                for edge in beside.split(", ") {
                    let pair = edge.split_once(" → ").and_then(|(a, b)| Some((list(a)?, list(b)?)));
                    let Some(([from], [to])) = pair.as_ref().map(|(a, b)| (&a[..], &b[..])) else {
                        return Err(bad("imports inside the layer are —, `a` → `b`, … or any"));
                    };
                    if table.layer.get(*from) != Some(&row) || table.layer.get(*to) != Some(&row) {
                        return Err(bad(&format!("`{from}` → `{to}` names a module of another layer")));
                    }
                    table.beside.insert((from.to_string(), to.to_string()));
                }
            }
            row += 1;
        }
        if row == 0 { Err(format!("ARCHITECTURE.md has no table headed | layer | {header} |")) } else { Ok(table) }
    }

    /// Whether module `from` may import module `to` (both in the table).
    fn allows(&self, from: &str, to: &str) -> bool {
        let (a, b) = (self.layer[from], self.layer[to]);
        let beside = (from.to_owned(), to.to_owned());
        b < a || from == to || (a == b && (self.cycles.contains(&a) || self.beside.contains(&beside)))
    }
}

/// A Markdown table row's cells, trimmed.
fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().strip_prefix('|').and_then(|l| l.strip_suffix('|'));
    inner.map_or_else(Vec::new, |l| l.split('|').map(str::trim).collect())
}

/// The names of "`a`, `b`", or `None` if the cell holds anything else.
fn list(cell: &str) -> Option<Vec<&str>> {
    cell.split(", ").map(|n| n.strip_prefix('`')?.strip_suffix('`').filter(|n| is_ident(n))).collect()
}

fn is_ident(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A crate's sources, walked from lib.rs along its `mod` declarations.
#[derive(Debug, Default)]
pub struct Crate {
    /// The top-level modules lib.rs declares, and `pub use other_crate as name` aliases
    /// (modules without sources here); test-only modules are left out.
    pub modules: BTreeSet<String>,
    /// Test-only top-level modules (`#[cfg(test)] mod x;`): neither checked nor layered.
    tests: BTreeSet<String>,
    /// What lib.rs's `use`s bind at the crate root: the top-level module they come from, or
    /// `None` from another crate.
    uses: BTreeMap<String, Option<String>>,
    /// Every path that leaves its top-level module: `crate::x` or `super::x` reaching the root.
    pub paths: Vec<RootPath>,
}

/// A path that names an item of the crate root: `crate::name`, or `super::…::name` from deep
/// enough; in a `{…}` group, one per name.
#[derive(Debug)]
pub struct RootPath {
    /// The file the path is in.
    pub file: PathBuf,
    /// The line the path is on.
    pub line: usize,
    /// The top-level module whose code holds the path.
    pub from: String,
    /// The first name after the root.
    pub name: String,
}

impl Crate {
    /// Walks the crate whose root is `lib`, reading each file with `read` (`None`: no such file).
    pub fn read(lib: &Path, read: impl Fn(&Path) -> Option<String>) -> Result<Crate, String> {
        let (mut krate, mut uses) = (Crate::default(), Vec::new());
        let mut files = vec![(lib.to_path_buf(), Vec::<String>::new(), false, true)];
        while let Some((file, module, test, owns_dir)) = files.pop() {
            let text = read(&file).ok_or_else(|| format!("cannot read {}", file.display()))?;
            let tokens = tokens(&text);
            let line = |at: usize| 1 + text[..at].matches('\n').count();
            // The inline `mod x {` blocks around a token: name, brace depth inside, test-only.
            let mut inline: Vec<(&str, usize, bool)> = Vec::new();
            let (mut depth, mut attr_test, mut attr_path) = (0, false, None);
            let mut k = 0;
            while k < tokens.len() {
                let (t, next) = (&tokens[k], tokens.get(k + 1).map_or("", |t| t.text));
                let here: Vec<String> = module.iter().cloned().chain(inline.iter().map(|m| m.0.into())).collect();
                if !t.doc && t.text == "#" && next == "[" {
                    let Some(end) = tokens[k..].iter().position(|t| t.text == "]").map(|n| k + n) else { break };
                    let inner: Vec<&str> = tokens[k + 2..end].iter().map(|t| t.text).collect();
                    attr_test |= inner == ["cfg", "(", "test", ")"];
                    if let ["path", "=", value] = inner[..] {
                        attr_path = Some(value.trim_matches('"').to_owned());
                    }
                    k = end + 1;
                    continue;
                }
                if !t.doc && t.text == "mod" && is_ident(next) {
                    let (name, kind) = (next, tokens.get(k + 2).map_or("", |t| t.text));
                    let test = test || attr_test || inline.iter().any(|m| m.2);
                    if here.is_empty() {
                        let top = if test { &mut krate.tests } else { &mut krate.modules };
                        top.insert(name.to_owned());
                    }
                    if kind == "{" {
                        inline.push((name, depth + 1, test));
                    } else if !(here.is_empty() && test) {
                        let dir = file.parent().unwrap().to_path_buf();
                        let dir = if owns_dir { dir } else { dir.join(file.file_stem().unwrap()) };
                        let dir = inline.iter().fold(dir, |d, m| d.join(m.0));
                        let (child, owns) = match attr_path.take() {
                            Some(p) if inline.is_empty() => (file.parent().unwrap().join(p), true),
                            Some(p) => (dir.join(p), true),
                            None if read(&dir.join(format!("{name}.rs"))).is_some() => {
                                (dir.join(format!("{name}.rs")), false)
                            }
                            None => (dir.join(name).join("mod.rs"), true),
                        };
                        files.push((child, [here.clone(), vec![name.to_owned()]].concat(), test, owns));
                    }
                }
                if !t.doc && !matches!(t.text, "pub" | "(" | "crate" | "super" | "in" | ")") {
                    (attr_test, attr_path) = (false, None);
                }
                match t.text {
                    "{" if !t.doc => depth += 1,
                    "}" if !t.doc => {
                        depth = depth.saturating_sub(1);
                        inline.pop_if(|m| m.1 == depth + 1);
                    }
                    "use" if !t.doc && here.is_empty() && depth == 0 => {
                        uses.extend(use_tree(&tokens, &mut (k + 1), (None, 0, "")));
                    }
                    "crate" | "super" if next == "::" && !matches!(tokens[k.saturating_sub(1)].text, "::" | "$") => {
                        for name in root_names(&tokens, k, here.len()) {
                            let from = here.first().cloned().unwrap_or_default();
                            let (file, line) = (file.clone(), line(t.at));
                            krate.paths.push(RootPath { file, line, from, name });
                        }
                    }
                    _ => {}
                }
                k += 1;
            }
        }
        // `pub use other_crate as name` makes a module without sources here.
        for (head, bound, segments) in uses {
            if segments == 1 && !krate.modules.contains(&head) {
                krate.modules.insert(bound);
            } else {
                krate.uses.insert(bound, krate.modules.contains(&head).then_some(head));
            }
        }
        krate.paths.retain(|p| !p.from.is_empty() && !krate.tests.contains(&p.from));
        Ok(krate)
    }

    /// The module of the table a root name belongs to: itself, the module lib.rs brings it in
    /// from, `crate` for lib.rs's own items; `None` for another crate's or a test-only module.
    pub fn owner(&self, name: &str) -> Option<String> {
        if self.modules.contains(name) {
            return Some(name.to_owned());
        }
        match self.uses.get(name) {
            Some(from) => from.clone(),
            None => (!self.tests.contains(name)).then(|| "crate".to_owned()),
        }
    }
}

/// The names a path starting at token `k` (`crate` or `super`) takes from the crate root, if it
/// reaches it from a module `depth` deep: `[x]` for `crate::x::…`, `[a, b]` for `crate::{a, b::c}`.
fn root_names(tokens: &[Token], mut k: usize, mut depth: usize) -> Vec<String> {
    if tokens[k].text == "crate" {
        depth = 0;
        k += 2;
    }
    while tokens.get(k).map(|t| t.text) == Some("super") && tokens.get(k + 1).map(|t| t.text) == Some("::") {
        depth = depth.saturating_sub(1);
        k += 2;
    }
    if depth > 0 || k >= tokens.len() {
        return Vec::new();
    }
    if tokens[k].text != "{" {
        return vec![tokens[k].text.to_owned()];
    }
    let (mut names, mut nesting, mut first) = (Vec::new(), 0, true);
    for t in &tokens[k..] {
        match t.text {
            "{" => nesting += 1,
            "}" if nesting == 1 => break,
            "}" => nesting -= 1,
            "," if nesting == 1 => first = true,
            name if nesting == 1 && first => {
                names.push(name.to_owned());
                first = false;
            }
            _ => {}
        }
    }
    names
}

/// The names a `use` tree starting at token `*k` binds, as (the path's first segment, the name
/// bound, how many segments the path has); `outer` is the path before a `{…}` group.
fn use_tree(tokens: &[Token], k: &mut usize, outer: (Option<&str>, usize, &str)) -> Vec<(String, String, usize)> {
    let text = |k: usize| tokens.get(k).map_or(";", |t| t.text);
    let mut bound = Vec::new();
    if text(*k) == "{" {
        *k += 1;
        while !matches!(text(*k), "}" | ";") {
            bound.extend(use_tree(tokens, k, outer));
            if text(*k) == "," {
                *k += 1;
            }
        }
        *k += 1;
        return bound;
    }
    let (mut head, mut segments, mut last) = outer;
    loop {
        match text(*k) {
            "{" => return use_tree(tokens, k, (head, segments, last)),
            "::" => {}
            "crate" | "self" if head.is_none() => {}
            "self" => {}
            name if is_ident(name) => {
                head.get_or_insert(name);
                last = name;
                segments += 1;
            }
            // A glob binds nothing known; anything else is not a path.
            _ => {
                *k += 1;
                return bound;
            }
        }
        *k += 1;
        if text(*k) != "::" && text(*k - 1) != "::" {
            break;
        }
    }
    let name = if text(*k) == "as" {
        *k += 2;
        text(*k - 1)
    } else {
        last
    };
    if let Some(head) = head {
        bound.push((head.to_owned(), name.to_owned(), segments));
    }
    bound
}

/// Everything wrong with `krate`'s modules and root paths against `table`; paths shown
/// relative to `src`.
pub fn problems(table: &Table, krate: &Crate, src: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for module in krate.modules.iter().filter(|m| !table.layer.contains_key(*m)) {
        found.push(format!("module `{module}` has no layer in ARCHITECTURE.md's table"));
    }
    for module in table.layer.keys().filter(|m| *m != "crate" && !krate.modules.contains(*m)) {
        found.push(format!("ARCHITECTURE.md's table lists `{module}`, which is no module of the crate"));
    }
    let mut used = BTreeSet::new();
    for path in &krate.paths {
        let Some(to) = krate.owner(&path.name).filter(|to| *to != path.from) else { continue };
        let at = format!("{}:{}", path.file.strip_prefix(src).unwrap_or(&path.file).display(), path.line);
        let (Some(a), Some(b)) = (table.layer.get(&path.from), table.layer.get(&to)) else {
            if to == "crate" {
                found.push(format!("{at}: `{}` names lib.rs's `{}`, and `crate` has no layer", path.from, path.name));
            }
            continue;
        };
        used.insert((path.from.clone(), to.clone()));
        if !table.allows(&path.from, &to) {
            let from = &path.from;
            let whose = if a == b {
                format!("its own layer, and the row has no `{from}` → `{to}`")
            } else {
                "a layer above".into()
            };
            found.push(format!("{at}: `{from}` (layer {a}) imports `{to}` (layer {b}), {whose}"));
        }
    }
    for (a, b) in table.beside.difference(&used) {
        found.push(format!("ARCHITECTURE.md's table allows `{a}` → `{b}`, which no import uses"));
    }
    for &layer in &table.cycles {
        let members: BTreeSet<&str> = table.layer.iter().filter(|m| *m.1 == layer).map(|m| m.0.as_str()).collect();
        let inside: Vec<(&str, &str)> = used
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .filter(|(a, b)| members.contains(a) && members.contains(b))
            .collect();
        let start = members.first().copied().unwrap_or_default();
        let forward = reach(start, &inside, false);
        let backward = reach(start, &inside, true);
        for m in members.iter().filter(|m| !forward.contains(*m) || !backward.contains(*m)) {
            found.push(format!("layer {layer} is one cycle in ARCHITECTURE.md, but `{m}` is not on `{start}`'s cycle"));
        }
    }
    found
}

/// The modules reachable from `start` along `edges` (or against them).
fn reach<'a>(start: &'a str, edges: &[(&'a str, &'a str)], against: bool) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::from([start]);
    let mut todo = vec![start];
    while let Some(m) = todo.pop() {
        for &(a, b) in edges {
            let (from, to) = if against { (b, a) } else { (a, b) };
            if from == m && seen.insert(to) {
                todo.push(to);
            }
        }
    }
    seen
}
