//! Reports: one record rendered many ways (style G17).
//!
//! - [`Table`]: rows of preformatted cells, rendered as aligned plain text for the terminal
//!   ([`Table::render_text`]) or as a Markdown table ([`Table::render_markdown`]).
//! - [`line_plot`] and [`bar_plot`]: SVG charts (plotters' SVG backend; text is emitted as SVG
//!   `<text>` and laid out by the viewer, so no font files are needed).
//! - [`write_report`]: `report.md` (host header, sections, tables, plots) and `results.json` (the
//!   same run as data).
//! - [`Progress`]: a progress bar on stderr that stays silent unless stderr is a terminal.

use std::{
    borrow::Cow,
    fmt::Write as _,
    io::IsTerminal,
    ops::Range,
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context, Result};
use plotters::{
    coord::{
        ranged1d::{AsRangedCoord, ValueFormatter},
        Shift,
    },
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};
use serde::Serialize;
use usermm_host::facts;

// ----- tables ----------------------------------------------------------------------------

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

// ----- plots -----------------------------------------------------------------------------

/// One line of a [`line_plot`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Series {
    /// The legend entry.
    pub name: String,
    /// `(x, y)` in the order to join them; non-finite points are skipped.
    pub points: Vec<(f64, f64)>,
    /// Draw dashed (for references: the seed's figures, an ideal).
    pub dashed: bool,
}

const PLOT_SIZE: (u32, u32) = (900, 540);
const FONT: &str = "sans-serif";
/// Tableau 10: distinguishable, and readable on white.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// A tick label: at most three decimals, no trailing zeros; scientific beyond 10⁶.
fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        return "0".into();
    }
    if !(1e-3..1e6).contains(&a) {
        return format!("{v:.1e}");
    }
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// Ticks of a logarithmic axis: the data's own x values when there are few (a sweep such as
/// max_active = 1, 2, 4, ... reads best against its own points), else 1-2-5 per decade.
fn log_ticks(xs: &[f64], lo: f64, hi: f64) -> Vec<f64> {
    let mut distinct = xs.to_vec();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    if distinct.len() <= 12 {
        return distinct;
    }
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        let in_range = [1.0, 2.0, 5.0].map(|m| m * decade).into_iter();
        ticks.extend(in_range.filter(|t| (lo..=hi).contains(t)));
        decade *= 10.0;
    }
    ticks
}

/// `lo..hi` with room above the data, starting at 0 unless the data goes below it.
fn value_range(lo: f64, hi: f64) -> Range<f64> {
    let lo = lo.min(0.0);
    let hi = hi.max(0.0);
    let span = if hi > lo { hi - lo } else { 1.0 };
    let top = if hi > 0.0 || lo == 0.0 {
        hi + span * 0.08
    } else {
        hi
    };
    lo..top
}

/// The corner of the plot holding the fewest points, for the legend (`pos` normalised to 0..1).
fn emptiest_corner(pos: impl Iterator<Item = (f64, f64)>) -> SeriesLabelPosition {
    let mut count = [0usize; 4]; // upper right, upper left, lower right, lower left
    for (x, y) in pos {
        let right = x > 0.55;
        let left = x < 0.45;
        let (upper, lower) = (y > 0.5, y < 0.5);
        count[0] += usize::from(right && upper);
        count[1] += usize::from(left && upper);
        count[2] += usize::from(right && lower);
        count[3] += usize::from(left && lower);
    }
    let best = (0..4).min_by_key(|&i| (count[i], i)).unwrap_or(0);
    [
        SeriesLabelPosition::UpperRight,
        SeriesLabelPosition::UpperLeft,
        SeriesLabelPosition::LowerRight,
        SeriesLabelPosition::LowerLeft,
    ][best]
        .clone()
}

