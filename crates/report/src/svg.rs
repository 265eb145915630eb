//! Inline SVG charts: one frame with a value axis, and the lines, markers, bars,
//! labels and legend drawn in it.
//!
//! Every coordinate that reaches the markup is finite: points with a NaN or infinite
//! coordinate are left out, values are clamped to the axes, and a degenerate range (one
//! point, an empty series) puts things in the middle of the plot.

use std::fmt::Write;

use crate::escape;

/// How many intervals the value axis is divided into; the ticks sit at their ends.
const TICK_INTERVALS: u32 = 4;

/// The space around a chart's plot area, in SVG user units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Margins {
    /// Room for the value axis' tick labels.
    pub left: f64,
    /// Room to the right of the plot.
    pub right: f64,
    /// Room for the legend and the value axis' label.
    pub top: f64,
    /// Room for the category or x-axis labels.
    pub bottom: f64,
}

/// What a chart is and how its plot area maps values.
#[derive(Debug, Clone, Copy)]
pub struct ChartSpec<'a> {
    /// The `id` and `class` of the `<svg>` element; unique in a page.
    pub name: &'a str,
    /// The chart's accessible name, its `<title>`.
    pub title: &'a str,
    /// The width of the whole picture.
    pub width: f64,
    /// The height of the whole picture.
    pub height: f64,
    /// The space around the plot area.
    pub margins: Margins,
    /// The x values at the left and right edges of the plot.
    pub x_range: (f64, f64),
    /// The value at the top of the value axis, which starts at 0.
    pub y_max: f64,
    /// The label under the plot, or empty for none.
    pub x_label: &'a str,
    /// The label above the value axis, or empty for none.
    pub y_label: &'a str,
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesStyle {
    /// A polyline through the points (with a dot when there is only one).
    Line,
    /// A dot per point, each with its own tooltip.
    Markers,
}

/// One data point; `title`, when set, is its tooltip.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The x value.
    pub x: f64,
    /// The y value.
    pub y: f64,
    /// The tooltip, as plain text.
    pub title: Option<String>,
}

impl Point {
    /// A point without a tooltip.
    #[must_use]
    pub fn new(x: f64, y: f64) -> Point {
        Point { x, y, title: None }
    }
}

/// One series of a [`line_chart`].
#[derive(Debug, Clone)]
pub struct Series<'a> {
    /// Its name in the legend.
    pub label: &'a str,
    /// The `class` of its elements, so tests and styles can find them.
    pub class: &'a str,
    /// Its stroke or fill colour.
    pub colour: &'a str,
    /// How it is drawn.
    pub style: SeriesStyle,
    /// The data.
    pub points: Vec<Point>,
}

/// One bar, from the value axis' zero up to `value`.
#[derive(Debug, Clone, Copy)]
pub struct Bar<'a> {
    /// The `class` of the `<rect>`.
    pub class: &'a str,
    /// The left edge, in SVG user units.
    pub x: f64,
    /// The width, in SVG user units.
    pub width: f64,
    /// The value; a NaN or infinite value draws no bar.
    pub value: f64,
    /// The fill colour.
    pub colour: &'a str,
    /// The tooltip, as plain text.
    pub title: &'a str,
    /// `data-*` attributes, as `(name, value)` pairs (the name without `data-`).
    pub data: &'a [(&'a str, &'a str)],
}

/// A chart being drawn: the frame, the value axis and the labels are in place, and the
/// methods add marks in data or SVG coordinates.
///
/// # Example
///
/// ```
/// use flowmem_report::{Bar, Chart, ChartSpec, Margins};
///
/// let spec = ChartSpec {
///     name: "scores",
///     title: "Scores",
///     width: 300.0,
///     height: 200.0,
///     margins: Margins { left: 40.0, right: 10.0, top: 30.0, bottom: 30.0 },
///     x_range: (0.0, 1.0),
///     y_max: 1.0,
///     x_label: "",
///     y_label: "score",
/// };
/// let mut chart = Chart::new(&spec);
/// chart.bar(&Bar { class: "bar", x: 60.0, width: 30.0, value: 0.5, colour: "#4c72b0", title: "a: 0.5", data: &[] });
/// chart.label(75.0, chart.plot_bottom() + 16.0, "a");
/// let svg = chart.finish();
/// assert!(svg.starts_with(r#"<svg id="scores""#) && svg.ends_with("</svg>"));
/// assert_eq!(svg.matches(r#"class="bar""#).count(), 1);
/// ```
#[derive(Debug)]
pub struct Chart {
    svg: String,
    width: f64,
    height: f64,
    margins: Margins,
    x_range: (f64, f64),
    y_max: f64,
}

