//! Rendering an [`EvalReport`] as a Markdown table and as a self-contained HTML page with
//! inline SVG charts (no scripts, no external resources).

use std::fmt::Write;
use std::path::{Path, PathBuf};

use flowmem_model::{JsonlError, WriteError, write_json_atomic, write_jsonl_atomic, write_text_atomic};
use flowmem_report::{Bar, Chart, ChartSpec, Margins, Markup, error_page, escape, render_page};
use serde::Serialize;

use crate::EvalError;
use crate::report::{EvalReport, SystemSummary};

const REPORT_TEMPLATE: &str = include_str!("../templates/report.html.j2");

/// Renders the per-system figures and the comparisons as Markdown tables.
///
/// # Example
///
/// ```
/// use flowmem_eval::{render_markdown, summarize};
/// let markdown = render_markdown(&summarize(Vec::new()));
/// assert!(markdown.starts_with("| system |"));
/// ```
#[must_use]
pub fn render_markdown(report: &EvalReport) -> String {
    let mut out = String::new();
    out.push_str("| system | role | records | runs | errors | TC | fitness | precision | ES | task success | CV(ES) | latency s/query | LLM calls/query | tokens/query | tool calls/query | reward |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for s in &report.systems {
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.4} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.1} | {:.2} | {} |",
            cell(&s.system),
            role_name(s),
            s.n_records,
            s.n_runs,
            s.n_errors,
            s.mean_tc,
            opt(s.conformance.map(|c| c.fitness), 4),
            opt(s.conformance.map(|c| c.precision), 4),
            opt(s.mean_es, 4),
            opt(s.task_success_rate, 4),
            opt(s.mean_cv_es, 4),
            s.latency_ms_per_query / 1000.0,
            s.llm_calls_per_query,
            s.tokens_per_query,
            s.tool_calls_per_query,
            opt(s.mean_reward, 4),
        );
    }
    if let Some(alpha) = report.alpha {
        let _ = writeln!(
            out,
            "\nreward = {alpha}·TC + {}·ES (FlowScout Eq. 7), of the means; TC alone for a system without ES.",
            1.0 - alpha
        );
    }
    let n_unjudged: usize = report.systems.iter().map(|s| s.n_unjudged).sum();
    if n_unjudged > 0 {
        let _ = writeln!(
            out,
            "\n{n_unjudged} runs have no ES because the judge failed on them; ES is the mean over judged runs."
        );
    }
    if !report.comparisons.is_empty() {
        out.push_str("\nRelative change of the workflow over the baseline (FlowScout's convention: improvement = (workflow − baseline) / baseline; CV reduction = (baseline − workflow) / baseline):\n\n");
        out.push_str(
            "| workflow | baseline | TC | ES | task success | CV(ES) reduction | latency overhead | reward |\n",
        );
        out.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
        for c in &report.comparisons {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                cell(&c.workflow),
                cell(&c.baseline),
                pct(c.tc_improvement_pct),
                pct(c.es_improvement_pct),
                pct(c.task_success_improvement_pct),
                pct(c.cv_reduction_pct),
                pct(c.latency_overhead_pct),
                pct(c.reward_improvement_pct),
            );
        }
    }
    out
}

/// Renders a self-contained HTML report: the Markdown figures as HTML tables, a bar chart
/// of TC, ES and task success per system (`<svg id="score-bars">`), and a box plot of the
/// per-record CV of ES per system (`<svg id="cv-boxplot">`).
///
/// The page has no scripts and loads nothing, so it opens offline and can be mailed.
#[must_use]
pub fn render_html(report: &EvalReport, title: &str) -> String {
    let ctx = HtmlContext {
        title,
        systems: report.systems.iter().map(SystemRow::new).collect(),
        comparisons: report
            .comparisons
            .iter()
            .map(|c| ComparisonRow {
                workflow: &c.workflow,
                baseline: &c.baseline,
                tc: pct(c.tc_improvement_pct),
                es: pct(c.es_improvement_pct),
                task_success: pct(c.task_success_improvement_pct),
                cv: pct(c.cv_reduction_pct),
                latency: pct(c.latency_overhead_pct),
                reward: pct(c.reward_improvement_pct),
            })
            .collect(),
        score_bars: Markup::new(score_bars_svg(&report.systems)),
        cv_boxplot: Markup::new(cv_boxplot_svg(&report.systems)),
        n_runs: report.runs.len(),
        alpha: report.alpha,
    };
    // The template is compiled into the binary and its variables are all set above, so
    // a failure here is a bug in this file; the error text then stands in for the page.
    render_page("report.html.j2", REPORT_TEMPLATE, &ctx).unwrap_or_else(|err| error_page(&err))
}