/// Write an SVG line chart of `series` to `path`: one colour per series, a marker on every
/// point, dashed series dashed, the legend in the emptiest corner. With `log_x` the x axis is
/// logarithmic and every x must be positive.
pub fn line_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Result<()> {
    let finite = |&&(x, y): &&(f64, f64)| x.is_finite() && y.is_finite();
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().filter(finite))
        .copied()
        .collect();
    if all.is_empty() {
        bail!("{}: no points to plot", path.display());
    }
    if log_x && all.iter().any(|&(x, _)| x <= 0.0) {
        bail!(
            "{}: a logarithmic x axis needs positive x values",
            path.display()
        );
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in &all {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    let y = value_range(y0, y1);
    let tx = |x: f64| if log_x { x.ln() } else { x };
    let (nx0, nx1) = (tx(x0), tx(x1));
    let norm = |(x, v): (f64, f64)| {
        let nx = if nx1 > nx0 {
            (tx(x) - nx0) / (nx1 - nx0)
        } else {
            0.5
        };
        (nx, (v - y.start) / (y.end - y.start))
    };
    let legend = emptiest_corner(all.iter().copied().map(norm));
    let labels = Labels {
        title,
        x_label,
        y_label,
        legend,
    };

    let root = SVGBackend::new(path, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    if log_x {
        let (lo, hi) = if x1 > x0 {
            (x0 / 1.15, x1 * 1.15)
        } else {
            (x0 / 2.0, x0 * 2.0)
        };
        let xs: Vec<f64> = all.iter().map(|&(x, _)| x).collect();
        let ticks = log_ticks(&xs, lo, hi);
        draw_lines(
            &root,
            (lo..hi).log_scale().with_key_points(ticks),
            y,
            &labels,
            series,
        )?;
    } else {
        let pad = if x1 > x0 { (x1 - x0) * 0.03 } else { 1.0 };
        draw_lines(&root, (x0 - pad)..(x1 + pad), y, &labels, series)?;
    }
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

struct Labels<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    legend: SeriesLabelPosition,
}

fn draw_lines<X>(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    x: X,
    y: Range<f64>,
    labels: &Labels<'_>,
    series: &[Series],
) -> Result<()>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(labels.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(labels.x_label)
        .y_desc(labels.y_label)
        .x_label_formatter(&|v| fmt_tick(*v))
        .y_label_formatter(&|v| fmt_tick(*v))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .light_line_style(RGBColor(0, 0, 0).mix(0.05))
        .bold_line_style(RGBColor(0, 0, 0).mix(0.12))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        let style = c.stroke_width(2);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let anno = if s.dashed {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 9, 6, style))?
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style))?
        };
        // Two segments: touching for a solid line, apart for a dashed one.
        let gap = if s.dashed { 4 } else { 0 };
        anno.label(s.name.as_str()).legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new([(0, 0), (10 - gap, 0)], style)
                + PathElement::new([(10 + gap, 0), (20, 0)], style)
                + Circle::new((10, 0), 3, c.filled())
        });
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
    }
    if series.iter().any(|s| !s.name.is_empty()) {
        chart
            .configure_series_labels()
            .position(labels.legend.clone())
            .margin(12)
            .legend_area_size(28)
            .label_font((FONT, 15))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(0, 0, 0).mix(0.4))
            .draw()?;
    }
    Ok(())
}

/// Write an SVG grouped bar chart to `path`: one group of bars per category (in the order
/// given), one colour per series name (in order of first appearance), the value above each bar.
/// A series missing from a category leaves a gap.
pub fn bar_plot(
    path: &Path,
    title: &str,
    y_label: &str,
    groups: &[(String, Vec<(String, f64)>)],
) -> Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for (_, bars) in groups {
        for (name, _) in bars {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    let values = groups
        .iter()
        .flat_map(|(_, b)| b.iter().map(|&(_, v)| v))
        .filter(|v| v.is_finite());
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if names.is_empty() || lo > hi {
        bail!("{}: no bars to plot", path.display());
    }
    // Extra headroom: the value labels sit above the bars and the legend in a top corner.
    let y = value_range(lo, hi + (hi - lo.min(0.0)) * 0.12);
    let y_floor = y.start;
    let n = groups.len() as f64;
    let tops = groups
        .iter()
        .enumerate()
        .flat_map(|(i, (_, b))| b.iter().map(move |&(_, v)| ((i as f64 + 0.5) / n, v)));
    let legend = emptiest_corner(tops.map(|(x, v)| (x, (v - y.start) / (y.end - y.start))));
    let root = SVGBackend::new(path, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..groups.len() as f64, y)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .max_light_lines(1)
        .y_desc(y_label)
        .y_label_formatter(&|v| fmt_tick(*v))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .light_line_style(RGBColor(0, 0, 0).mix(0.05))
        .bold_line_style(RGBColor(0, 0, 0).mix(0.12))
        .draw()?;
    let width = 0.8 / names.len() as f64;
    let value_style = TextStyle::from((FONT, 13)).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (j, name) in names.iter().enumerate() {
        let c = color(j);
        let bars: Vec<(f64, f64)> = groups
            .iter()
            .enumerate()
            .filter_map(|(i, (_, b))| {
                let v = b.iter().find(|(n, _)| n == name)?.1;
                v.is_finite()
                    .then_some((i as f64 + 0.1 + j as f64 * width, v))
            })
            .collect();
        chart
            .draw_series(bars.iter().map(|&(x, v)| {
                Rectangle::new(
                    [(x, v.max(0.0)), (x + width * 0.92, v.min(0.0))],
                    c.filled(),
                )
            }))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
        chart
            .draw_series(bars.iter().map(|&(x, v)| {
                Text::new(fmt_tick(v), (x + width * 0.46, v), value_style.clone())
            }))?;
    }
    // Category names under the axis, centred on their group: drawn on the root area in
    // pixels, because the chart's x axis is a plain number line.
    let cat_style = TextStyle::from((FONT, 16)).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, (cat, _)) in groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, y_floor));
        root.draw(&Text::new(cat.as_str(), (px, py + 10), cat_style.clone()))?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .margin(12)
        .legend_area_size(22)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(0, 0, 0).mix(0.4))
        .draw()?;
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

