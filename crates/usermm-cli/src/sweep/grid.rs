//! The grid file and its expansion into points.
//!
//! A grid is a usermm command line and some axes, each a key with a list of values; its points
//! are every combination of one value per axis, in the order nested loops over the axes would
//! visit them (the first axis outermost, the last one changing fastest). The file is TOML:
//!
//! ```toml
//! command = ["bigfree", "{size}", "--time", "virtual", "--seed-only"]  # or one string
//! [axes]
//! "{size}" = ["64M", "128M"]                # substituted into the command
//! "--max-active" = [1, 2, 4]                 # any flag of the command: --max-active=1
//! "--scale-cost zap_pte" = [0.5, 1, 2]       # --scale-cost zap_pte=0.5
//! "pcp.batch" = [31, 63]                     # an engine key: --set pcp.batch=31
//! "--exit" = [false, true]                   # a switch: absent, present
//! [columns]                                  # table header = dotted path in the --json record
//! "patched (s)" = "bigfree.patched.time_s"
//! ratio = "bigfree.ratio"
//! ```
//!
//! The axes and columns keep the order they have in the file: the `toml` crate stores a table
//! sorted by key, so each value is read with its [`toml::Spanned`] position and they are put
//! back in the order of those positions.
//!
//! A point's arguments are the command with its `{placeholders}` filled in, followed by each
//! other axis's arguments in axis order. Its identity is [`stable_hash`] of that argument list
//! (FNV-1a, 64 bits, written out here so that it can never change under us): the same
//! arguments are the same point in any grid, any file and on any machine, which is what resume
//! and merge match on. Every mistake in the file is a [`UsageError`] naming the file and the
//! key.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;
use usermm::MachineConfig;

use crate::args::{usage, UsageError};

/// The most points one grid may have.
pub const MAX_POINTS: usize = 100_000;

/// The file as written: checked and put in order by [`Grid::parse`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GridFile {
    command: toml::Value,
    axes: Option<BTreeMap<String, Spanned<Vec<toml::Value>>>>,
    columns: Option<BTreeMap<String, Spanned<String>>>,
}

/// What an axis's key names, and so which arguments a value becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AxisKind {
    /// `"--flag"` (or `"-f"`): `--flag=VALUE` (`-f VALUE`); a boolean value puts the switch in
    /// or leaves it out.
    Flag(String),
    /// `"--flag NAME"`: `--flag NAME=VALUE` (`--scale-cost zap_pte`, `--set free.max_active`).
    Keyed { flag: String, name: String },
    /// `"KEY"` without dashes: an engine configuration key, `--set KEY=VALUE`.
    Set(String),
    /// `"{NAME}"`: replaces `{NAME}` wherever it occurs in the command's words.
    Placeholder(String),
}

/// One value of an axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AxisValue {
    /// As shown in the table and substituted into arguments (`true`/`false` become `on`/`off`
    /// where a value is written out).
    pub text: String,
    /// A TOML boolean.
    pub switch: Option<bool>,
}

/// One axis of a grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Axis {
    /// The key as written in the file (the table's header for this axis).
    pub name: String,
    pub kind: AxisKind,
    pub values: Vec<AxisValue>,
}

/// A column of the table: a header and the dotted path of a figure in a point's `--json`
/// record (`bigfree.rows.1.time_s`: a number indexes an array).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    pub path: String,
}

/// A checked grid.
#[derive(Debug, Clone)]
pub struct Grid {
    /// Where the grid came from (for messages; relative paths in it are relative to its
    /// directory).
    pub origin: PathBuf,
    /// The usermm command line, without the program name and without `--json`.
    pub command: Vec<String>,
    pub axes: Vec<Axis>,
    /// Empty: every point's own default columns ([`super::default_columns`]).
    pub columns: Vec<Column>,
}

/// One point of a grid: its place, its identity, its arguments and its coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// Place in the grid's order, from 0.
    pub index: usize,
    /// [`stable_hash`] of `args`.
    pub id: String,
    /// The resolved usermm arguments (program name and `--json` left out).
    pub args: Vec<String>,
    /// (axis name, value) for each axis, in axis order.
    pub coords: Vec<(String, String)>,
}

