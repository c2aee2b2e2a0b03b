//! SVG charts: [`line_plot`] (one line per [`Series`], optionally on a logarithmic x axis, for
//! a sweep such as `max_active` = 1, 2, 4, ...) and [`bar_plot`] (grouped bars: a category per
//! phase or machine, a colour per series).
//!
//! Drawn with plotters' SVG backend. Text is emitted as SVG `<text>` and laid out by the
//! viewer, so no font files are needed. Both choose the emptiest corner for the legend and
//! leave headroom above the data; non-finite values are skipped, never drawn.

use std::{ops::Range, path::Path};

use anyhow::{bail, Context, Result};
use plotters::{
    chart::{MeshStyle, SeriesLabelStyle},
    coord::{
        ranged1d::{AsRangedCoord, ValueFormatter},
        Shift,
    },
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};
use serde::Serialize;

/// Every chart's mesh: its fonts, and grid lines faint enough not to compete with the data.
fn house_style<'m, 'a, 'b, X: Ranged, Y: Ranged, DB: DrawingBackend>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB> {
    mesh.label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .light_line_style(RGBColor(0, 0, 0).mix(0.05))
        .bold_line_style(RGBColor(0, 0, 0).mix(0.12))
}

/// Every chart's legend box: its font, a margin, and a light background and border.
fn house_legend<'m, 'a, 'b, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    legend: &'m mut SeriesLabelStyle<'a, 'b, DB, CT>,
) -> &'m mut SeriesLabelStyle<'a, 'b, DB, CT> {
    legend
        .margin(12)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(0, 0, 0).mix(0.4))
}

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

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, PLOT_SIZE).into_drawing_area();
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
            .with_context(|| format!("cannot draw {}", path.display()))?;
    }
    write_svg(path, &svg)
}

/// The drawn chart to `path`, whole ([`usermm_host::files::write_atomic`]).
fn write_svg(path: &Path, svg: &str) -> Result<()> {
    let label = path.display().to_string();
    Ok(usermm_host::files::write_atomic(
        &label,
        path,
        svg.as_bytes(),
    )?)
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
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(labels.x_label)
        .y_desc(labels.y_label)
        .x_label_formatter(&|v| fmt_tick(*v))
        .y_label_formatter(&|v| fmt_tick(*v));
    house_style(&mut mesh).draw()?;
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
        let mut legend = chart.configure_series_labels();
        legend.position(labels.legend.clone()).legend_area_size(28);
        house_legend(&mut legend).draw()?;
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
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, PLOT_SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 24))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(72)
            .build_cartesian_2d(0.0..groups.len() as f64, y)?;
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh()
            .x_labels(0)
            .max_light_lines(1)
            .y_desc(y_label)
            .y_label_formatter(&|v| fmt_tick(*v));
        house_style(&mut mesh).draw()?;
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
            chart.draw_series(bars.iter().map(|&(x, v)| {
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
        let mut labels = chart.configure_series_labels();
        labels.position(legend).legend_area_size(22);
        house_legend(&mut labels).draw()?;
        root.present()
            .with_context(|| format!("cannot draw {}", path.display()))?;
    }
    write_svg(path, &svg)
}

#[cfg(test)]
mod test {
    use std::path::PathBuf;

    use super::*;

    fn tmp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("usermm-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
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
    fn ticks_and_legend_corner() {
        assert_eq!(fmt_tick(4.770), "4.77");
        assert_eq!(fmt_tick(481152.0), "481152");
        assert_eq!(fmt_tick(0.0), "0");
        assert_eq!(log_ticks(&[4.0, 1.0, 2.0, 1.0], 0.8, 5.0), [1.0, 2.0, 4.0]);
        let many: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(log_ticks(&many, 0.9, 25.0), [1.0, 2.0, 5.0, 10.0, 20.0]);
        let corner = emptiest_corner([(0.9, 0.9), (0.1, 0.9), (0.9, 0.1)].into_iter());
        assert!(matches!(corner, SeriesLabelPosition::LowerLeft));
    }
}