// ----- the report ------------------------------------------------------------------------

/// The facts printed at the top of a report: enough to tell two runs' machines apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostSummary {
    /// CPUs this process may run on.
    pub cpus: usize,
    /// `MemTotal` of the host's `/proc/meminfo`, in kB.
    pub mem_total_kb: Option<u64>,
    /// `uname -r`.
    pub kernel: Option<String>,
    pub usermm_version: String,
    /// `git rev-parse --short HEAD` of the source tree, `-dirty` when it has changes.
    pub git_commit: Option<String>,
    /// Seconds since the epoch when the summary was taken.
    pub generated_unix: u64,
}

impl HostSummary {
    pub fn collect() -> Self {
        HostSummary {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mem_total_kb: facts::mem_total_kb(),
            kernel: facts::kernel_release(),
            usermm_version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: git_commit(),
            generated_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }

    /// One line: `2 CPUs, 23.4 GiB, Linux 6.8.0; usermm 0.1.0 (abc1234); 2026-01-02 03:04 UTC`.
    pub fn render(&self) -> String {
        let mut s = format!("{} CPU{}", self.cpus, if self.cpus == 1 { "" } else { "s" });
        if let Some(kb) = self.mem_total_kb {
            let _ = write!(s, ", {:.1} GiB", kb as f64 / (1 << 20) as f64);
        }
        if let Some(k) = &self.kernel {
            let _ = write!(s, ", Linux {k}");
        }
        let _ = write!(s, "; usermm {}", self.usermm_version);
        if let Some(c) = &self.git_commit {
            let _ = write!(s, " ({c})");
        }
        let _ = write!(s, "; {}", utc_timestamp(self.generated_unix));
        s
    }
}

fn git_commit() -> Option<String> {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"]).filter(|h| !h.is_empty())?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// `YYYY-MM-DD HH:MM UTC` for seconds since the epoch (proleptic Gregorian calendar).
fn utc_timestamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (hh, mm) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Days since 1970-01-01 to a civil date, counting in 400-year eras that start on March 1st.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02} UTC")
}

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
/// (`{"title", "host", "results": results_json}`), creating `out_dir` if needed.
pub fn write_report(
    out_dir: &Path,
    title: &str,
    sections: &[Section],
    results_json: &serde_json::Value,
) -> Result<()> {
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let host = HostSummary::collect();
    let md_path = out_dir.join("report.md");
    std::fs::write(&md_path, render_report(out_dir, title, &host, sections))
        .with_context(|| format!("cannot write {}", md_path.display()))?;
    let record = serde_json::json!({ "title": title, "host": host, "results": results_json });
    let mut json = serde_json::to_string_pretty(&record)?;
    json.push('\n');
    let json_path = out_dir.join("results.json");
    std::fs::write(&json_path, json)
        .with_context(|| format!("cannot write {}", json_path.display()))?;
    Ok(())
}

// ----- progress --------------------------------------------------------------------------

/// A progress bar on stderr, or nothing: it draws only when stderr is a terminal, `CI` is
/// unset and this is not a test build. Cheap to clone; clones share one bar (hand them to
/// worker threads).
#[derive(Debug, Clone)]
pub struct Progress {
    bar: indicatif::ProgressBar,
}

impl Progress {
    /// Would a progress bar be drawn?
    pub fn enabled() -> bool {
        !cfg!(test) && std::env::var_os("CI").is_none() && std::io::stderr().is_terminal()
    }