/// The files [`write_report`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportFiles {
    /// The whole report as JSON (`report.json`).
    pub json: PathBuf,
    /// The Markdown tables (`report.md`).
    pub markdown: PathBuf,
    /// The self-contained HTML page (`report.html`).
    pub html: PathBuf,
    /// One [`RunMeasurement`](crate::RunMeasurement) a line (`runs.jsonl`).
    pub runs: PathBuf,
}

impl ReportFiles {
    /// The files a report in `dir` consists of, which [`write_report`] writes.
    #[must_use]
    pub fn in_dir(dir: &Path) -> ReportFiles {
        ReportFiles {
            json: dir.join("report.json"),
            markdown: dir.join("report.md"),
            html: dir.join("report.html"),
            runs: dir.join("runs.jsonl"),
        }
    }

    /// Every file, in the order listed above.
    #[must_use]
    pub fn all(&self) -> [&Path; 4] {
        [&self.json, &self.markdown, &self.html, &self.runs]
    }
}

/// Writes `report.json`, `report.md`, `report.html` and `runs.jsonl` into `dir`,
/// creating it if needed.
///
/// # Errors
///
/// [`EvalError::Write`] naming the file that could not be written.
pub fn write_report(report: &EvalReport, title: &str, dir: &Path) -> Result<ReportFiles, EvalError> {
    let files = ReportFiles::in_dir(dir);
    std::fs::create_dir_all(dir).map_err(|source| EvalError::Write { path: dir.to_path_buf(), source })?;
    let written = |err: WriteError| EvalError::Write { path: err.path, source: err.source };
    write_json_atomic(&files.json, report).map_err(written)?;
    write_text_atomic(&files.markdown, &render_markdown(report)).map_err(written)?;
    write_text_atomic(&files.html, &render_html(report, title)).map_err(written)?;
    write_jsonl_atomic(&files.runs, &report.runs).map_err(|err| match err {
        JsonlError::Write { path, source } => EvalError::Write { path, source },
        // Any other failure is a run that does not serialise; report it as a write.
        other => EvalError::Write { path: files.runs.clone(), source: std::io::Error::other(other) },
    })?;
    Ok(files)
}

#[derive(Serialize)]
struct HtmlContext<'a> {
    title: &'a str,
    systems: Vec<SystemRow<'a>>,
    comparisons: Vec<ComparisonRow<'a>>,
    score_bars: Markup,
    cv_boxplot: Markup,
    n_runs: usize,
    alpha: Option<f64>,
}

#[derive(Serialize)]
struct SystemRow<'a> {
    system: &'a str,
    role: &'static str,
    n_records: usize,
    n_runs: usize,
    n_errors: usize,
    tc: String,
    fitness: String,
    precision: String,
    es: String,
    task_success: String,
    cv: String,
    latency_s: String,
    llm_calls: String,
    tokens: String,
    tool_calls: String,
    reward: String,
}

impl<'a> SystemRow<'a> {
    fn new(s: &'a SystemSummary) -> SystemRow<'a> {
        SystemRow {
            system: &s.system,
            role: role_name(s),
            n_records: s.n_records,
            n_runs: s.n_runs,
            n_errors: s.n_errors,
            tc: format!("{:.4}", s.mean_tc),
            fitness: opt(s.conformance.map(|c| c.fitness), 4),
            precision: opt(s.conformance.map(|c| c.precision), 4),
            es: opt(s.mean_es, 4),
            task_success: opt(s.task_success_rate, 4),
            cv: opt(s.mean_cv_es, 4),
            latency_s: format!("{:.2}", s.latency_ms_per_query / 1000.0),
            llm_calls: format!("{:.2}", s.llm_calls_per_query),
            tokens: format!("{:.1}", s.tokens_per_query),
            tool_calls: format!("{:.2}", s.tool_calls_per_query),
            reward: opt(s.mean_reward, 4),
        }
    }
}

#[derive(Serialize)]
struct ComparisonRow<'a> {
    workflow: &'a str,
    baseline: &'a str,
    tc: String,
    es: String,
    task_success: String,
    cv: String,
    latency: String,
    reward: String,
}

// Chart geometry, in SVG user units.
const CHART_HEIGHT: f64 = 300.0;
const PLOT_TOP: f64 = 30.0;
const PLOT_BOTTOM: f64 = 250.0;
const PLOT_LEFT: f64 = 50.0;
const METRIC_COLORS: [(&str, &str); 3] = [("TC", "#4c72b0"), ("ES", "#dd8452"), ("task success", "#55a868")];

/// A chart of `width` with the value axis from 0 to `y_max`.
fn chart(name: &str, title: &str, width: f64, y_max: f64) -> Chart {
    Chart::new(&ChartSpec {
        name,
        title,
        width,
        height: CHART_HEIGHT,
        margins: Margins { left: PLOT_LEFT, right: 10.0, top: PLOT_TOP, bottom: CHART_HEIGHT - PLOT_BOTTOM },
        x_range: (0.0, 1.0),
        y_max,
        x_label: "",
        y_label: "",
    })
}

