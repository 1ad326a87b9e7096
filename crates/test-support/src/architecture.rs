//! The shape of the code, for the crates' architecture tests: a package's dependencies (its
//! manifest as `cargo metadata` reads it, the graph a build of it alone links as `cargo tree`
//! resolves it), and the import graph between the files of a crate's
//! `src/` (to find import circles).
//!
//! The import graph is read with `syn`, not by matching text: a file depends on another when it
//! uses an item the other defines, however it names it: `crate::x::Item`, `super::Item`, a
//! `use` (renamed, grouped, inside a function), a re-export at any depth (`crate::Item` where
//! `lib.rs` has `pub use x::Item`, `pub use self::x::*`), a path inside a macro's tokens. A
//! re-export alone is no dependency, a module named without an item is none, nor are comments,
//! attributes and `#[cfg(test)]` code. What counts as a circle is [`circles`]' rule: inside
//! every module, its submodules must not use each other in a circle.

// cargo metadata is run directly: these helpers check the build graph, not Warden behaviour.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Runs `cargo metadata` (resolved for the host, with `extra` arguments such as
/// `--no-default-features`) in `manifest_dir`.
pub fn metadata(manifest_dir: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "metadata".to_string(),
        "--format-version".into(),
        "1".into(),
        "--filter-platform".into(),
        host_triple(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args(&args)
        .current_dir(manifest_dir)
        .output()
        .unwrap_or_else(|e| panic!("cargo metadata does not run: {e}"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("cargo metadata printed no JSON: {e}"))
}

fn host_triple() -> String {
    let output = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .unwrap_or_else(|e| panic!("rustc does not run: {e}"));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap_or_else(|| panic!("rustc -vV names no host"))
        .to_string()
}

/// The packages `package` names as normal (non-dev, non-build) dependencies in its manifest.
pub fn direct_normal_dependencies(metadata: &serde_json::Value, package: &str) -> BTreeSet<String> {
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"] == package)
        .flat_map(|p| p["dependencies"].as_array().into_iter().flatten())
        .filter(|d| d["kind"].is_null())
        .filter_map(|d| d["name"].as_str().map(str::to_string))
        .collect()
}

/// The names of the packages `package` links (itself included) as `cargo tree` resolves it
/// with `extra` flags (e.g. `--no-default-features`), normal dependencies only. Unlike the
/// `resolve` of `cargo metadata`, which unifies features across the whole workspace, this is
/// the graph a build of `package` alone has: an optional dependency another member enables
/// (`warden-protocol`'s `openapi`, for `warden-api`) is in it only if this package enables it.
pub fn built_closure(manifest_dir: &str, package: &str, extra: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut args = vec![
        "tree", "--locked", "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}",
        "--target", "all",
    ];
    args.extend_from_slice(extra);
    let output = std::process::Command::new(cargo)
        .args(&args)
        .current_dir(manifest_dir)
        .output()
        .unwrap_or_else(|e| panic!("cargo tree does not run: {e}"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The packages of the workspace that depend on `package` (any kind of dependency).
pub fn dependents(metadata: &serde_json::Value, package: &str) -> BTreeSet<String> {
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.as_str())
        .collect();
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(id)))
        .filter(|p| {
            p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|d| d["name"] == package)
        })
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect()
}

/// Every `.rs` file under `dir`, recursively, sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
                .path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// One source file of a crate, a node of the import graph.
#[derive(Debug)]
struct SourceFile {
    /// The module path of the file's module (`worker::change_task`; `crate` for the root).
    module: String,
    /// The file, relative to `src`.
    relative: String,
}

/// One `use` leaf: `name` is bound to `path` (as written, relative to the module it is in).
#[derive(Debug, Clone)]
struct UseLeaf {
    name: String,
    path: Vec<String>,
    glob: bool,
    /// `pub`, `pub(crate)`, …: a re-export, which names an item without depending on it.
    exported: bool,
}

/// One module, inline or a file of its own.
#[derive(Debug, Default)]
struct Module {
    file: usize,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// The names the module defines itself (types, functions, constants, traits, macros, …).
    items: BTreeSet<String>,
    uses: Vec<UseLeaf>,
    /// Each path the module's code (outside tests) writes, as written.
    paths: Vec<Vec<String>>,
}

/// Where a path leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A module of the crate.
    Module(usize),
    /// An item defined in a module of the crate.
    Item(usize),
    /// Something outside the crate (or not resolved), with the last module of the crate the
    /// path went through when it named one explicitly (`crate::x::generated` → `x`).
    Outside(Option<usize>),
}

