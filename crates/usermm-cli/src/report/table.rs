//! [`Table`]: rows of preformatted cells, rendered as aligned plain text for the terminal
//! ([`Table::render_text`], the layout of the kernel's and hyperfine's tables: a title, a
//! header, a rule of dashes) or as a GitHub Markdown table ([`Table::render_markdown`]).
//!
//! Cells are strings: a command formats its figures (with [`super::format`] or its own units)
//! and the table only aligns them — the first column (a label) left, the others right.

use std::fmt::Write as _;

use serde::Serialize;

/// A table of preformatted cells. The first column is a label (left-aligned in text); the
/// others are values (right-aligned). Short rows are padded with empty cells.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(
        title: impl Into<String>,
        headers: impl IntoIterator<Item = S>,
    ) -> Self {
        Table {
            title: title.into(),
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Append one row.
    pub fn push_row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    fn nr_columns(&self) -> usize {
        self.rows
            .iter()
            .map(Vec::len)
            .chain([self.headers.len()])
            .max()
            .unwrap_or(0)
    }

    fn cells<'a>(&self, row: &'a [String]) -> impl Iterator<Item = &'a str> {
        let n = self.nr_columns();
        (0..n).map(move |i| row.get(i).map_or("", String::as_str))
    }

    /// Plain text: the title, the header, a rule of dashes, the rows; columns two spaces apart.
    ///
    /// ```text
    /// parallel free, 320 GiB
    /// max_active  free (s)  speedup
    /// ----------  --------  -------
    /// 1               8.90    1.21x
    /// ```
    pub fn render_text(&self) -> String {
        let n = self.nr_columns();
        let width = |s: &str| s.chars().count();
        let mut widths = vec![0; n];
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            for (w, c) in widths.iter_mut().zip(self.cells(row)) {
                *w = (*w).max(width(c));
            }
        }
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let mut s = String::new();
            for (i, (c, &w)) in cells.zip(&widths).enumerate() {
                if i > 0 {
                    s.push_str("  ");
                }
                let pad = " ".repeat(w - width(c));
                if i == 0 {
                    s.push_str(c);
                    s.push_str(&pad);
                } else {
                    s.push_str(&pad);
                    s.push_str(c);
                }
            }
            s.truncate(s.trim_end().len());
            s.push('\n');
            s
        };
        let mut out = String::new();
        if !self.title.is_empty() {
            out.push_str(&self.title);
            out.push('\n');
        }
        if n == 0 {
            return out;
        }
        out += &line(&mut self.cells(&self.headers));
        let rules: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        out += &line(&mut rules.iter().map(String::as_str));
        for row in &self.rows {
            out += &line(&mut self.cells(row));
        }
        out
    }

    /// GitHub-flavoured Markdown: the title in bold, a blank line, then the table (first column
    /// left-aligned, the others right-aligned). `|` in a cell is escaped.
    pub fn render_markdown(&self) -> String {
        let mut out = String::new();
        if !self.title.is_empty() {
            let _ = writeln!(out, "**{}**\n", md_escape(&self.title));
        }
        let n = self.nr_columns();
        if n == 0 {
            return out;
        }
        let row = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
            out.push('|');
            for c in cells {
                let _ = write!(out, " {} |", md_escape(c));
            }
            out.push('\n');
        };
        row(&mut out, &mut self.cells(&self.headers));
        out.push('|');
        for i in 0..n {
            out.push_str(if i == 0 { ":---|" } else { "---:|" });
        }
        out.push('\n');
        for r in &self.rows {
            row(&mut out, &mut self.cells(r));
        }
        out
    }
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', "<br>")
}

#[cfg(test)]
mod test {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new(
            "parallel free, 320 GiB",
            ["max_active", "free (s)", "speedup"],
        );
        t.push_row(["1", "8.90", "1.21x"])
            .push_row(["32", "6.21", "1.74x"])
            .push_row(["a|b"]);
        t
    }

    #[test]
    fn text_table_is_aligned() {
        let text = sample().render_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "parallel free, 320 GiB");
        assert_eq!(lines[1], "max_active  free (s)  speedup");
        assert_eq!(lines[2], "----------  --------  -------");
        assert_eq!(lines[3], "1               8.90    1.21x");
        assert_eq!(lines[4], "32              6.21    1.74x");
        assert_eq!(lines[5], "a|b");
    }

    #[test]
    fn markdown_table_shape() {
        let md = sample().render_markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines[0], "**parallel free, 320 GiB**");
        assert_eq!(lines[1], "");
        assert_eq!(lines[2], "| max_active | free (s) | speedup |");
        assert_eq!(lines[3], "|:---|---:|---:|");
        assert_eq!(lines[4], "| 1 | 8.90 | 1.21x |");
        assert_eq!(lines[6], "| a\\|b |  |  |");
        assert_eq!(lines.len(), 7);
        // Every table line has one more unescaped pipe than there are columns.
        for l in &lines[2..] {
            assert_eq!(l.replace("\\|", "").matches('|').count(), 4, "{l}");
        }
    }
}
