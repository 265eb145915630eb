//! flowmem's HTML reports: one page shell, one escape, and the inline SVG charts that
//! eval's comparison report, the scout report and the learning curve share.
//!
//! Reports are single self-contained pages: no scripts, nothing loaded, so they open
//! offline and can be mailed.
//!
//! # Brief overview
//!
//! - [`render_page`] renders a report template that extends the shell
//!   [`PAGE_TEMPLATE`] (`templates/page.html.j2`: the stylesheet, the `<title>` and the
//!   `<h1>`). Values are HTML-escaped unless wrapped in [`Markup`]; [`error_page`] stands
//!   in for a page whose template failed. [`render_page_with`] adds templates the page
//!   may extend or include (the web UI's layout).
//! - [`escape`] is the one escape for text in HTML and SVG.
//! - [`Chart`] draws a plot area with a value axis from a [`ChartSpec`]; its methods add
//!   [`Series`] (lines or markers of [`Point`]s), [`Bar`]s, labels and a legend.
//!   [`line_chart`] is the common case, and [`svg_open`] starts pictures that are not
//!   charts (trees, graphs).
//!
//! # Example
//!
//! ```
//! use flowmem_report::{ChartSpec, Margins, Markup, Point, Series, SeriesStyle, line_chart, render_page};
//!
//! #[derive(serde::Serialize)]
//! struct Ctx<'a> {
//!     title: &'a str,
//!     chart: Markup,
//! }
//!
//! let spec = ChartSpec {
//!     name: "scores",
//!     title: "Score per iteration",
//!     width: 400.0,
//!     height: 240.0,
//!     margins: Margins { left: 50.0, right: 20.0, top: 30.0, bottom: 40.0 },
//!     x_range: (0.0, 2.0),
//!     y_max: 1.0,
//!     x_label: "iteration",
//!     y_label: "score",
//! };
//! let points = [0.2, 0.5, 0.9].iter().enumerate().map(|(i, v)| Point::new(i as f64, *v)).collect();
//! let series = Series { label: "score", class: "score", colour: "#1f77b4", style: SeriesStyle::Line, points };
//! let chart = Markup::new(line_chart(&spec, &[series], false));
//!
//! let template = r#"{% extends "page.html.j2" %}{% block content %}{{ chart }}{% endblock %}"#;
//! let html = render_page("scores.html.j2", template, &Ctx { title: "Scores", chart })?;
//! assert!(html.contains("<h1>Scores</h1>") && html.contains(r#"<svg id="scores""#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod escape;
mod page;
mod svg;

pub use crate::escape::escape;
pub use crate::page::{Markup, PAGE_TEMPLATE, ReportError, error_page, render_page, render_page_with};
pub use crate::svg::{Bar, Chart, ChartSpec, Margins, Point, Series, SeriesStyle, line_chart, svg_open};
