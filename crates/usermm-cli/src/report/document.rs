//! The report on disk: `report.md` (the host line, then one [`Section`] per experiment with
//! its prose, tables and plots) and `results.json` (the same run as data: `{"title", "host",
//! "results"}`), written by [`write_report`].
//!
//! Keys of `results.json` are sorted (the record goes through a `serde_json::Value`), so two
//! runs' files diff line by line whatever the order of the fields in the records.

use std::{
    borrow::Cow,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::Result;
use serde::Serialize;

use super::host::HostSummary;
use super::table::Table;

/// One section of `report.md`: a heading, prose, tables, then plots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Section {
    pub heading: String,
    /// Markdown, written as is.
    pub text: String,
    pub tables: Vec<Table>,
    /// SVG files, linked relative to the report's directory when they are inside it.
    pub plots: Vec<PathBuf>,
}

/// The Markdown of a report written into `out_dir`.
pub fn render_report(
    out_dir: &Path,
    title: &str,
    host: &HostSummary,
    sections: &[Section],
) -> String {
    let mut md = format!("# {title}\n\n{}\n", host.render());
    for s in sections {
        let _ = write!(md, "\n## {}\n\n", s.heading);
        if !s.text.is_empty() {
            md.push_str(s.text.trim_end());
            md.push_str("\n\n");
        }
        for t in &s.tables {
            md.push_str(&t.render_markdown());
            md.push('\n');
        }
        for p in &s.plots {
            let link = p.strip_prefix(out_dir).unwrap_or(p);
            let alt = p
                .file_stem()
                .map_or(Cow::Borrowed(""), |s| s.to_string_lossy());
            let _ = write!(md, "![{alt}]({})\n\n", link.display());
        }
    }
    md.truncate(md.trim_end().len());
    md.push('\n');
    md
}

/// Write `out_dir/report.md` (the host line, then each section) and `out_dir/results.json`
/// (`{"title", "host", "results": results}`) into the directory `out_dir`, each file whole
/// ([`usermm_host::files::write_atomic`]).
pub fn write_report(
    out_dir: &Path,
    title: &str,
    sections: &[Section],
    results: &impl Serialize,
) -> Result<()> {
    let host = HostSummary::collect();
    let write = |name: &str, text: &str| -> Result<()> {
        let path = out_dir.join(name);
        let label = path.display().to_string();
        Ok(usermm_host::files::write_atomic(
            &label,
            &path,
            text.as_bytes(),
        )?)
    };
    write("report.md", &render_report(out_dir, title, &host, sections))?;
    let record = serde_json::json!({ "title": title, "host": host, "results": results });
    let mut json = serde_json::to_string_pretty(&record)?;
    json.push('\n');
    write("results.json", &json)
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

    fn tmp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("usermm-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn report_files() {
        let d = tmp_dir("report");
        let plot = d.join("p.svg");
        let sections = [Section {
            heading: "Seed 000".into(),
            text: "Parallel free.".into(),
            tables: vec![sample()],
            plots: vec![plot],
        }];
        write_report(
            &d,
            "usermm reproduce",
            &sections,
            &serde_json::json!({"bigfree": [1, 2]}),
        )
        .unwrap();
        let md = std::fs::read_to_string(d.join("report.md")).unwrap();
        assert!(md.starts_with("# usermm reproduce\n\n"), "{md}");
        assert!(
            md.contains("\n## Seed 000\n\nParallel free.\n\n**parallel free, 320 GiB**\n"),
            "{md}"
        );
        assert!(md.contains("\n![p](p.svg)\n"), "{md}");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("results.json")).unwrap())
                .unwrap();
        assert_eq!(json["results"]["bigfree"][1], 2);
        assert!(json["host"]["cpus"].as_u64().unwrap() >= 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
