//! Reports: one record rendered many ways (style G17).
//!
//! - [`table`]: [`Table`], rendered as aligned plain text or as Markdown.
//! - [`plot`]: [`line_plot`] and [`bar_plot`], SVG charts.
//! - [`host`]: [`HostSummary`], the host line that heads a report.
//! - [`document`]: [`write_report`], `report.md` + `results.json`.
//! - [`format`](mod@format): how numbers and sizes are written (`16M`, `2 485 692`, `+164 %`).
//! - [`progress`]: [`Progress`], a progress bar on stderr.
//!
//! Nothing here knows a command or an experiment: commands build their records and choose
//! what to show; this module lays it out.

pub mod document;
pub mod format;
pub mod host;
pub mod plot;
pub mod progress;
pub mod table;

pub use document::{render_report, write_report, Section};
pub use host::HostSummary;
pub use plot::{bar_plot, line_plot, Series};
pub use progress::Progress;
pub use table::Table;