/// FNV-1a (64-bit) of the words, each followed by a NUL byte, as 16 hex digits. No argument
/// can hold a NUL, so different lists never feed the hash the same bytes.
pub fn stable_hash<S: AsRef<str>>(words: &[S]) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for w in words {
        for &b in w.as_ref().as_bytes().iter().chain(&[0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    format!("{h:016x}")
}

fn err<T>(origin: &Path, msg: impl std::fmt::Display) -> anyhow::Result<T> {
    usage(format!("{}: {msg}", origin.display()))
}

/// `line L, column C` of byte offset `at` in `text`.
fn position(text: &str, at: usize) -> String {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {col}")
}

fn check_word(origin: &Path, what: &str, w: &str) -> anyhow::Result<()> {
    if usermm::text::first_control(w).is_some() {
        let w = usermm::text::visible(w);
        return err(origin, format!("{what}: '{w}' holds a control character"));
    }
    Ok(())
}

fn axis_kind(origin: &Path, key: &str, command: &[String]) -> anyhow::Result<AxisKind> {
    let bad = |why: &str| err(origin, format!("axes: key '{key}': {why}"));
    if let Some(name) = key.strip_prefix('{').and_then(|k| k.strip_suffix('}')) {
        if name.is_empty() || name.contains(['{', '}']) {
            return bad("a placeholder is {NAME}");
        }
        if !command.iter().any(|w| w.contains(key)) {
            return bad("this placeholder appears nowhere in the command");
        }
        return Ok(AxisKind::Placeholder(name.to_string()));
    }
    if key.starts_with('-') {
        let (flag, name) = match key.split_once(' ') {
            Some((f, n)) => (f, Some(n.trim())),
            None => (key, None),
        };
        let ok = flag.len() > 1 && flag != "--" && !flag.contains('=');
        if !ok {
            return bad("expected a flag such as --max-active or -n");
        }
        if flag == "--json" {
            return bad("the sweep adds --json itself");
        }
        return Ok(match name {
            Some("") => return bad("expected '--flag NAME' with a NAME after the space"),
            Some(n) if n.contains([' ', '=']) => {
                return bad("expected '--flag NAME' (one NAME, no '=')")
            }
            Some(n) => AxisKind::Keyed {
                flag: flag.to_string(),
                name: n.to_string(),
            },
            None => AxisKind::Flag(flag.to_string()),
        });
    }
    let is_key = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.'));
    if !is_key {
        return bad(
            "expected --flag, '--flag NAME', {PLACEHOLDER} or an engine key (free.max_active)",
        );
    }
    Ok(AxisKind::Set(key.to_string()))
}

fn axis_value(origin: &Path, key: &str, v: &toml::Value) -> anyhow::Result<AxisValue> {
    use toml::Value as V;
    let (text, switch) = match v {
        V::String(s) => (s.clone(), None),
        V::Integer(i) => (i.to_string(), None),
        V::Float(f) => (f.to_string(), None),
        V::Boolean(b) => ((if *b { "on" } else { "off" }).to_string(), Some(*b)),
        _ => {
            return err(
                origin,
                format!("axes.\"{key}\": values are strings, numbers or booleans"),
            )
        }
    };
    check_word(origin, &format!("axes.\"{key}\""), &text)?;
    Ok(AxisValue { text, switch })
}

/// Check one value against the engine's keys, where the axis sets one.
fn check_set(origin: &Path, axis: &Axis, v: &AxisValue) -> anyhow::Result<()> {
    let assignment = match &axis.kind {
        AxisKind::Set(k) => format!("{k}={}", v.text),
        AxisKind::Keyed { flag, name } if flag == "--set" => format!("{name}={}", v.text),
        AxisKind::Flag(f) if f == "--set" => v.text.clone(),
        _ => return Ok(()),
    };
    match MachineConfig::default().set(&assignment) {
        Ok(()) => Ok(()),
        Err(e) => err(
            origin,
            format!("axes.\"{}\": --set {assignment}: {e}", axis.name),
        ),
    }
}

impl Grid {
    /// Parse and check a grid file's text; `origin` names it in messages.
    pub fn parse(text: &str, origin: &Path) -> anyhow::Result<Grid> {
        let file: GridFile = match toml::from_str(text) {
            Ok(f) => f,
            Err(e) => {
                let at = e.span().map(|s| format!("{}: ", position(text, s.start)));
                return err(origin, format!("{}{}", at.unwrap_or_default(), e.message()));
            }
        };
        let command: Vec<String> = match &file.command {
            toml::Value::String(s) => match shlex::split(s) {
                Some(words) => words,
                None => return err(origin, "command: unbalanced quotes"),
            },
            toml::Value::Array(a) => {
                let mut words = Vec::with_capacity(a.len());
                for w in a {
                    match w {
                        toml::Value::String(s) => words.push(s.clone()),
                        _ => return err(origin, "command: every word must be a string"),
                    }
                }
                words
            }
            _ => return err(origin, "command: a list of words or one string"),
        };
        for w in &command {
            check_word(origin, "command", w)?;
        }
        match command.first().map(String::as_str) {
            None => return err(origin, "command: empty (e.g. [\"bigfree\", \"1G\"])"),
            Some(w) if w.starts_with('-') => {
                return err(
                    origin,
                    "command: starts with a usermm subcommand, not a flag",
                )
            }
            Some("sweep") => return err(origin, "command: a sweep cannot run sweeps"),
            Some(_) => {}
        }
        let command: Vec<String> = command.into_iter().filter(|w| w != "--json").collect();

        let mut axes_in = file
            .axes
            .unwrap_or_default()
            .into_iter()
            .collect::<Vec<_>>();
        axes_in.sort_by_key(|(_, v)| v.span().start);
        if axes_in.is_empty() {
            return err(
                origin,
                "axes: no axis; a sweep needs at least one, e.g. [axes] \"--max-active\" = [1, 2]",
            );
        }
        let mut axes = Vec::with_capacity(axes_in.len());
        for (key, values) in axes_in {
            check_word(origin, "axes", &key)?;
            let kind = axis_kind(origin, &key, &command)?;
            let values = values.into_inner();
            if values.is_empty() {
                return err(
                    origin,
                    format!("axes.\"{key}\": no values (an axis needs one at least)"),
                );
            }
            let mut seen = HashSet::new();
            let mut out = Vec::with_capacity(values.len());
            for v in &values {
                let v = axis_value(origin, &key, v)?;
                if !seen.insert(v.text.clone()) {
                    return err(origin, format!("axes.\"{key}\": '{}' twice", v.text));
                }
                if v.switch.is_none() && matches!(kind, AxisKind::Flag(_)) && v.text.is_empty() {
                    return err(origin, format!("axes.\"{key}\": an empty value"));
                }
                out.push(v);
            }
            let axis = Axis {
                name: key,
                kind,
                values: out,
            };
            for v in &axis.values {
                check_set(origin, &axis, v)?;
            }
            axes.push(axis);
        }
        let mut cols_in = file
            .columns
            .unwrap_or_default()
            .into_iter()
            .collect::<Vec<_>>();
        cols_in.sort_by_key(|(_, v)| v.span().start);
        let mut columns = Vec::with_capacity(cols_in.len());
        for (name, path) in cols_in {
            let path = path.into_inner();
            check_word(origin, "columns", &name)?;
            check_word(origin, "columns", &path)?;
            if path.is_empty() || path.split('.').any(str::is_empty) {
                return err(origin, format!("columns.\"{name}\": expected a dotted path such as bigfree.ratio, got '{path}'"));
            }
            columns.push(Column { name, path });
        }
        let grid = Grid {
            origin: origin.to_path_buf(),
            command,
            axes,
            columns,
        };
        let n = grid.len();
        if n > MAX_POINTS {
            return err(
                origin,
                format!("{n} points; a grid may have at most {MAX_POINTS}"),
            );
        }
        Ok(grid)
    }

    /// Read and [`Grid::parse`] a file (a regular file: a FIFO or a device is refused
    /// unread).
    pub fn load(path: &Path) -> anyhow::Result<Grid> {
        let label = format!("{}: cannot read the grid", path.display());
        let bytes = usermm_host::files::read_regular(&label, path).map_err(|e| match e {
            usermm_host::files::FileError::Io(_, io) => {
                crate::args::UsageError(format!("{label}: {io}")).into()
            }
            e => anyhow::Error::from(e),
        })?;
        match String::from_utf8(bytes) {
            Ok(text) => Grid::parse(&text, path),
            Err(_) => err(path, "cannot read the grid: it is not UTF-8 text"),
        }
    }

    /// The number of points (saturating: [`Grid::parse`] refuses more than [`MAX_POINTS`]).
    pub fn len(&self) -> usize {
        self.axes
            .iter()
            .fold(1usize, |n, a| n.saturating_mul(a.values.len()))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The directory relative paths in the grid are read from (the grid file's).
    pub fn dir(&self) -> PathBuf {
        match self.origin.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// The grid's identity: [`stable_hash`] of its command and axes (not its columns, which
    /// only choose what the table shows).
    pub fn id(&self) -> String {
        let mut words = self.command.clone();
        for a in &self.axes {
            words.push(format!("\u{1}{}", a.name));
            words.extend(a.values.iter().map(|v| v.text.clone()));
        }
        stable_hash(&words)
    }

    /// Point `index` (None past the end).
    pub fn point(&self, index: usize) -> Option<Point> {
        if index >= self.len() {
            return None;
        }
        // Mixed radix, the last axis the fastest digit.
        let mut picks = vec![0; self.axes.len()];
        let mut rest = index;
        for (pick, axis) in picks.iter_mut().zip(&self.axes).rev() {
            *pick = rest % axis.values.len();
            rest /= axis.values.len();
        }
        let mut args = self.command.clone();
        let mut coords = Vec::with_capacity(self.axes.len());
        for (axis, &pick) in self.axes.iter().zip(&picks) {
            let v = &axis.values[pick];
            coords.push((axis.name.clone(), v.text.clone()));
            match &axis.kind {
                AxisKind::Placeholder(name) => {
                    let hole = format!("{{{name}}}");
                    for w in args.iter_mut().take(self.command.len()) {
                        *w = w.replace(&hole, &v.text);
                    }
                }
                AxisKind::Flag(flag) => match v.switch {
                    Some(true) => args.push(flag.clone()),
                    Some(false) => {}
                    None if flag.starts_with("--") => args.push(format!("{flag}={}", v.text)),
                    None => args.extend([flag.clone(), v.text.clone()]),
                },
                AxisKind::Keyed { flag, name } => {
                    args.extend([flag.clone(), format!("{name}={}", v.text)]);
                }
                AxisKind::Set(key) => {
                    args.extend(["--set".to_string(), format!("{key}={}", v.text)])
                }
            }
        }
        Some(Point {
            index,
            id: stable_hash(&args),
            args,
            coords,
        })
    }

    /// Every point, in order; `check` vets each one's arguments (the CLI passes its parser, so
    /// a flag the command does not take is found before anything runs) and says why not.
    pub fn points(
        &self,
        check: &dyn Fn(&[String]) -> Result<(), String>,
    ) -> anyhow::Result<Vec<Point>> {
        let mut out = Vec::with_capacity(self.len());
        let mut ids = HashSet::new();
        for index in 0..self.len() {
            let Some(p) = self.point(index) else { break };
            if let Err(why) = check(&p.args) {
                return Err(UsageError(format!(
                    "{}: point {index} ({}): {why}",
                    self.origin.display(),
                    describe(&p.coords)
                ))
                .into());
            }
            if !ids.insert(p.id.clone()) {
                return err(
                    &self.origin,
                    format!(
                        "point {index} ({}) repeats an earlier point's arguments",
                        describe(&p.coords)
                    ),
                );
            }
            out.push(p);
        }
        Ok(out)
    }
}

/// `--max-active 1, --scale-cost zap_pte=0.5`: a point's coordinates for messages.
pub fn describe(coords: &[(String, String)]) -> String {
    coords
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod test {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<Grid> {
        Grid::parse(text, Path::new("g.toml"))
    }

    #[test]
    fn the_hash_is_fnv1a_of_nul_terminated_words() {
        assert_eq!(stable_hash::<&str>(&[]), "cbf29ce484222325");
        assert_eq!(stable_hash(&["bigfree", "1G"]), "9d6aade47be52773");
        assert_ne!(stable_hash(&["ab", "c"]), stable_hash(&["a", "bc"]));
    }

    #[test]
    fn every_kind_of_axis_in_file_order() {
        let g = parse(
            r#"
            command = "bigfree {size} --time virtual"
            [axes]
            "{size}" = ["1M", "2M"]
            "--max-active" = [1, 2]
            "--scale-cost zap_pte" = [0.5]
            "pcp.batch" = [31]
            "--exit" = [false, true]
            "-x" = ["v"]
            [columns]
            z = "a.b"
            a = "c.0.d"
            "#,
        )
        .unwrap();
        let names: Vec<&str> = g.axes.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "{size}",
                "--max-active",
                "--scale-cost zap_pte",
                "pcp.batch",
                "--exit",
                "-x"
            ]
        );
        let cols: Vec<&str> = g.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(cols, ["z", "a"]);
        assert_eq!(g.len(), 8);
        let p = g.point(3).unwrap();
        assert_eq!(
            p.args,
            [
                "bigfree",
                "1M",
                "--time",
                "virtual",
                "--max-active=2",
                "--scale-cost",
                "zap_pte=0.5",
                "--set",
                "pcp.batch=31",
                "--exit",
                "-x",
                "v"
            ]
        );
        assert_eq!(p.coords[4], ("--exit".to_string(), "on".to_string()));
        assert_eq!(p.id, stable_hash(&p.args));
        let last = g.point(7).unwrap();
        assert_eq!(&last.args[..2], ["bigfree", "2M"]);
        assert_eq!(last.coords[4].1, "on");
        assert!(last.args.contains(&"--exit".to_string()));
        assert!(g.point(8).is_none());
        let all = g.points(&|_| Ok(())).unwrap();
        assert_eq!(all.len(), 8);
        assert_eq!(all[2].args.last().map(String::as_str), Some("v"));
        assert!(!all[2].args.contains(&"--exit".to_string()));
        let e = g.points(&|a| Err(format!("no {}", a[1]))).unwrap_err();
        assert_eq!(e.to_string(), "g.toml: point 0 ({size} 1M, --max-active 1, --scale-cost zap_pte 0.5, pcp.batch 31, --exit off, -x v): no 1M");
    }

    #[test]
    fn mistakes_name_the_file_and_the_key() {
        for (text, says) in [
            (
                "command = 3\n[axes]\nx = [1]",
                "command: a list of words or one string",
            ),
            (
                "command = \"bigfree 'a\"\n[axes]\nx = [1]",
                "unbalanced quotes",
            ),
            ("command = [\"--json\"]\n[axes]\nx = [1]", "not a flag"),
            (
                "command = [\"bigfree\"]\n[axes]\n\"--json\" = [1]",
                "adds --json itself",
            ),
            (
                "command = [\"bigfree\"]\n[axes]\n\"--a b=c\" = [1]",
                "one NAME",
            ),
            (
                "command = [\"bigfree\"]\n[axes]\n\"a b\" = [1]",
                "expected --flag",
            ),
            (
                "command = [\"bigfree\"]\n[axes]\n\"-\" = [1]",
                "expected a flag",
            ),
            (
                "command = [\"bigfree\"]\n[axes]\n\"pcp.batch\" = [\"x\"]",
                "--set pcp.batch=x",
            ),
            (
                "command = [\"big\\u0007free\"]\n[axes]\nx = [1]",
                "control character",
            ),
            (
                "command = [\"bigfree\"]\n[axes]\n\"--a\\u001b\" = [1]",
                // Shown escaped: an error line must not drive the terminal.
                "axes: '--a\\u{1b}' holds a control character",
            ),
            (
                "command = [\"bigfree\"]\n[axes]\n\"-r\" = [1]\n[columns]\n\"\\r\" = \"a\"",
                "columns: ",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.downcast_ref::<UsageError>().is_some(), "{text}");
            let msg = e.to_string();
            assert!(msg.starts_with("g.toml: "), "{msg}");
            assert!(msg.contains(says), "{text}: {msg}");
        }
        let big = "command = [\"bigfree\"]\n[axes]\n".to_string()
            + &(0..6)
                .map(|i| {
                    format!(
                        "\"--a{i}\" = [{}]\n",
                        (0..10).map(|v| v.to_string()).collect::<Vec<_>>().join(",")
                    )
                })
                .collect::<String>();
        let e = parse(&big).unwrap_err();
        assert!(e.to_string().contains("at most 100000"), "{e}");
    }
}
