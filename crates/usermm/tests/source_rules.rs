//! Rules about the engine's source that the compiler does not check, checked by reading it.
//!
//! - **No import cycle between modules.** The crate's top-level modules form a DAG, and so do
//!   the sibling files of every module directory. A module's `mod.rs` and its children count as
//!   one module (children extend the parent's types, as `page_alloc/buddy.rs` extends
//!   `PhysMem`), so a child naming its parent is not a cycle; two siblings naming each other,
//!   or two top-level modules (`machine` and `mm`, say), are.
//! - **No product file over 800 lines**, in the `src/` of every crate of the workspace: a file
//!   that grows past it is split along its seams (as `mm/memory.c`'s content is split here
//!   into `memory`, `fault`, `huge_memory`, `fork`, `mremap`). Unit-test files (`test.rs`,
//!   `tests.rs`, anything under a `tests/` directory) do not count; the exemptions, each with
//!   its reason, are [`LINE_LIMIT_EXEMPT`].
//! - **No engine import through the crate root.** `lib.rs` re-exports the public surface
//!   (`usermm::Errno`, `usermm::PAGE_SIZE`, …) for the other crates; engine code names the
//!   defining module (`crate::error::Errno`, `crate::addr::PAGE_SIZE`), so that the module
//!   graph above sees the real edge and a reader lands on the definition.
//! - **Every lock goes through the sync seam.** No `parking_lot`, no
//!   `std::sync::{Mutex, RwLock, Condvar, Barrier}` and no `crossbeam_channel` in
//!   `crates/usermm/src` outside `src/sync/`: one place decides how the engine's locks behave
//!   (host locks, loom, virtual time).
//!
//! - **No page table by hand in `mm/`.** No file under `src/mm/` reaches a table page's
//!   entries (`backing().table(`) or takes a split lock itself (`ptl.lock(`): an entry is
//!   written through `pgtable`'s locked slot or table cursor, whose type carries the lock.
//!
//! A file's dependencies are every path it names that starts with `crate::`, `super::` or
//! `self::` (in `use` items, including nested groups, and inline in code), resolved to the
//! longest prefix that is a module file. Comments are skipped; unit-test files (`test.rs`) are
//! not part of the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type ModPath = Vec<String>;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src`, by module path (`["mm", "vma", "tree"]`).
fn module_files() -> BTreeMap<ModPath, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src dir") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = src_dir();
    let mut files = Vec::new();
    walk(&root, &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).expect("under src").with_extension("");
            let mut m: ModPath = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(m.last().map(String::as_str), Some("mod" | "lib")) {
                m.pop();
            }
            (m, p)
        })
        .collect()
}

