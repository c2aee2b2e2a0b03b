//! The merged table: one row per point, its coordinates and the chosen figures as columns.
//!
//! A figure is found in a point's `--json` record by a dotted path ([`lookup`]); a path a
//! record does not have gives an empty cell (`-`), not an error, since one point's record may
//! lack a row another's has. A grid without `[columns]` shows each record's
//! [`default_columns`]: its numbers at most two keys deep (`bigfree.ratio`), the command's own
//! arguments left out.
//!
//! The same [`SweepTable`] comes out of a local run and of `--merge` over job outputs — both
//! build it with [`rows_from_lines`] — so the two print the same table for the same points.

use serde_json::Value;

use super::grid::{Column, Point};
use super::store::PointLine;
use crate::report::Table;

/// One point's row: the point, and its figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub point: Point,
    /// (column, figure) in column order; `null` where the record has no such figure.
    pub figures: Vec<(String, Value)>,
}

/// The table of a sweep.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepTable {
    /// The grid's number of points.
    pub points: usize,
    /// The axes and the columns, in order (union over the rows).
    pub axes: Vec<String>,
    pub columns: Vec<String>,
    /// By index.
    pub rows: Vec<Row>,
    /// Indexes of the grid's points with no row.
    pub missing: Vec<usize>,
}

/// The value at a dotted path (`bigfree.rows.1.time_s`) of `v`.
pub fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, key| match v {
        Value::Object(m) => m.get(key),
        Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// The numbers of `record` at most two keys deep, in the record's order, `args` left out.
pub fn default_columns(record: &Value) -> Vec<Column> {
    fn walk(v: &Value, path: &str, depth: usize, out: &mut Vec<Column>) {
        match v {
            Value::Number(_) => out.push(Column {
                name: path.to_string(),
                path: path.to_string(),
            }),
            Value::Object(m) if depth < 2 => {
                for (k, v) in m {
                    if depth == 0 && k == "args" {
                        continue;
                    }
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(v, &p, depth + 1, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(record, "", 0, &mut out);
    out
}

/// Rows of `lines`, each with `columns` if given, else the columns its line names.
pub fn rows_from_lines(lines: Vec<PointLine>, columns: &[Column]) -> Vec<Row> {
    lines
        .into_iter()
        .map(|l| {
            let cols = if columns.is_empty() {
                &l.columns
            } else {
                columns
            };
            let figures = cols
                .iter()
                .map(|c| {
                    let v = lookup(&l.record, &c.path).cloned().unwrap_or(Value::Null);
                    (c.name.clone(), v)
                })
                .collect();
            let point = Point {
                index: l.index,
                id: l.id,
                args: l.args,
                coords: l.point,
            };
            Row { point, figures }
        })
        .collect()
}

fn push_new(names: &mut Vec<String>, name: &str) {
    if !names.iter().any(|n| n == name) {
        names.push(name.to_string());
    }
}

impl SweepTable {
    /// The table of `rows` (sorted here by index) for a grid of `points` points.
    pub fn new(mut rows: Vec<Row>, points: usize) -> Self {
        rows.sort_by(|a, b| (a.point.index, &a.point.id).cmp(&(b.point.index, &b.point.id)));
        let mut axes = Vec::new();
        let mut columns = Vec::new();
        for r in &rows {
            for (a, _) in &r.point.coords {
                push_new(&mut axes, a);
            }
            for (c, _) in &r.figures {
                push_new(&mut columns, c);
            }
        }
        let missing = (0..points)
            .filter(|i| rows.binary_search_by_key(i, |r| r.point.index).is_err())
            .collect();
        SweepTable {
            points,
            axes,
            columns,
            rows,
            missing,
        }
    }

    /// Aligned text under `title`: `#`, the axes, the columns.
    pub fn render_text(&self, title: &str) -> String {
        let headers = std::iter::once("#".to_string())
            .chain(self.axes.iter().cloned())
            .chain(self.columns.iter().cloned());
        let mut t = Table::new(title, headers);
        for r in &self.rows {
            let mut cells = vec![r.point.index.to_string()];
            for a in &self.axes {
                let v = r
                    .point
                    .coords
                    .iter()
                    .find(|(k, _)| k == a)
                    .map(|(_, v)| v.clone());
                cells.push(v.unwrap_or_else(|| "-".into()));
            }
            for c in &self.columns {
                let v = r.figures.iter().find(|(k, _)| k == c).map(|(_, v)| cell(v));
                cells.push(v.unwrap_or_else(|| "-".into()));
            }
            t.push_row(cells);
        }
        t.render_text()
    }

    /// The table as one JSON value: `points`, `axes`, `columns`, `rows` (each with `index`,
    /// `id`, `args`, `point` and `figures` as objects) and `missing`.
    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let point: serde_json::Map<String, Value> = r
                    .point
                    .coords
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                let figures: serde_json::Map<String, Value> = r.figures.iter().cloned().collect();
                serde_json::json!({
                    "index": r.point.index,
                    "id": r.point.id,
                    "args": r.point.args,
                    "point": point,
                    "figures": figures,
                })
            })
            .collect();
        serde_json::json!({
            "points": self.points,
            "axes": self.axes,
            "columns": self.columns,
            "rows": rows,
            "missing": self.missing,
        })
    }
}

/// A figure as a cell: integers whole, other numbers to four significant digits, `-` for none.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(x)) => significant(x, 4),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// `x` to `digits` significant digits (no exponent; whole numbers above them are rounded).
fn significant(x: f64, digits: i32) -> String {
    if x == 0.0 || !x.is_finite() {
        return x.to_string();
    }
    // An f64's decimal exponent lies within ±400: the cast cannot truncate.
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = usize::try_from((digits - 1 - magnitude).clamp(0, 15)).unwrap_or(0);
    format!("{x:.decimals$}")
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn cells_and_paths() {
        assert_eq!(significant(0.003_909_397, 4), "0.003909");
        assert_eq!(significant(238.610_656, 4), "238.6");
        assert_eq!(significant(12_345.6, 4), "12346");
        assert_eq!(cell(&serde_json::json!(42)), "42");
        assert_eq!(cell(&Value::Null), "-");
        let v = serde_json::json!({"a": {"rows": [{"t": 1.5}, {"t": 2.5}]}, "args": {"x": 1}});
        assert_eq!(lookup(&v, "a.rows.1.t"), Some(&serde_json::json!(2.5)));
        assert_eq!(lookup(&v, "a.rows.9.t"), None);
        let v = serde_json::json!({"args": {"n": 1}, "r": {"x": 1, "y": "s", "z": {"deep": 2}}});
        let cols: Vec<String> = default_columns(&v).into_iter().map(|c| c.path).collect();
        assert_eq!(cols, ["r.x"]);
    }
}