/// A crate's modules, read from its sources, with `use` bindings resolved the way rustc does
/// for the cases this code base writes: `crate::`, `super::`, `self::`, child modules, renames,
/// groups, re-exports at any depth and glob imports (`pub use x::*`). Macros are not expanded;
/// paths inside a macro's tokens are read as paths.
#[derive(Debug, Default)]
struct CrateModules {
    files: Vec<SourceFile>,
    modules: Vec<Module>,
}

/// True for `#[cfg(test)]`: test code is a leaf nothing else imports, so it cannot close a
/// circle of the code it tests, and it is left out.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| match &attr.meta {
        syn::Meta::List(list) => list.path.is_ident("cfg") && list.tokens.to_string() == "test",
        _ => false,
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name an item defines in its module's namespace.
fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// The leaves of a `use` tree under `prefix`.
fn use_leaves(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    exported: bool,
    out: &mut Vec<UseLeaf>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, exported, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let (name, path) = if n.ident == "self" {
                (prefix.last().cloned().unwrap_or_default(), prefix.clone())
            } else {
                let mut path = prefix.clone();
                path.push(n.ident.to_string());
                (n.ident.to_string(), path)
            };
            out.push(UseLeaf {
                name,
                path,
                glob: false,
                exported,
            });
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push(UseLeaf {
                name: r.rename.to_string(),
                path,
                glob: false,
                exported,
            });
        }
        syn::UseTree::Glob(_) => out.push(UseLeaf {
            name: String::new(),
            path: prefix.clone(),
            glob: true,
            exported,
        }),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_leaves(tree, prefix, exported, out);
            }
        }
    }
}

fn use_item_leaves(item: &syn::ItemUse) -> Vec<UseLeaf> {
    let mut leaves = Vec::new();
    // `use ::x` names an external crate.
    if item.leading_colon.is_none() {
        let exported = !matches!(item.vis, syn::Visibility::Inherited);
        use_leaves(&item.tree, &mut Vec::new(), exported, &mut leaves);
    }
    leaves
}

/// Collects the paths a piece of code writes (not its attributes, not test code), and the
/// `use` items inside function bodies; inline modules are left to their own walk.
#[derive(Default)]
struct CodePaths {
    paths: Vec<Vec<String>>,
    uses: Vec<UseLeaf>,
}

impl CodePaths {
    /// The paths in a macro's tokens: each identifier followed by `::identifier`s.
    fn token_paths(&mut self, tokens: proc_macro2::TokenStream) {
        let mut current: Vec<String> = Vec::new();
        let mut colons = 0;
        let flush = |current: &mut Vec<String>, paths: &mut Vec<Vec<String>>| {
            if !current.is_empty() {
                paths.push(std::mem::take(current));
            }
        };
        for tree in tokens {
            match tree {
                proc_macro2::TokenTree::Ident(ident) => {
                    if colons != 2 {
                        flush(&mut current, &mut self.paths);
                    }
                    current.push(ident.to_string());
                    colons = 0;
                }
                proc_macro2::TokenTree::Punct(p) if p.as_char() == ':' && !current.is_empty() => {
                    colons += 1;
                    if colons > 2 {
                        flush(&mut current, &mut self.paths);
                        colons = 0;
                    }
                }
                proc_macro2::TokenTree::Group(group) => {
                    flush(&mut current, &mut self.paths);
                    colons = 0;
                    self.token_paths(group.stream());
                }
                _ => {
                    flush(&mut current, &mut self.paths);
                    colons = 0;
                }
            }
        }
        flush(&mut current, &mut self.paths);
    }
}