/// The source without `//` comments (line, doc and inner doc comments).
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("read source");
    text.lines()
        .map(|l| {
            // A `//` inside a string literal would cut the line short; the engine has none
            // that matter here (they could only hide a path, never invent one).
            match l.find("//") {
                Some(i) => &l[..i],
                None => l,
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Parse a use-tree at `s[i..]` (after a `::`): `a::b`, `a::{b, c::{d}}`, `*`, `self`.
/// Pushes every full path it names onto `out`, relative to `prefix`.
fn parse_tree(s: &[char], mut i: usize, prefix: &ModPath, out: &mut Vec<ModPath>) -> usize {
    let mut path = prefix.clone();
    loop {
        while i < s.len() && s[i].is_whitespace() {
            i += 1;
        }
        if i < s.len() && s[i] == '{' {
            i += 1;
            loop {
                while i < s.len() && (s[i].is_whitespace() || s[i] == ',') {
                    i += 1;
                }
                if i >= s.len() || s[i] == '}' {
                    return i + 1;
                }
                i = parse_tree(s, i, &path, out);
            }
        }
        let start = i;
        while i < s.len() && is_ident(s[i]) {
            i += 1;
        }
        if start == i {
            // `*` or anything else: the path so far is what is named.
            out.push(path);
            return i + usize::from(i < s.len() && s[i] == '*');
        }
        let seg: String = s[start..i].iter().collect();
        if seg != "self" {
            path.push(seg);
        }
        if s.get(i) == Some(&':') && s.get(i + 1) == Some(&':') {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// Module paths named by the file of module `m`.
fn references(m: &ModPath, path: &Path) -> Vec<ModPath> {
    let code: Vec<char> = code_of(path).chars().collect();
    let is_mod_rs = path.ends_with("mod.rs") || path.ends_with("lib.rs");
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let boundary = i == 0 || !is_ident(code[i - 1]);
        let rest: String = code[i..code.len().min(i + 7)].iter().collect();
        let (kw, len) = if rest.starts_with("crate::") {
            ("crate", 7)
        } else if rest.starts_with("super::") {
            ("super", 7)
        } else if rest.starts_with("self::") {
            ("self", 6)
        } else {
            i += 1;
            continue;
        };
        if !boundary {
            i += 1;
            continue;
        }
        let mut base: ModPath = match kw {
            "crate" => Vec::new(),
            "self" => m.clone(),
            _ => m[..m.len().saturating_sub(1)].to_vec(),
        };
        let mut j = i + len;
        // `super::super::…`
        while code[j..].iter().take(7).collect::<String>() == "super::" {
            base.pop();
            j += 7;
        }
        let _ = is_mod_rs;
        j = parse_tree(&code, j, &base, &mut out);
        i = j.max(i + 1);
    }
    out
}

/// The longest prefix of `p` that is a module file.
fn resolve<'a>(p: &ModPath, files: &'a BTreeMap<ModPath, PathBuf>) -> Option<&'a ModPath> {
    (0..=p.len())
        .rev()
        .find_map(|n| files.get_key_value(&p[..n]).map(|(k, _)| k))
}

#[test]
fn no_import_cycle_between_modules() {
    let files = module_files();
    let mut deps: BTreeMap<&ModPath, BTreeSet<&ModPath>> = BTreeMap::new();
    for (m, p) in &files {
        if m.last().map(String::as_str) == Some("test") {
            continue;
        }
        let set = deps.entry(m).or_default();
        for r in references(m, p) {
            if let Some(t) = resolve(&r, &files) {
                if t != m {
                    set.insert(t);
                }
            }
        }
    }
    assert!(
        deps.len() > 40,
        "the source walk found only {} files",
        deps.len()
    );
    // Every directory level: its children (files or subdirectories, not mod.rs) as nodes.
    let dirs: BTreeSet<ModPath> = files
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| m[..m.len() - 1].to_vec())
        .collect();
    let mut cycles = Vec::new();
    for d in &dirs {
        let child = |m: &ModPath| -> Option<String> {
            (m.len() > d.len() && m[..d.len()] == d[..]).then(|| m[d.len()].clone())
        };
        let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for (m, ts) in &deps {
            let Some(a) = child(m) else { continue };
            if a == "test" {
                continue;
            }
            let edges = graph.entry(a.clone()).or_default();
            for t in ts {
                if let Some(b) = child(t) {
                    if b != a && b != "test" {
                        edges.entry(b).or_default().insert(m.join("::"));
                    }
                }
            }
        }
        // Depth-first search for a back edge.
        fn dfs(
            u: &str,
            g: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
            state: &mut BTreeMap<String, u8>,
            stack: &mut Vec<String>,
            found: &mut Vec<String>,
        ) {
            state.insert(u.to_owned(), 1);
            stack.push(u.to_owned());
            for (v, via) in g.get(u).into_iter().flatten() {
                match state.get(v) {
                    Some(1) => {
                        let at = stack.iter().position(|s| s == v).expect("on stack");
                        found.push(format!(
                            "{} -> {v} (last edge from {})",
                            stack[at..].join(" -> "),
                            via.iter().cloned().collect::<Vec<_>>().join(", ")
                        ));
                    }
                    None => dfs(v, g, state, stack, found),
                    _ => {}
                }
            }
            stack.pop();
            state.insert(u.to_owned(), 2);
        }
        let mut state = BTreeMap::new();
        let mut found = Vec::new();
        for u in graph.keys() {
            if !state.contains_key(u) {
                dfs(u, &graph, &mut state, &mut Vec::new(), &mut found);
            }
        }
        for f in found {
            let level = if d.is_empty() {
                "crate".to_owned()
            } else {
                d.join("::")
            };
            cycles.push(format!("in {level}: {f}"));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_reference_parser_sees_groups_and_super() {
    let files = module_files();
    let m: ModPath = vec!["mm".into(), "vma".into(), "merge".into()];
    let refs = references(&m, &files[&m]);
    let resolved: BTreeSet<String> = refs
        .iter()
        .filter_map(|r| resolve(r, &files))
        .map(|r| r.join("::"))
        .collect();
    for want in [
        "mm::vma::area",
        "mm::vma::tree",
        "mm::vma::flags",
        "mm::shmem",
    ] {
        assert!(resolved.contains(want), "{want} not in {resolved:?}");
    }
}

/// Whether `code` names one of the host locking primitives the seam replaces.
fn names_a_host_lock(code: &str) -> Option<String> {
    let chars: Vec<char> = code.chars().collect();
    for (i, _) in code.match_indices("parking_lot") {
        let boundary = i == 0 || !is_ident(chars[i - 1]);
        if boundary {
            return Some("parking_lot".into());
        }
    }
    if code.contains("crossbeam_channel") {
        return Some("crossbeam_channel".into());
    }
    // Every path under `std::sync` (including groups), resolved.
    let mut paths = Vec::new();
    for (i, _) in code.match_indices("std::sync::") {
        if i > 0 && is_ident(chars[i - 1]) {
            continue;
        }
        let j = code[..i].chars().count() + "std::sync::".len();
        parse_tree(&chars, j, &vec!["std".into(), "sync".into()], &mut paths);
    }
    const BANNED: [&str; 4] = ["Mutex", "RwLock", "Condvar", "Barrier"];
    paths
        .iter()
        .find(|p| p.len() >= 3 && BANNED.iter().any(|b| p[2].starts_with(b)))
        .map(|p| p.join("::"))
}

#[test]
fn every_lock_goes_through_the_sync_seam() {
    let sync_dir = src_dir().join("sync");
    let mut offenders = Vec::new();
    for path in module_files().values() {
        if path.starts_with(&sync_dir) {
            continue;
        }
        if let Some(what) = names_a_host_lock(&code_of(path)) {
            offenders.push(format!("{}: {what}", path.display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "host locks outside src/sync/ (use usermm::sync's SpinLock, Mutex, RwSem, CondVar):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_host_lock_check_sees_every_spelling() {
    for bad in [
        "use parking_lot::Mutex;",
        "let m: parking_lot::RwLock<()> = todo!();",
        "use std::sync::Mutex;",
        "use std::sync::{atomic::AtomicU64, Arc, RwLock};",
        "use std::sync::{\n    Arc,\n    Condvar,\n};",
        "let b = std::sync::Barrier::new(2);",
        "use crossbeam_channel::unbounded;",
    ] {
        assert!(names_a_host_lock(bad).is_some(), "missed: {bad}");
    }
    for fine in [
        "use std::sync::{atomic::AtomicU64, Arc};",
        "use crate::sync::{Mutex, SpinLock};",
        "use std::sync::atomic::Ordering::Relaxed;",
    ] {
        assert_eq!(names_a_host_lock(fine), None, "false alarm: {fine}");
    }
}

/// Whether `code` reads the time-stamp counter (`_rdtsc`, `__rdtscp`, `asm!("rdtsc")`).
fn reads_the_tsc(code: &str) -> bool {
    code.contains("rdtsc")
}

/// The TSC is read in one place, `sync/clock.rs` (lock_stat's clock), so that a virtual run
/// replaces host time there and nowhere else.
#[test]
fn the_tsc_is_read_only_in_the_sync_clock() {
    let clock = src_dir().join("sync").join("clock.rs");
    let offenders: Vec<String> = module_files()
        .values()
        .filter(|p| **p != clock && reads_the_tsc(&code_of(p)))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "rdtsc outside src/sync/clock.rs (use sync::clock::LockstatClock):\n{}",
        offenders.join("\n")
    );
    assert!(reads_the_tsc("unsafe { core::arch::x86_64::_rdtsc() }"));
    assert!(reads_the_tsc(&code_of(&clock)), "the clock reads the TSC");
}

/// Longest product source file, in lines.
const MAX_LINES: usize = 800;

/// Files allowed past [`MAX_LINES`], relative to the workspace root, each with its reason.
const LINE_LIMIT_EXEMPT: &[(&str, &str)] = &[];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/usermm is two levels below the workspace root")
        .to_path_buf()
}

/// Every product `.rs` file under `crates/*/src`: not `test.rs`, `tests.rs`, nor under a
/// `tests/` directory.
fn product_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src dir") {
            let p = e.expect("dir entry").path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if p.is_dir() {
                if name != "tests" {
                    walk(&p, out);
                }
            } else if name.ends_with(".rs") && name != "test.rs" && name != "tests.rs" {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    let crates = workspace_root().join("crates");
    for c in std::fs::read_dir(&crates).expect("read crates/") {
        let src = c.expect("dir entry").path().join("src");
        if src.is_dir() {
            walk(&src, &mut out);
        }
    }
    out.sort();
    out
}

#[test]
fn no_product_file_is_over_800_lines() {
    let root = workspace_root();
    let files = product_files();
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut over = Vec::new();
    let mut exempt_seen = BTreeSet::new();
    for p in &files {
        let rel = p
            .strip_prefix(&root)
            .expect("under root")
            .to_string_lossy()
            .into_owned();
        let n = std::fs::read_to_string(p)
            .expect("read source")
            .lines()
            .count();
        if LINE_LIMIT_EXEMPT.iter().any(|(f, _)| *f == rel) {
            exempt_seen.insert(rel);
            continue;
        }
        if n > MAX_LINES {
            over.push(format!("{rel}: {n} lines"));
        }
    }
    assert!(
        over.is_empty(),
        "product files over {MAX_LINES} lines (split them along their seams):\n{}",
        over.join("\n")
    );
    for (f, why) in LINE_LIMIT_EXEMPT {
        assert!(
            exempt_seen.contains(*f),
            "stale exemption {f} ({why}): the file is gone or moved"
        );
    }
}

/// The names `lib.rs` re-exports at the crate root (`pub use a::{B, C};` gives `B`, `C`).
fn root_reexports() -> BTreeSet<String> {
    let lib = src_dir().join("lib.rs");
    let code: Vec<char> = code_of(&lib).chars().collect();
    let text: String = code.iter().collect();
    let mut names = BTreeSet::new();
    for (i, _) in text.match_indices("pub use ") {
        let j = text[..i].chars().count() + "pub use ".len();
        let mut paths = Vec::new();
        parse_tree(&code, j, &Vec::new(), &mut paths);
        for p in paths {
            if let Some(last) = p.last() {
                names.insert(last.clone());
            }
        }
    }
    names
}

#[test]
fn engine_code_imports_from_the_defining_module_not_the_root() {
    let names = root_reexports();
    for want in ["Errno", "PAGE_SIZE", "Machine", "Mm"] {
        assert!(names.contains(want), "{want} not among {names:?}");
    }
    let mut offenders = Vec::new();
    for (m, p) in &module_files() {
        if m.is_empty() {
            continue; // lib.rs itself
        }
        let code = code_of(p);
        let chars: Vec<char> = code.chars().collect();
        let mut paths = Vec::new();
        for (i, _) in code.match_indices("crate::") {
            if i > 0 && (is_ident(chars[i - 1]) || chars[i - 1] == '$') {
                continue;
            }
            let j = code[..i].chars().count() + "crate::".len();
            parse_tree(&chars, j, &Vec::new(), &mut paths);
        }
        for path in paths {
            if path.first().is_some_and(|n| names.contains(n)) {
                offenders.push(format!("{}: crate::{}", p.display(), path.join("::")));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "engine code naming a crate-root re-export (name the defining module instead):\n{}",
        offenders.join("\n")
    );
}

/// Whether a line of `code` writes a page's mapcount or its `private` word (a THP head's
/// entire mapcount): `.mapcount.store(`, `.private.fetch_sub(`, ...
fn writes_a_mapcount(code: &str) -> bool {
    ["mapcount.", "private."].iter().any(|field| {
        code.match_indices(field).any(|(i, _)| {
            let rest = &code[i + field.len()..];
            let before = code[..i].chars().next_back();
            before.is_none_or(|c| !is_ident(c))
                && [
                    "store(",
                    "fetch_add(",
                    "fetch_sub(",
                    "fetch_or(",
                    "fetch_and(",
                    "fetch_update(",
                    "swap(",
                    "compare_exchange",
                ]
                .iter()
                .any(|w| rest.starts_with(w))
        })
    })
}

/// Mapcounts change only in `mm/rmap.rs` (the functions named as the kernel's:
/// `folio_add_new_anon_rmap`, `folio_remove_rmap_pte`, `hugetlb_add_new_anon_rmap`...) and in
/// the allocator (`page_alloc/`: `prep_new_page`'s reset, `split_compound`), as in the kernel.
#[test]
fn mapcounts_are_written_only_by_rmap_and_the_allocator() {
    let root = src_dir();
    let offenders: Vec<String> = module_files()
        .into_iter()
        .filter(|(m, _)| {
            m.first().map(String::as_str) != Some("page_alloc")
                && m.as_slice() != ["mm".to_string(), "rmap".to_string()]
        })
        .flat_map(|(_, p)| {
            let code = code_of(&p);
            let rel = p
                .strip_prefix(&root)
                .expect("under src")
                .display()
                .to_string();
            code.lines()
                .enumerate()
                .filter(|(_, l)| writes_a_mapcount(l))
                .map(|(n, l)| format!("{rel}:{}: {}", n + 1, l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "a mapcount written outside mm/rmap.rs and page_alloc/ (add a function to rmap.rs):\n{}",
        offenders.join("\n")
    );
    assert!(writes_a_mapcount(
        "phys.meta(p).mapcount.fetch_add(1, Relaxed);"
    ));
    assert!(writes_a_mapcount("m.private.store(0, Relaxed);"));
    assert!(writes_a_mapcount(
        "m.mapcount.compare_exchange(0, 1, Relaxed, Relaxed)"
    ));
    assert!(!writes_a_mapcount("m.mapcount.load(Relaxed)"));
    assert!(!writes_a_mapcount(
        "let entire_mapcount = 1; total_mapcount.store(1)"
    ));
}

/// What in `code` reaches a page-table page by hand, if anything: its entries' memory (the
/// backing's `table`, `zero_table`) or its split lock (`ptl.lock`, `ptl.try_lock`). Whitespace
/// is ignored, so a call split over lines is seen.
fn touches_a_table_by_hand(code: &str) -> Option<&'static str> {
    let squeezed: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    [
        "backing().table(",
        "backing().zero_table(",
        ".ptl.lock(",
        ".ptl.try_lock(",
    ]
    .into_iter()
    .find(|pat| squeezed.contains(pat))
}

/// The mm writes page-table entries only through `pgtable` (`LockedSlot`, `TableCursor`,
/// `TablePair`, the `p?d_clear`s), so every write carries its lock in its type.
#[test]
fn mm_reaches_page_tables_only_through_pgtable() {
    let root = src_dir();
    let mm = root.join("mm");
    let offenders: Vec<String> = module_files()
        .values()
        .filter(|p| p.starts_with(&mm))
        .filter_map(|p| {
            let what = touches_a_table_by_hand(&code_of(p))?;
            Some(format!(
                "{}: {what}",
                p.strip_prefix(&root).expect("under src").display()
            ))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "page tables reached by hand in src/mm/ (use pgtable's TableCursor or LockedSlot):\n{}",
        offenders.join("\n")
    );
    for bad in [
        "let t = phys.backing().table(pfn);",
        "let t = phys\n    .backing()\n    .table(pfn)",
        "let _g = phys.meta(t).ptl.lock(&PTL);",
        "phys.meta(t).ptl.try_lock(&PMD_LOCK)",
    ] {
        assert!(touches_a_table_by_hand(bad).is_some(), "missed: {bad}");
    }
    for fine in [
        "let pte = TableCursor::lock(phys, table, Level::Pte);",
        "phys.backing().read(pfn, 0, &mut data);",
        "pmd.table().deposit(t);",
    ] {
        assert_eq!(touches_a_table_by_hand(fine), None, "false alarm: {fine}");
    }
}