fn score_bars_svg(systems: &[SystemSummary]) -> String {
    let group_width = 150.0;
    let bar_width = 36.0;
    let width = PLOT_LEFT + 20.0 + group_width * systems.len().max(1) as f64;
    let mut chart = chart("score-bars", "Mean TC, ES and task success per system", width, 1.0);
    for (idx, system) in systems.iter().enumerate() {
        let left = PLOT_LEFT + 20.0 + group_width * idx as f64;
        let values = [Some(system.mean_tc), system.mean_es, system.task_success_rate];
        for (k, ((metric, color), value)) in METRIC_COLORS.iter().zip(values).enumerate() {
            let Some(value) = value else { continue };
            chart.bar(&Bar {
                class: "bar",
                x: left + bar_width * k as f64,
                width: bar_width - 4.0,
                value,
                colour: color,
                title: &format!("{} {metric}: {value:.4}", system.system),
                data: &[("system", system.system.as_str()), ("metric", metric)],
            });
        }
        chart.label(left + bar_width * 1.5, PLOT_BOTTOM + 18.0, &system.system);
    }
    chart.legend(&METRIC_COLORS);
    chart.finish()
}

/// A box plot of each system's per-record coefficients of variation of ES (FlowScout's
/// Fig. 3): quartiles interpolated like NumPy, whiskers at 1.5 IQR like matplotlib,
/// outliers as circles, as self-contained SVG.
#[must_use]
pub fn cv_boxplot_svg(systems: &[SystemSummary]) -> String {
    let group_width = 120.0;
    let width = PLOT_LEFT + 20.0 + group_width * systems.len().max(1) as f64;
    let max_cv = systems.iter().flat_map(|s| s.cv_es.iter().map(|c| c.cv)).fold(0.0f64, f64::max);
    // Round the axis up to a fifth, so the quarter ticks are multiples of 0.05.
    let top = ((max_cv * 5.0).ceil() / 5.0).max(0.2);
    let mut chart = chart("cv-boxplot", "Coefficient of variation of ES per record, per system", width, top);
    for (idx, system) in systems.iter().enumerate() {
        let center = PLOT_LEFT + 20.0 + group_width * idx as f64 + group_width / 2.0 - 10.0;
        chart.label(center, PLOT_BOTTOM + 18.0, &system.system);
        let mut values: Vec<f64> = system.cv_es.iter().map(|c| c.cv).filter(|cv| cv.is_finite()).collect();
        if values.is_empty() {
            chart.label(center, PLOT_BOTTOM - 10.0, "no repeats");
            continue;
        }
        values.sort_by(f64::total_cmp);
        let stats = BoxStats::new(&values);
        let sys = escape(&system.system);
        let half = 22.0;
        let y = |value: f64| chart.y(value);
        let mut markup = format!(
            r##"<g class="box" data-system="{sys}"><title>{sys}: median {med:.4}, IQR {q1:.4}–{q3:.4}, n = {n}</title><line class="whisker" x1="{center:.1}" x2="{center:.1}" y1="{lo:.1}" y2="{hi:.1}" stroke="#333"/><rect class="iqr" x="{l:.1}" y="{q3y:.1}" width="{w:.1}" height="{h:.1}" fill="#a6c8e8" stroke="#333"/><line class="median" x1="{l:.1}" x2="{r:.1}" y1="{medy:.1}" y2="{medy:.1}" stroke="#c44e52" stroke-width="2"/></g>"##,
            med = stats.median,
            q1 = stats.q1,
            q3 = stats.q3,
            n = values.len(),
            lo = y(stats.whisker_low),
            hi = y(stats.whisker_high),
            l = center - half,
            r = center + half,
            w = 2.0 * half,
            q3y = y(stats.q3),
            // A zero-height box would be invisible; keep one unit.
            h = (y(stats.q1) - y(stats.q3)).max(1.0),
            medy = y(stats.median),
        );
        for outlier in values.iter().filter(|&&v| v < stats.whisker_low || v > stats.whisker_high) {
            let _ = write!(
                markup,
                r##"<circle class="outlier" cx="{center:.1}" cy="{cy:.1}" r="3" fill="none" stroke="#333"/>"##,
                cy = y(*outlier)
            );
        }
        chart.push_markup(&markup);
    }
    chart.finish()
}

/// Quartiles by linear interpolation (NumPy's default) and whiskers at the furthest
/// values within 1.5 IQR of the box (matplotlib's default).
struct BoxStats {
    q1: f64,
    median: f64,
    q3: f64,
    whisker_low: f64,
    whisker_high: f64,
}