impl<'ast> syn::visit::Visit<'ast> for CodePaths {
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test_only(item_attrs(item)) {
            return;
        }
        match item {
            syn::Item::Mod(_) => {}
            syn::Item::Use(u) => self.uses.extend(use_item_leaves(u)),
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            self.paths
                .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        syn::visit::visit_macro(self, mac);
        self.token_paths(mac.tokens.clone());
    }
}

impl CrateModules {
    /// Reads the crate whose root file is `root` (relative to `src`), following `mod`
    /// declarations; `read` gives a file's text by its path relative to `src`.
    fn read(root: &str, read: &dyn Fn(&Path) -> Option<String>) -> Result<Self, String> {
        let mut krate = CrateModules::default();
        let text = read(Path::new(root)).ok_or_else(|| format!("no {root}"))?;
        let file = syn::parse_file(&text).map_err(|e| format!("{root}: {e}"))?;
        krate.files.push(SourceFile {
            module: "crate".into(),
            relative: root.into(),
        });
        krate.modules.push(Module::default());
        krate.load(0, &file.items, Path::new(""), &[], read)?;
        Ok(krate)
    }

    /// Loads the items of `module`, whose submodules' files live in `dir`.
    fn load(
        &mut self,
        module: usize,
        items: &[syn::Item],
        dir: &Path,
        path: &[String],
        read: &dyn Fn(&Path) -> Option<String>,
    ) -> Result<(), String> {
        let mut code = CodePaths::default();
        for item in items {
            if is_test_only(item_attrs(item)) {
                continue;
            }
            if let Some(name) = item_name(item) {
                self.modules[module].items.insert(name);
            }
            match item {
                syn::Item::Use(u) => self.modules[module].uses.extend(use_item_leaves(u)),
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    let mut child_path = path.to_vec();
                    child_path.push(name.clone());
                    let child = self.modules.len();
                    self.modules.push(Module {
                        parent: Some(module),
                        file: self.modules[module].file,
                        ..Module::default()
                    });
                    self.modules[module].children.insert(name.clone(), child);
                    match &m.content {
                        Some((_, inner)) => {
                            self.load(child, inner, &dir.join(&name), &child_path, read)?;
                        }
                        None => {
                            let flat = dir.join(format!("{name}.rs"));
                            let nested = dir.join(&name).join("mod.rs");
                            let (relative, text) = match read(&flat) {
                                Some(text) => (flat, text),
                                None => {
                                    let text = read(&nested).ok_or_else(|| {
                                        format!("no file for module {}", child_path.join("::"))
                                    })?;
                                    (nested, text)
                                }
                            };
                            let parsed = syn::parse_file(&text)
                                .map_err(|e| format!("{}: {e}", relative.display()))?;
                            self.modules[child].file = self.files.len();
                            self.files.push(SourceFile {
                                module: child_path.join("::"),
                                relative: relative.display().to_string(),
                            });
                            self.load(child, &parsed.items, &dir.join(&name), &child_path, read)?;
                        }
                    }
                }
                _ => syn::visit::Visit::visit_item(&mut code, item),
            }
        }
        let own = &mut self.modules[module];
        own.paths.extend(code.paths);
        // A `use` in a function body binds in that body only; for where it leads, the module
        // is near enough.
        own.uses.extend(code.uses);
        Ok(())
    }

    /// What `name` means in `module`: a child module, an item of its own, or what a `use`
    /// binding or glob import leads to; `None` when the crate does not define the name there.
    fn lookup(&self, module: usize, name: &str, depth: usize) -> Option<Target> {
        let m = &self.modules[module];
        if let Some(child) = m.children.get(name) {
            return Some(Target::Module(*child));
        }
        if m.items.contains(name) {
            return Some(Target::Item(module));
        }
        if depth > 24 {
            return None;
        }
        if let Some(leaf) = m.uses.iter().find(|u| !u.glob && u.name == name) {
            return Some(self.resolve(module, &leaf.path, depth + 1));
        }
        m.uses.iter().filter(|u| u.glob).find_map(|glob| {
            match self.resolve(module, &glob.path, depth + 1) {
                Target::Module(from) if from != module => self.lookup(from, name, depth + 1),
                _ => None,
            }
        })
    }

    /// Where `path`, written in `module`, leads.
    fn resolve(&self, module: usize, path: &[String], depth: usize) -> Target {
        let Some((first, rest)) = path.split_first() else {
            return Target::Outside(None);
        };
        let mut target = match first.as_str() {
            "crate" => Target::Module(0),
            "self" => Target::Module(module),
            "super" => self.modules[module]
                .parent
                .map_or(Target::Outside(None), Target::Module),
            _ => self
                .lookup(module, first, depth)
                .unwrap_or(Target::Outside(None)),
        };
        for segment in rest {
            let Target::Module(current) = target else {
                break;
            };
            target = match segment.as_str() {
                "self" => Target::Module(current),
                "super" => self.modules[current]
                    .parent
                    .map_or(Target::Outside(None), Target::Module),
                _ => self
                    .lookup(current, segment, depth)
                    .unwrap_or(Target::Outside(Some(current))),
            };
        }
        target
    }

    /// The file a path written in `module` depends on, if it is another file of the crate.
    fn file_of(&self, module: usize, path: &[String]) -> Option<usize> {
        let file = match self.resolve(module, path, 0) {
            Target::Item(defined) => self.modules[defined].file,
            Target::Outside(Some(passed)) => self.modules[passed].file,
            Target::Module(_) | Target::Outside(None) => return None,
        };
        (file != self.modules[module].file).then_some(file)
    }

    /// One edge per pair of files, with the first reference found.
    fn edges(&self) -> Vec<Edge> {
        let mut found: BTreeMap<(usize, usize), String> = BTreeMap::new();
        for (index, module) in self.modules.iter().enumerate() {
            let from = module.file;
            // A private `use` of an item is a dependency even when the code only calls a
            // trait's methods through it; a re-export alone is not (what it names resolves to
            // the file that defines it).
            for leaf in module.uses.iter().filter(|u| !u.exported && !u.glob) {
                if let Some(to) = self.file_of(index, &leaf.path) {
                    found
                        .entry((from, to))
                        .or_insert_with(|| format!("use {}", leaf.path.join("::")));
                }
            }
            for path in &module.paths {
                if let Some(to) = self.file_of(index, path) {
                    found.entry((from, to)).or_insert_with(|| {
                        let written = path.join("::");
                        match module.uses.iter().find(|u| !u.glob && u.name == path[0]) {
                            Some(leaf) if path[0] != "self" && path[0] != "super" => {
                                format!("{written} (use {})", leaf.path.join("::"))
                            }
                            _ => written,
                        }
                    });
                }
            }
        }
        found
            .into_iter()
            .map(|((from, to), reference)| Edge {
                from: self.files[from].module.clone(),
                to: self.files[to].module.clone(),
                file: self.files[from].relative.clone(),
                reference,
            })
            .collect()
    }
}