    /// A bar counting to `len`, labelled `msg`.
    pub fn bar(len: u64, msg: impl Into<Cow<'static, str>>) -> Self {
        if !Self::enabled() {
            return Progress {
                bar: indicatif::ProgressBar::hidden(),
            };
        }
        let style = indicatif::ProgressStyle::with_template(
            "{msg:24} [{bar:40.cyan/blue}] {pos}/{len} {elapsed_precise} (eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
        let bar = indicatif::ProgressBar::new(len)
            .with_style(style)
            .with_message(msg);
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar }
    }

    pub fn inc(&self, delta: u64) {
        self.bar.inc(delta);
    }

    pub fn set_message(&self, msg: impl Into<Cow<'static, str>>) {
        self.bar.set_message(msg);
    }

    /// Remove the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }
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

    fn assert_svg(path: &Path, must_contain: &[&str]) {
        let svg = std::fs::read_to_string(path).unwrap();
        assert!(
            svg.starts_with("<svg") || svg.starts_with("<?xml"),
            "{}",
            &svg[..80]
        );
        assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("<text"), "text must be SVG <text> elements");
        for s in must_contain {
            assert!(svg.contains(s), "{s} not in {}", path.display());
        }
    }

    #[test]
    fn line_plot_writes_svg() {
        let d = tmp_dir("line");
        let series = [
            Series {
                name: "usermm, patched".into(),
                points: vec![
                    (1.0, 8.9),
                    (2.0, 5.65),
                    (4.0, 4.84),
                    (8.0, 4.77),
                    (16.0, 4.85),
                    (32.0, 6.21),
                ],
                dashed: false,
            },
            Series {
                name: "seed 000 (kernel)".into(),
                points: vec![(1.0, 10.8), (32.0, 10.8)],
                dashed: true,
            },
        ];
        let p = d.join("free-time.svg");
        line_plot(
            &p,
            "Free time of 320 GiB vs max_active",
            "max_active",
            "seconds",
            &series,
            true,
        )
        .unwrap();
        assert_svg(
            &p,
            &[
                "Free time of 320 GiB vs max_active",
                "max_active",
                "seconds",
                "seed 000 (kernel)",
            ],
        );
        let p = d.join("linear.svg");
        line_plot(&p, "linear", "x", "y", &series[..1], false).unwrap();
        assert_svg(&p, &["linear"]);
        assert!(line_plot(&p, "t", "x", "y", &[], false).is_err());
        let neg = Series {
            name: "n".into(),
            points: vec![(0.0, 1.0)],
            dashed: false,
        };
        assert!(line_plot(&p, "t", "x", "y", &[neg], true).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bar_plot_writes_svg() {
        let d = tmp_dir("bar");
        let groups = vec![
            (
                "boot".to_string(),
                vec![
                    ("vanilla".to_string(), 7488.0),
                    ("patched".to_string(), 7488.0),
                ],
            ),
            (
                "created".to_string(),
                vec![
                    ("vanilla".to_string(), 481152.0),
                    ("patched".to_string(), 481408.0),
                ],
            ),
            (
                "removed".to_string(),
                vec![
                    ("vanilla".to_string(), 481152.0),
                    ("patched".to_string(), 135552.0),
                ],
            ),
        ];
        let p = d.join("percpu.svg");
        bar_plot(&p, "Percpu after the cgroup script", "kB", &groups).unwrap();
        assert_svg(
            &p,
            &[
                "Percpu after the cgroup script",
                "created",
                "vanilla",
                "patched",
                "135552",
            ],
        );
        assert!(bar_plot(&p, "t", "y", &[]).is_err());
        std::fs::remove_dir_all(&d).unwrap();
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

    #[test]
    fn small_helpers() {
        assert_eq!(utc_timestamp(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_timestamp(1_700_000_000), "2023-11-14 22:13 UTC");
        assert_eq!(fmt_tick(4.770), "4.77");
        assert_eq!(fmt_tick(481152.0), "481152");
        assert_eq!(fmt_tick(0.0), "0");
        assert_eq!(log_ticks(&[4.0, 1.0, 2.0, 1.0], 0.8, 5.0), [1.0, 2.0, 4.0]);
        let many: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(log_ticks(&many, 0.9, 25.0), [1.0, 2.0, 5.0, 10.0, 20.0]);
        let corner = emptiest_corner([(0.9, 0.9), (0.1, 0.9), (0.9, 0.1)].into_iter());
        assert!(matches!(corner, SeriesLabelPosition::LowerLeft));
        assert!(Progress::bar(10, "x").is_hidden());
    }
}
