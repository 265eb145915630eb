//! The learning curve as a self-contained HTML page, drawn through `flowmem-report`.

use serde::Serialize;

use flowmem_report::{ChartSpec, Margins, Markup, Point, Series, SeriesStyle, error_page, line_chart, render_page};

use crate::online::{ArmCurve, LearningCurve, SuccessSource};

const CURVE_TEMPLATE: &str = include_str!("../templates/learning_curve.html.j2");

/// The HTML report of a learning curve: an inline SVG plot of cumulative success
/// against tasks seen, one line per agent, and a table of the figures.
#[must_use]
pub fn render_curve_html(curve: &LearningCurve) -> String {
    let arms = arms(curve);
    let source = match curve.success_source {
        SuccessSource::GroundTruth => "ground truth",
        SuccessSource::Evaluator => "the LM evaluator (ground truth where available)",
    };
    let ctx = CurveContext {
        title: "flowmem online learning curve",
        source,
        chart: Markup::new(curve_svg(&arms)),
        arms: arms
            .iter()
            .map(|(label, _, arm)| ArmRow {
                label,
                n_tasks: arm.n_tasks,
                n_solved: arm.n_solved,
                rate: figure(arm.cumulative_success_rate.last().copied()),
                steps_per_solved: figure(arm.steps_per_solved),
                utilisation: figure(arm.utilisation_rate),
            })
            .collect(),
        agreement: curve.agreement.as_ref().map(|agreement| AgreementRow {
            n: agreement.n,
            accuracy: figure(agreement.accuracy),
            false_positive_rate: figure(agreement.false_positive_rate),
            true_positives: agreement.true_positives,
            false_positives: agreement.false_positives,
            true_negatives: agreement.true_negatives,
            false_negatives: agreement.false_negatives,
        }),
        n_inductions: curve.n_inductions,
        n_workflows_added: curve.n_workflows_added,
        n_unjudged: curve.n_unjudged,
    };
    // The template is compiled in and its context is typed, so a failure is a bug here;
    // the error then stands in for the page.
    render_page("learning_curve.html.j2", CURVE_TEMPLATE, &ctx).unwrap_or_else(|err| error_page(&err))
}

/// The learning curve's chart alone (inline SVG), as [`render_curve_html`] draws it:
/// for pages that show several curves (the web UI's learning page).
#[must_use]
pub fn curve_chart(curve: &LearningCurve) -> String {
    curve_svg(&arms(curve))
}

fn arms(curve: &LearningCurve) -> Vec<(&'static str, &'static str, &ArmCurve)> {
    let mut arms = vec![("with memory", "#1f77b4", &curve.memory)];
    if let Some(baseline) = &curve.baseline {
        arms.push(("without memory", "#d62728", baseline));
    }
    arms
}

#[derive(Serialize)]
struct CurveContext<'a> {
    title: &'a str,
    source: &'a str,
    chart: Markup,
    arms: Vec<ArmRow<'a>>,
    agreement: Option<AgreementRow>,
    n_inductions: usize,
    n_workflows_added: usize,
    n_unjudged: usize,
}

#[derive(Serialize)]
struct ArmRow<'a> {
    label: &'a str,
    n_tasks: usize,
    n_solved: usize,
    rate: String,
    steps_per_solved: String,
    utilisation: String,
}

#[derive(Serialize)]
struct AgreementRow {
    n: usize,
    accuracy: String,
    false_positive_rate: String,
    true_positives: usize,
    false_positives: usize,
    true_negatives: usize,
    false_negatives: usize,
}

fn figure(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |value| format!("{value:.3}"))
}

/// One line per arm (`class="curve"`), task `i` at x = i.
fn curve_svg(arms: &[(&str, &str, &ArmCurve)]) -> String {
    let n = arms.iter().map(|(_, _, arm)| arm.cumulative_success_rate.len()).max().unwrap_or(0).max(1);
    let x_label = format!("tasks seen (1 to {n})");
    let spec = ChartSpec {
        name: "learning-curve",
        title: "learning curve",
        width: 640.0,
        height: 320.0,
        margins: Margins { left: 50.0, right: 20.0, top: 30.0, bottom: 40.0 },
        x_range: (0.0, (n - 1) as f64),
        y_max: 1.0,
        x_label: &x_label,
        y_label: "cumulative success rate",
    };
    let series: Vec<Series<'_>> = arms
        .iter()
        .map(|(label, colour, arm)| Series {
            label,
            class: "curve",
            colour,
            style: SeriesStyle::Line,
            points: arm
                .cumulative_success_rate
                .iter()
                .enumerate()
                .map(|(i, rate)| Point::new(i as f64, *rate))
                .collect(),
        })
        .collect();
    line_chart(&spec, &series, true)
}

#[cfg(test)]
mod tests {
    use crate::curve_html::render_curve_html;
    use crate::online::{ArmCurve, LearningCurve, SuccessSource};

    fn arm(rates: &[f64]) -> ArmCurve {
        ArmCurve {
            n_tasks: rates.len(),
            n_solved: 1,
            cumulative_success_rate: rates.to_vec(),
            steps_per_solved: Some(2.5),
            utilisation_rate: None,
        }
    }

    #[test]
    fn the_page_has_one_line_per_arm_and_the_figures() {
        let curve = LearningCurve {
            success_source: SuccessSource::GroundTruth,
            memory: arm(&[0.0, 0.5]),
            baseline: Some(arm(&[1.0, 0.5])),
            agreement: None,
            n_inductions: 3,
            n_workflows_added: 2,
            n_unjudged: 1,
        };
        let html = render_curve_html(&curve);
        assert_eq!(html.matches(r#"class="curve""#).count(), 2, "{html}");
        assert!(html.contains("<title>flowmem online learning curve</title>"));
        assert!(html.contains("<h1>Online AWM learning curve</h1>"));
        assert!(
            html.contains("<td>with memory</td><td>2</td><td>1</td><td>0.500</td><td>2.500</td><td>–</td>"),
            "{html}"
        );
        assert!(html.contains("tasks seen (1 to 2)") && html.contains("Success from ground truth."));
        assert!(html.contains("<p>3 inductions added 2 workflows.</p>"));
        assert!(html.contains("1 run had no valid judgement from the evaluator"), "{html}");
        assert!(!html.contains("Evaluator agreement"));
    }
}