/// One edge of the import graph: the file of module `from` uses an item defined in the file of
/// module `to` (module paths such as `worker::change_task`; `crate` is the root file), in
/// `file` with `reference`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub file: String,
    pub reference: String,
}

impl Edge {
    /// The top-level module `from` is in (`worker` for `worker::change_task`).
    pub fn from_top(&self) -> &str {
        top(&self.from)
    }

    /// The top-level module `to` is in.
    pub fn to_top(&self) -> &str {
        top(&self.to)
    }
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// The import graph between the files of a crate, from its sources as `read` gives them by
/// path relative to `src` (its roots `lib.rs` and `main.rs`, whichever exist).
pub fn edges_of(read: &dyn Fn(&Path) -> Option<String>) -> Result<Vec<Edge>, String> {
    let mut edges = Vec::new();
    let mut roots = 0;
    for root in ["lib.rs", "main.rs"] {
        if read(Path::new(root)).is_none() {
            continue;
        }
        roots += 1;
        edges.extend(CrateModules::read(root, read)?.edges());
    }
    if roots == 0 {
        return Err("neither lib.rs nor main.rs".into());
    }
    edges.sort();
    edges.dedup();
    Ok(edges)
}

/// The import graph between the files of the crate whose sources are `src`: an edge wherever
/// a file uses an item defined in another file, through whatever re-exports it was named.
pub fn module_edges(src: &Path) -> Vec<Edge> {
    edges_of(&|relative| std::fs::read_to_string(src.join(relative)).ok())
        .unwrap_or_else(|e| panic!("cannot read the crate under {}: {e}", src.display()))
}

/// The import circles among `edges`, module by module: inside each module (the crate too),
/// each of its submodules is a unit (its file with everything under it) and the units must not
/// refer to each other in a circle. The module's own file (`lib.rs`, `mod.rs`, `x.rs` for
/// `x/`) is its face: it may use its submodules and they what it defines (its error type, its
/// trait) without that counting as a circle. Each circle comes with the file edges in it.
pub fn circles(edges: &[Edge]) -> Vec<Vec<Edge>> {
    let segments = |module: &str| -> Vec<String> {
        if module == "crate" {
            Vec::new()
        } else {
            module.split("::").map(str::to_string).collect()
        }
    };
    // Every module that has submodules, by its path.
    let mut parents: BTreeSet<Vec<String>> = BTreeSet::new();
    for edge in edges {
        for module in [&edge.from, &edge.to] {
            let path = segments(module);
            for len in 0..path.len() {
                parents.insert(path[..len].to_vec());
            }
        }
    }
    let mut found = Vec::new();
    for parent in &parents {
        // The unit under `parent` a file belongs to, if it is strictly under it.
        let unit = |module: &str| -> Option<String> {
            let path = segments(module);
            (path.len() > parent.len() && path.starts_with(parent))
                .then(|| path[parent.len()].clone())
        };
        let units: Vec<(String, String, &Edge)> = edges
            .iter()
            .filter_map(|e| Some((unit(&e.from)?, unit(&e.to)?, e)))
            .filter(|(from, to, _)| from != to)
            .collect();
        let pairs: Vec<(&str, &str)> = units
            .iter()
            .map(|(from, to, _)| (from.as_str(), to.as_str()))
            .collect();
        for members in strongly_connected(&pairs) {
            found.push(
                units
                    .iter()
                    .filter(|(from, to, _)| {
                        members.contains(from.as_str()) && members.contains(to.as_str())
                    })
                    .map(|(_, _, e)| (*e).clone())
                    .collect(),
            );
        }
    }
    found
}

/// The sets of two or more nodes of the graph `pairs` in which each node reaches every other.
fn strongly_connected<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<BTreeSet<&'a str>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in pairs {
        graph.entry(from).or_default().insert(to);
        graph.entry(to).or_default();
    }
    let reach = |start: &str| -> BTreeSet<&str> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            for next in graph.get(node).into_iter().flatten() {
                if seen.insert(*next) {
                    stack.push(next);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<&str>> =
        graph.keys().map(|node| (*node, reach(node))).collect();
    let mut sets = Vec::new();
    let mut placed = BTreeSet::new();
    for node in graph.keys() {
        if placed.contains(node) {
            continue;
        }
        let members: BTreeSet<&str> = graph
            .keys()
            .copied()
            .filter(|other| {
                other == node || (reaches[node].contains(*other) && reaches[other].contains(*node))
            })
            .collect();
        if members.len() < 2 {
            continue;
        }
        placed.extend(members.iter().copied());
        sets.push(members);
    }
    sets
}

/// The edges of a circle, one a line, for a failure message.
pub fn describe(circle: &[Edge]) -> String {
    circle
        .iter()
        .map(|e| format!("  {} -> {} ({}: {})", e.from, e.to, e.file, e.reference))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A circle's short name: the module it is in and its units (`worker: change_task <->
/// maintain_task`; `crate` for the crate's top-level modules).
pub fn circle_name(circle: &[Edge]) -> String {
    let paths: Vec<Vec<&str>> = circle
        .iter()
        .flat_map(|e| [&e.from, &e.to])
        .map(|m| m.split("::").filter(|s| *s != "crate").collect())
        .collect();
    let mut common = paths.first().cloned().unwrap_or_default();
    for path in &paths {
        let shared = common.iter().zip(path).take_while(|(a, b)| a == b).count();
        common.truncate(shared);
    }
    let units: BTreeSet<&str> = paths
        .iter()
        .filter_map(|p| p.get(common.len()).copied())
        .collect();
    let module = if common.is_empty() {
        "crate".to_string()
    } else {
        common.join("::")
    };
    format!(
        "{module}: {}",
        units.into_iter().collect::<Vec<_>>().join(" <-> ")
    )
}

/// Panics with the circles when the files under `src` import each other in a circle (see
/// [`circles`]); returns the edges otherwise (for further checks).
pub fn assert_no_import_circles(src: &Path) -> Vec<Edge> {
    let edges = module_edges(src);
    let circles = circles(&edges);
    if !circles.is_empty() {
        let text: Vec<String> = circles
            .iter()
            .map(|c| format!("{}\n{}", circle_name(c), describe(c)))
            .collect();
        panic!(
            "files under {} import each other in a circle:\n{}",
            src.display(),
            text.join("\n\n")
        );
    }
    edges
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `warden-time` is the one place that turns instants into calendar dates and back: no
    /// other crate's code carries the day-count arithmetic of such a conversion (the constants
    /// of the civil-calendar algorithms every hand-written copy uses).
    #[test]
    fn no_crate_but_warden_time_computes_calendar_dates() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let hallmarks = [
            "719_468",
            "719468",
            "146_097",
            "146097",
            "36_524",
            "36524",
            "days_from_civil",
            "civil_from_days",
        ];
        let mut found = Vec::new();
        let mut read = 0;
        for entry in std::fs::read_dir(&crates).unwrap().flatten() {
            let src = entry.path().join("src");
            if !src.is_dir() || entry.file_name() == "time" {
                continue;
            }
            for file in rust_files(&src) {
                read += 1;
                // This file names them to look for them.
                if file.ends_with(
                    Path::new(file!())
                        .strip_prefix("crates/test-support")
                        .unwrap(),
                ) {
                    continue;
                }
                let text = std::fs::read_to_string(&file).unwrap();
                for hallmark in hallmarks.iter().filter(|h| text.contains(*h)) {
                    found.push(format!("{}: {hallmark}", file.display()));
                }
            }
        }
        assert!(read > 100, "{read} files under {}", crates.display());
        assert!(
            found.is_empty(),
            "calendar arithmetic outside warden-time (use warden_time::rfc3339, \
             parse_rfc3339, UtcDay):\n{}",
            found.join("\n")
        );
    }

    /// Issue 12's rule for every crate of the workspace, not only the ones whose suites repeat
    /// it: no two files of a crate import each other, directly or around.
    #[test]
    fn no_crate_of_the_workspace_has_an_import_circle() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found = BTreeMap::new();
        let mut read = 0;
        for entry in std::fs::read_dir(&crates).unwrap().flatten() {
            let src = entry.path().join("src");
            if !src.is_dir() {
                continue;
            }
            read += 1;
            for circle in circles(&module_edges(&src)) {
                let name = format!(
                    "{}: {}",
                    entry.file_name().to_string_lossy(),
                    circle_name(&circle)
                );
                found.insert(name, describe(&circle));
            }
        }
        // The walk really found the workspace.
        assert!(read >= 10, "{read} crates under {}", crates.display());
        assert!(
            found.is_empty(),
            "import circles:\n{}",
            found
                .iter()
                .map(|(name, edges)| format!("{name}\n{edges}"))
                .collect::<Vec<_>>()
                .join("\n\n")
        );
    }

    /// The edges of a crate made of `files` (path under `src`, text).
    fn edges(files: &[(&str, &str)]) -> Vec<Edge> {
        let files: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(path, text)| (PathBuf::from(path), text.to_string()))
            .collect();
        edges_of(&|path| files.get(path).cloned()).unwrap()
    }

    /// `from -> to` for each edge.
    fn arrows(edges: &[Edge]) -> Vec<String> {
        edges
            .iter()
            .map(|e| format!("{} -> {}", e.from, e.to))
            .collect()
    }

    fn circle_arrows(files: &[(&str, &str)]) -> Vec<Vec<String>> {
        circles(&edges(files)).iter().map(|c| arrows(c)).collect()
    }

    #[test]
    fn a_circle_through_the_roots_re_exports_is_found() {
        let lib =
            "mod error;\nmod spec;\npub use error::SandboxError;\npub use spec::{Backend, Spec};";
        let error = "use crate::Backend;\npub enum SandboxError { Unsupported(Backend) }";
        let spec = "pub enum Backend { Local }\npub struct Spec;\n\
                    impl Spec { pub fn check(&self) -> Result<(), crate::SandboxError> { Ok(()) } }";
        assert_eq!(
            circle_arrows(&[("lib.rs", lib), ("error.rs", error), ("spec.rs", spec)]),
            [["error -> spec", "spec -> error"]]
        );
        // Without the way back there is none, and the re-exports alone are no edges.
        let spec = "pub enum Backend { Local }\npub struct Spec;";
        let found = edges(&[("lib.rs", lib), ("error.rs", error), ("spec.rs", spec)]);
        assert_eq!(arrows(&found), ["error -> spec"]);
        assert_eq!(found[0].reference, "use crate::Backend");
        assert!(circles(&found).is_empty());
    }

    #[test]
    fn a_circle_between_two_files_of_one_module_is_found() {
        let files = [
            ("lib.rs", "mod worker;\npub use worker::run;"),
            (
                "worker/mod.rs",
                "mod change_task;\nmod maintain_task;\npub use change_task::run;",
            ),
            (
                "worker/change_task.rs",
                "use super::maintain_task::Budget;\npub fn run(b: Budget) { let _ = b; }\n\
                 pub(super) struct Claim;",
            ),
            (
                "worker/maintain_task.rs",
                "pub struct Budget;\nfn claim() { let _c = super::change_task::Claim; }",
            ),
        ];
        assert_eq!(
            circle_arrows(&files),
            [[
                "worker::change_task -> worker::maintain_task",
                "worker::maintain_task -> worker::change_task"
            ]]
        );
        assert_eq!(
            circle_name(&circles(&edges(&files))[0]),
            "worker: change_task <-> maintain_task"
        );
    }

    /// A module's own file may use its submodules and they what it defines; a circle between
    /// two submodules through their own files still counts, at the level where they part.
    #[test]
    fn a_module_file_is_the_face_of_its_submodules() {
        let files = [
            (
                "lib.rs",
                "mod a;\nmod b;\npub struct Error;\nfn f() { a::x::g() }",
            ),
            ("a/mod.rs", "pub mod x;\npub struct A;"),
            (
                "a/x.rs",
                "pub fn g() -> crate::Error { let _ = super::A; crate::Error }",
            ),
            ("b/mod.rs", "mod y;\npub struct B;\nfn h() { y::k() }"),
            ("b/y.rs", "pub(super) fn k() {}"),
        ];
        assert!(circle_arrows(&files).is_empty(), "{:?}", edges(&files));
        let mut files = files;
        files[2].1 = "pub fn g() { let _ = crate::b::B; }";
        files[4].1 = "pub(super) fn k() { let _ = crate::a::A; }";
        let found = circles(&edges(&files));
        assert_eq!(
            found.iter().map(|c| circle_name(c)).collect::<Vec<_>>(),
            ["crate: a <-> b"]
        );
    }

    /// A path from the root through `pub use` chains, globs and renames lands on the file
    /// that defines the item, whichever way the code names it.
    #[test]
    fn re_exports_resolve_to_the_defining_file() {
        let check = |user: &str, expected: &[&str]| {
            let files = [
                ("lib.rs", "mod a;\nmod b;\nmod deep;\npub use self::deep::*;\npub use b::Thing as Renamed;"),
                ("a.rs", user),
                ("b.rs", "pub struct Thing;"),
                ("deep/mod.rs", "mod leaf;\npub use leaf::*;"),
                ("deep/leaf.rs", "pub fn leaf_fn() {}\npub trait Greet { fn hi(&self) {} }"),
            ];
            assert_eq!(arrows(&edges(&files)), expected, "{user}");
        };
        check("fn f() { crate::leaf_fn() }", &["a -> deep::leaf"]);
        check(
            "use crate::{Renamed, deep};\nfn f(_: Renamed) { deep::leaf_fn() }",
            &["a -> b", "a -> deep::leaf"],
        );
        check("use super::*;\nfn f() { leaf_fn() }", &["a -> deep::leaf"]);
        // A trait imported for its methods only.
        check(
            "use crate::Greet;\nfn f(x: &dyn std::any::Any) {}",
            &["a -> deep::leaf"],
        );
        // Paths inside a macro's tokens.
        check(
            "fn f() { println!(\"{:?}\", crate::b::Thing); }",
            &["a -> b"],
        );
        // A module named without an item is no dependency; neither are comments, strings,
        // attributes and test code.
        check(
            "use crate::deep;\n// crate::b::Thing\n/// [`crate::b::Thing`]\n\
             #[doc = \"crate::leaf_fn\"]\nfn f() { let _ = \"crate::b::Thing\"; }\n\
             #[cfg(test)]\nmod tests { use crate::b::Thing; }\n\
             #[cfg(test)]\nfn helper() { crate::leaf_fn() }",
            &[],
        );
        // What the crate does not define is outside it.
        check(
            "use std::fmt::Debug;\nfn f() -> Option<String> { None }",
            &[],
        );
    }

    #[test]
    fn inline_modules_and_super_resolve_from_where_they_are_written() {
        let files = [
            ("lib.rs", "mod x;\nmod y;\npub struct Root;"),
            (
                "x.rs",
                "mod inner { pub(super) fn g() { let _ = super::super::y::Y; } }\n\
                 fn f() { inner::g() }",
            ),
            (
                "y.rs",
                "pub struct Y;\nfn r() -> super::Root { super::Root }",
            ),
        ];
        assert_eq!(arrows(&edges(&files)), ["x -> y", "y -> crate"]);
    }

    #[test]
    fn a_module_file_and_its_child_in_a_directory_are_both_read() {
        let files = [
            ("lib.rs", "mod a;\nmod b;"),
            ("a.rs", "mod sub;"),
            ("a/sub.rs", "fn f() { crate::b::g() }"),
            ("b/mod.rs", "pub fn g() {}"),
        ];
        assert_eq!(arrows(&edges(&files)), ["a::sub -> b"]);
        let missing = BTreeMap::from([(PathBuf::from("lib.rs"), "mod gone;".to_string())]);
        assert!(edges_of(&|p| missing.get(p).cloned()).is_err());
    }

    #[test]
    fn circles_are_found_with_their_edges() {
        let edge = |from: &str, to: &str| Edge {
            from: from.into(),
            to: to.into(),
            file: format!("{from}.rs"),
            reference: format!("crate::{to}"),
        };
        let edges = vec![
            edge("a", "b"),
            edge("b", "c"),
            edge("c", "a"),
            edge("c", "d"),
            edge("d", "e"),
        ];
        let found = circles(&edges);
        assert_eq!(
            found,
            vec![vec![edge("a", "b"), edge("b", "c"), edge("c", "a")]]
        );
        assert!(circles(&[edge("a", "b"), edge("b", "c")]).is_empty());
    }
}