impl Chart {
    /// Opens the `<svg>` and draws the value axis (grid lines and ticks from 0 to
    /// `y_max`), the axis lines and the axis labels.
    #[must_use]
    pub fn new(spec: &ChartSpec<'_>) -> Chart {
        let width = positive_or(spec.width, 100.0);
        let height = positive_or(spec.height, 100.0);
        let y_max = positive_or(spec.y_max, 1.0);
        let x_range = if spec.x_range.0.is_finite() && spec.x_range.1.is_finite() { spec.x_range } else { (0.0, 0.0) };
        let mut chart = Chart {
            svg: svg_open(spec.name, width, height, spec.title),
            width,
            height,
            margins: spec.margins,
            x_range,
            y_max,
        };
        chart.value_axis();
        let (left, bottom) = (chart.plot_left(), chart.plot_bottom());
        let _ = write!(
            chart.svg,
            r##"<line class="axis" x1="{left:.1}" y1="{top:.1}" x2="{left:.1}" y2="{bottom:.1}" stroke="#333"/><line class="axis" x1="{left:.1}" y1="{bottom:.1}" x2="{right:.1}" y2="{bottom:.1}" stroke="#333"/>"##,
            top = chart.plot_top(),
            right = chart.plot_right(),
        );
        if !spec.x_label.is_empty() {
            let x = (chart.plot_left() + chart.plot_right()) / 2.0;
            chart.label(x, height - 8.0, spec.x_label);
        }
        if !spec.y_label.is_empty() {
            let _ = write!(chart.svg, r#"<text x="4" y="14" font-size="11">{}</text>"#, escape(spec.y_label));
        }
        chart
    }

    /// The left edge of the plot area.
    #[must_use]
    pub fn plot_left(&self) -> f64 {
        self.margins.left
    }

    /// The right edge of the plot area.
    #[must_use]
    pub fn plot_right(&self) -> f64 {
        (self.width - self.margins.right).max(self.margins.left)
    }

    /// The top edge of the plot area, where the value axis reaches `y_max`.
    #[must_use]
    pub fn plot_top(&self) -> f64 {
        self.margins.top
    }

    /// The bottom edge of the plot area, where the value axis is 0.
    #[must_use]
    pub fn plot_bottom(&self) -> f64 {
        (self.height - self.margins.bottom).max(self.margins.top)
    }

    /// The horizontal position of `x`, clamped to the plot; a degenerate x range or a
    /// NaN puts it in the middle.
    #[must_use]
    pub fn x(&self, x: f64) -> f64 {
        let (lo, hi) = self.x_range;
        if hi <= lo || !x.is_finite() {
            return (self.plot_left() + self.plot_right()) / 2.0;
        }
        self.plot_left() + (self.plot_right() - self.plot_left()) * ((x - lo) / (hi - lo)).clamp(0.0, 1.0)
    }

    /// The vertical position of `value`, clamped to the value axis; a NaN sits at 0.
    #[must_use]
    pub fn y(&self, value: f64) -> f64 {
        let share = if value.is_nan() { 0.0 } else { (value / self.y_max).clamp(0.0, 1.0) };
        self.plot_bottom() - (self.plot_bottom() - self.plot_top()) * share
    }

    /// Draws `series` as a line or as markers. Points with a NaN or infinite coordinate
    /// are left out; a line is drawn (empty) even when no point remains, so every series
    /// has its element.
    pub fn series(&mut self, series: &Series<'_>) {
        let points: Vec<&Point> = series.points.iter().filter(|p| p.x.is_finite() && p.y.is_finite()).collect();
        let class = escape(series.class);
        let colour = escape(series.colour);
        match series.style {
            SeriesStyle::Line => {
                let coords: Vec<String> =
                    points.iter().map(|p| format!("{:.1},{:.1}", self.x(p.x), self.y(p.y))).collect();
                let _ = write!(
                    self.svg,
                    r#"<polyline class="{class}" fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                    coords.join(" ")
                );
                // A line through one point has no length; a dot keeps it visible.
                if let [only] = points[..] {
                    self.marker(&format!("{class}-point"), &colour, only);
                }
            }
            SeriesStyle::Markers => {
                for point in points {
                    self.marker(&class, &colour, point);
                }
            }
        }
    }

    /// Draws a bar from 0 up to its value, at least one unit high so a tiny value stays
    /// visible; a zero value draws a bar of zero height.
    pub fn bar(&mut self, bar: &Bar<'_>) {
        if !bar.value.is_finite() || !bar.x.is_finite() || !bar.width.is_finite() {
            return;
        }
        let top = self.y(bar.value);
        let _ = write!(self.svg, r#"<rect class="{}""#, escape(bar.class));
        for (name, value) in bar.data {
            let _ = write!(self.svg, r#" data-{}="{}""#, escape(name), escape(value));
        }
        let _ = write!(
            self.svg,
            r#" x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}</title></rect>"#,
            bar.x,
            bar.width.max(0.0),
            self.plot_bottom() - top,
            escape(bar.colour),
            escape(bar.title),
        );
    }

    /// Writes `text` centred at `(x, y)`, in SVG coordinates.
    pub fn label(&mut self, x: f64, y: f64, text: &str) {
        let (x, y) = (finite_or(x, 0.0), finite_or(y, 0.0));
        let _ = write!(self.svg, r#"<text x="{x:.1}" y="{y:.1}" text-anchor="middle">{}</text>"#, escape(text));
    }

    /// Draws a legend, one swatch and label per `(label, colour)`, in a row above the
    /// top right corner of the plot.
    pub fn legend(&mut self, entries: &[(&str, &str)]) {
        let widths: Vec<f64> = entries.iter().map(|(label, _)| 30.0 + 7.0 * label.chars().count() as f64).collect();
        let mut x = (self.plot_right() - widths.iter().sum::<f64>()).max(0.0);
        for ((label, colour), width) in entries.iter().zip(widths) {
            let _ = write!(
                self.svg,
                r#"<rect x="{x:.1}" y="8" width="12" height="12" fill="{}"/><text x="{:.1}" y="18">{}</text>"#,
                escape(colour),
                x + 16.0,
                escape(label),
            );
            x += width;
        }
    }

    /// Appends `markup` as it is, for marks this module does not draw (box plots).
    /// The caller escapes any text in it with [`escape`].
    pub fn push_markup(&mut self, markup: &str) {
        self.svg.push_str(markup);
    }

    /// Closes the `<svg>` and returns it.
    #[must_use]
    pub fn finish(mut self) -> String {
        self.svg.push_str("</svg>");
        self.svg
    }

    fn value_axis(&mut self) {
        let (left, right) = (self.plot_left(), self.plot_right());
        for step in 0..=TICK_INTERVALS {
            let value = self.y_max * f64::from(step) / f64::from(TICK_INTERVALS);
            let at = self.y(value);
            let _ = write!(
                self.svg,
                r##"<line class="grid" x1="{left:.1}" x2="{right:.1}" y1="{at:.1}" y2="{at:.1}" stroke="#ddd"/><text x="{tx:.1}" y="{ty:.1}" font-size="11" text-anchor="end">{value:.2}</text>"##,
                tx = left - 6.0,
                ty = at + 4.0,
            );
        }
    }

    fn marker(&mut self, class: &str, colour: &str, point: &Point) {
        let _ = write!(
            self.svg,
            r#"<circle class="{class}" cx="{:.1}" cy="{:.1}" r="3" fill="{colour}">"#,
            self.x(point.x),
            self.y(point.y)
        );
        if let Some(title) = &point.title {
            let _ = write!(self.svg, "<title>{}</title>", escape(title));
        }
        self.svg.push_str("</circle>");
    }
}

/// A line chart: every series in one plot, with a legend when `legend` is set.
///
/// # Example
///
/// ```
/// use flowmem_report::{ChartSpec, Margins, Point, Series, SeriesStyle, line_chart};
///
/// let spec = ChartSpec {
///     name: "curve",
///     title: "Success rate",
///     width: 400.0,
///     height: 240.0,
///     margins: Margins { left: 50.0, right: 20.0, top: 30.0, bottom: 40.0 },
///     x_range: (0.0, 2.0),
///     y_max: 1.0,
///     x_label: "tasks seen",
///     y_label: "",
/// };
/// let rates = [0.0, 0.5, 2.0 / 3.0];
/// let series = Series {
///     label: "with memory",
///     class: "curve",
///     colour: "#1f77b4",
///     style: SeriesStyle::Line,
///     points: rates.iter().enumerate().map(|(i, rate)| Point::new(i as f64, *rate)).collect(),
/// };
/// let svg = line_chart(&spec, &[series], true);
/// assert_eq!(svg.matches(r#"<polyline class="curve""#).count(), 1);
/// assert!(svg.contains(">with memory</text>"));
/// ```
#[must_use]
pub fn line_chart(spec: &ChartSpec<'_>, series: &[Series<'_>], legend: bool) -> String {
    let mut chart = Chart::new(spec);
    for one in series {
        chart.series(one);
    }
    if legend {
        let entries: Vec<(&str, &str)> = series.iter().map(|one| (one.label, one.colour)).collect();
        chart.legend(&entries);
    }
    chart.finish()
}

/// Opens an `<svg>` element named `name` (its `id` and `class`) of the given size, with
/// `title` as its accessible name; the caller appends the marks and `</svg>`.
///
/// # Example
///
/// ```
/// let svg = flowmem_report::svg_open("tree", 200.0, 100.0, "The search tree");
/// assert!(svg.starts_with(r#"<svg id="tree" class="tree""#));
/// assert!(svg.ends_with("<title>The search tree</title>"));
/// ```
#[must_use]
pub fn svg_open(name: &str, width: f64, height: f64, title: &str) -> String {
    let name = escape(name);
    let (width, height) = (positive_or(width, 100.0), positive_or(height, 100.0));
    format!(
        r#"<svg id="{name}" class="{name}" xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" role="img" font-family="sans-serif" font-size="12"><title>{}</title>"#,
        escape(title)
    )
}

fn positive_or(value: f64, default: f64) -> f64 {
    if value.is_finite() && value > 0.0 { value } else { default }
}

fn finite_or(value: f64, default: f64) -> f64 {
    if value.is_finite() { value } else { default }
}

#[cfg(test)]
mod tests {
    use crate::{Bar, Chart, ChartSpec, Margins, Point, Series, SeriesStyle, line_chart};

    fn spec(x_range: (f64, f64)) -> ChartSpec<'static> {
        ChartSpec {
            name: "test-chart",
            title: "a <test> chart",
            width: 400.0,
            height: 200.0,
            margins: Margins { left: 50.0, right: 10.0, top: 30.0, bottom: 40.0 },
            x_range,
            y_max: 1.0,
            x_label: "x & more",
            y_label: "y",
        }
    }

    fn line(points: Vec<Point>) -> Series<'static> {
        Series { label: "one", class: "curve", colour: "#123456", style: SeriesStyle::Line, points }
    }

    /// Every number in the attributes of `svg` parses as a finite float.
    fn assert_well_formed(svg: &str) {
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>"), "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert_eq!(svg.matches("<svg").count(), svg.matches("</svg>").count());
        assert_eq!(svg.matches("<title>").count(), svg.matches("</title>").count(), "{svg}");
        for attr in ["x", "y", "cx", "cy", "x1", "x2", "y1", "y2", "width", "height"] {
            for part in svg.split(&format!(" {attr}=\"")).skip(1) {
                let value = &part[..part.find('"').unwrap()];
                assert!(value.parse::<f64>().is_ok_and(f64::is_finite), "{attr}={value:?} in {svg}");
            }
        }
        for part in svg.split(" points=\"").skip(1) {
            let value = &part[..part.find('"').unwrap()];
            for pair in value.split_whitespace() {
                let (x, y) = pair.split_once(',').unwrap();
                assert!(x.parse::<f64>().is_ok() && y.parse::<f64>().is_ok(), "{pair} in {svg}");
            }
        }
    }

    fn points_of(svg: &str) -> Vec<(f64, f64)> {
        let start = svg.find(" points=\"").unwrap() + " points=\"".len();
        let end = start + svg[start..].find('"').unwrap();
        svg[start..end]
            .split_whitespace()
            .map(|pair| {
                let (x, y) = pair.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn an_empty_chart_has_axes_and_an_empty_line() {
        let svg = line_chart(&spec((0.0, 0.0)), &[line(Vec::new())], true);
        assert_well_formed(&svg);
        assert_eq!(svg.matches(r#"<polyline class="curve""#).count(), 1);
        assert!(points_of(&svg).is_empty());
        assert_eq!(svg.matches(r#"class="grid""#).count(), 5, "ticks at 0, 0.25, 0.5, 0.75, 1");
        assert!(svg.contains("<title>a &lt;test&gt; chart</title>") && svg.contains(">x &amp; more</text>"));
    }

    #[test]
    fn one_point_sits_in_the_middle_with_a_dot() {
        let svg = line_chart(&spec((0.0, 0.0)), &[line(vec![Point::new(0.0, 0.5)])], false);
        assert_well_formed(&svg);
        // The plot spans x 50..390 and y 30..160.
        assert_eq!(points_of(&svg), [(220.0, 95.0)]);
        assert!(svg.contains(r#"<circle class="curve-point" cx="220.0" cy="95.0""#), "{svg}");
    }

    #[test]
    fn many_points_span_the_plot_and_values_are_clamped() {
        let points = (0..5).map(|i| Point::new(f64::from(i), [0.0, 0.25, 1.0, 2.0, -1.0][i as usize])).collect();
        let svg = line_chart(&spec((0.0, 4.0)), &[line(points)], false);
        assert_well_formed(&svg);
        let xs: Vec<f64> = points_of(&svg).iter().map(|p| p.0).collect();
        assert_eq!(xs, [50.0, 135.0, 220.0, 305.0, 390.0]);
        let ys: Vec<f64> = points_of(&svg).iter().map(|p| p.1).collect();
        assert_eq!(ys, [160.0, 127.5, 30.0, 30.0, 160.0]);
        assert!(!svg.contains("curve-point"), "a line of several points needs no dot");
    }

    #[test]
    fn nan_and_infinite_points_are_left_out() {
        let points =
            vec![Point::new(0.0, 0.5), Point::new(1.0, f64::NAN), Point::new(f64::INFINITY, 0.5), Point::new(2.0, 1.0)];
        let markers = Series {
            label: "dots",
            class: "candidate",
            colour: "#ff7f0e",
            style: SeriesStyle::Markers,
            points: vec![
                Point { x: f64::NAN, y: 0.1, title: None },
                Point { x: 1.0, y: 0.2, title: Some("<1>".into()) },
            ],
        };
        let svg = line_chart(&spec((0.0, 2.0)), &[line(points), markers], true);
        assert_well_formed(&svg);
        assert_eq!(points_of(&svg).len(), 2);
        assert_eq!(svg.matches(r#"class="candidate""#).count(), 1);
        assert!(svg.contains("<title>&lt;1&gt;</title>"));
    }

    #[test]
    fn a_nonsensical_spec_still_gives_finite_markup() {
        let bad =
            ChartSpec { width: f64::NAN, height: -1.0, y_max: f64::NAN, x_range: (f64::NAN, 1.0), ..spec((0.0, 1.0)) };
        let svg = line_chart(&bad, &[line(vec![Point::new(0.5, 0.5)])], true);
        assert_well_formed(&svg);
    }

    #[test]
    fn bars_rise_from_zero_and_nan_bars_are_skipped() {
        let mut chart = Chart::new(&spec((0.0, 1.0)));
        let data = [("system", "a\"b")];
        for value in [0.5, 0.0, f64::NAN] {
            chart.bar(&Bar { class: "bar", x: 60.0, width: 20.0, value, colour: "red", title: "t", data: &data });
        }
        let svg = chart.finish();
        assert_well_formed(&svg);
        assert_eq!(svg.matches(r#"class="bar""#).count(), 2);
        assert!(svg.contains(r#"data-system="a&quot;b" x="60.0" y="95.0" width="20.0" height="65.0""#), "{svg}");
        assert!(svg.contains(r#"y="160.0" width="20.0" height="0.0""#), "a zero bar has no height: {svg}");
    }
}