impl BoxStats {
    // Precondition: `sorted` is sorted and not empty.
    fn new(sorted: &[f64]) -> BoxStats {
        let q1 = quantile(sorted, 0.25);
        let median = quantile(sorted, 0.5);
        let q3 = quantile(sorted, 0.75);
        let iqr = q3 - q1;
        let whisker_low = sorted.iter().copied().find(|&v| v >= q1 - 1.5 * iqr).unwrap_or(q1);
        let whisker_high = sorted.iter().rev().copied().find(|&v| v <= q3 + 1.5 * iqr).unwrap_or(q3);
        BoxStats { q1, median, q3, whisker_low, whisker_high }
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

fn role_name(s: &SystemSummary) -> &'static str {
    match s.role {
        crate::report::SystemRole::Workflow => "workflow",
        crate::report::SystemRole::Baseline => "baseline",
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn opt(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"))
}

fn pct(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |v| format!("{v:+.2}%"))
}

#[cfg(test)]
mod tests {
    use crate::render::{BoxStats, quantile, render_html, render_markdown, write_report};
    use crate::report::{RunMeasurement, SystemRole, summarize};

    fn run(system: &str, role: SystemRole, record: &str, repeat: u32, es: f64) -> RunMeasurement {
        RunMeasurement {
            system: system.into(),
            role,
            record_id: record.into(),
            repeat,
            tc: 0.5,
            es: Some(es),
            judge_failed: false,
            task_success: None,
            latency_ms: 1500.0,
            llm_calls: 4,
            prompt_tokens: 300,
            completion_tokens: 50,
            tool_calls: 3,
            error: None,
            tools: Vec::new(),
        }
    }

    fn sample() -> crate::report::EvalReport {
        summarize(vec![
            run("react", SystemRole::Baseline, "1", 0, 0.2),
            run("react", SystemRole::Baseline, "1", 1, 0.6),
            run("flow <v2>", SystemRole::Workflow, "1", 0, 0.5),
            run("flow <v2>", SystemRole::Workflow, "1", 1, 0.5),
        ])
    }

    #[test]
    fn quartiles_interpolate_like_numpy() {
        let values = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&values, 0.25), 1.75);
        assert_eq!(quantile(&values, 0.5), 2.5);
        let stats = BoxStats::new(&[1.0, 2.0, 3.0, 4.0, 100.0]);
        assert_eq!((stats.q1, stats.median, stats.q3), (2.0, 3.0, 4.0));
        // 100 lies beyond q3 + 1.5 IQR = 7: the whisker stops at 4.
        assert_eq!(stats.whisker_high, 4.0);
        assert_eq!(stats.whisker_low, 1.0);
    }

    #[test]
    fn markdown_has_one_row_per_system_and_the_comparison() {
        let markdown = render_markdown(&sample());
        let lines: Vec<&str> = markdown.lines().collect();
        assert!(
            lines[2].starts_with(
                "| flow <v2> | workflow | 1 | 2 | 0 | 0.5000 | – | – | 0.5000 | – | 0.0000 | 1.50 | 4.00 | 350.0 | 3.00 |"
            ),
            "{}",
            lines[2]
        );
        assert!(lines[3].starts_with("| react | baseline |"));
        // ES 0.5 vs 0.4: +25 %; CV 0 vs 0.5: reduced by 100 %.
        assert!(markdown.contains("| flow <v2> | react | +0.00% | +25.00% | – | +100.00% | +0.00% |"), "{markdown}");
    }

    #[test]
    fn write_report_writes_four_files_that_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let report = sample();
        let files = write_report(&report, "t", &dir.path().join("out")).unwrap();
        let json: crate::report::EvalReport =
            serde_json::from_str(&std::fs::read_to_string(&files.json).unwrap()).unwrap();
        assert_eq!(json, report);
        assert_eq!(std::fs::read_to_string(&files.runs).unwrap().lines().count(), 4);
        assert!(std::fs::read_to_string(&files.markdown).unwrap().contains("| react |"));
        assert!(std::fs::read_to_string(&files.html).unwrap().contains("cv-boxplot"));
    }

    #[test]
    fn html_is_self_contained_and_escapes_names() {
        let html = render_html(&sample(), "τ² retail");
        assert!(html.contains(r#"<svg id="score-bars""#));
        assert!(html.contains(r#"<svg id="cv-boxplot""#));
        assert!(html.contains("flow &lt;v2&gt;"));
        assert!(!html.contains("flow <v2>"));
        assert!(!html.contains("<script"));
        assert!(
            !html.contains("http://") || html.matches("http://").all(|_| html.contains("http://www.w3.org/2000/svg"))
        );
        // 2 systems × (TC + ES) bars; no task-success bars without checks.
        assert_eq!(html.matches(r#"class="bar""#).count(), 4);
        assert_eq!(html.matches(r#"class="box""#).count(), 2);
    }
}
