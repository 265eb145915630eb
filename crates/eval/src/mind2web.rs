//! AWM's Mind2Web step metrics: element accuracy, action F1, step success, task success.
//!
//! The definitions follow Mind2Web as AWM uses them. A step's *action* is the string
//! `"OP value"` (for example `"TYPE new york"` or `"CLICK"`); action F1 is the F1 of the
//! *sets* of whitespace-separated tokens of the predicted and reference action strings. A
//! step succeeds when the selected element is one of the reference's acceptable elements
//! and the action F1 is exactly 1. A task succeeds when every one of its steps succeeds.
//! Task-level figures are macro averages: the mean over tasks of the per-task mean.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The reference for one step: the acceptable target elements and the operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebStepReference {
    /// Ids of the elements that count as correct (Mind2Web's positive candidates).
    pub elements: Vec<String>,
    /// The operation: `CLICK`, `TYPE` or `SELECT`.
    pub op: String,
    /// The typed or selected value; empty for `CLICK`.
    #[serde(default)]
    pub value: String,
}

/// What the agent did at one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebStepPrediction {
    /// The id of the element the agent chose, if it chose one.
    pub element: Option<String>,
    /// The operation it chose.
    pub op: String,
    /// The value it typed or selected; empty for `CLICK`.
    #[serde(default)]
    pub value: String,
}

/// The metrics of one step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// Whether the chosen element is an acceptable one.
    pub element_correct: bool,
    /// Token-set F1 of `"OP value"` against the reference.
    pub action_f1: f64,
    /// Element correct and action F1 equal to 1.
    pub step_success: bool,
}

/// Macro-averaged metrics over tasks, each in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WebTaskMetrics {
    /// Mean over tasks of the fraction of steps with the right element.
    pub element_accuracy: f64,
    /// Mean over tasks of the mean action F1.
    pub action_f1: f64,
    /// Mean over tasks of the fraction of successful steps.
    pub step_success_rate: f64,
    /// Fraction of tasks whose every step succeeded.
    pub task_success_rate: f64,
    /// How many tasks were scored.
    pub n_tasks: usize,
}

/// One task: its reference steps and the agent's predicted steps, aligned by position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebTask {
    /// The reference steps.
    pub reference: Vec<WebStepReference>,
    /// The predicted steps; a missing prediction counts as a failed step.
    pub predicted: Vec<WebStepPrediction>,
}

/// Scores one step.
///
/// # Example
///
/// ```
/// use flowmem_eval::{WebStepPrediction, WebStepReference, score_step};
/// let reference = WebStepReference { elements: vec!["e7".into()], op: "TYPE".into(), value: "new york".into() };
/// let predicted = WebStepPrediction { element: Some("e7".into()), op: "TYPE".into(), value: "york".into() };
/// let metrics = score_step(&predicted, &reference);
/// assert!(metrics.element_correct && !metrics.step_success);
/// assert!((metrics.action_f1 - 0.8).abs() < 1e-12);
/// ```
#[must_use]
pub fn score_step(predicted: &WebStepPrediction, reference: &WebStepReference) -> StepMetrics {
    let element_correct =
        predicted.element.as_ref().is_some_and(|chosen| reference.elements.iter().any(|ok| ok == chosen));
    let action_f1 =
        token_set_f1(&action_string(&predicted.op, &predicted.value), &action_string(&reference.op, &reference.value));
    StepMetrics { element_correct, action_f1, step_success: element_correct && action_f1 == 1.0 }
}

/// Scores tasks and macro-averages the step metrics over them (AWM Table on Mind2Web).
///
/// Reference steps without a prediction score 0 on every metric; predictions beyond the
/// reference are ignored, as Mind2Web evaluates each reference step once. A task with no
/// reference steps is skipped, since it has nothing to score.
#[must_use]
pub fn score_web_tasks(tasks: &[WebTask]) -> WebTaskMetrics {
    let mut sums = [0.0f64; 4];
    let mut n_tasks = 0usize;
    for task in tasks.iter().filter(|task| !task.reference.is_empty()) {
        let n_steps = task.reference.len() as f64;
        let (mut elements, mut f1, mut successes) = (0.0, 0.0, 0.0);
        for (idx, reference) in task.reference.iter().enumerate() {
            let Some(predicted) = task.predicted.get(idx) else { continue };
            let metrics = score_step(predicted, reference);
            elements += f64::from(u8::from(metrics.element_correct));
            f1 += metrics.action_f1;
            successes += f64::from(u8::from(metrics.step_success));
        }
        sums[0] += elements / n_steps;
        sums[1] += f1 / n_steps;
        sums[2] += successes / n_steps;
        sums[3] += f64::from(u8::from(successes == n_steps));
        n_tasks += 1;
    }
    let mean = |sum: f64| if n_tasks == 0 { 0.0 } else { sum / n_tasks as f64 };
    WebTaskMetrics {
        element_accuracy: mean(sums[0]),
        action_f1: mean(sums[1]),
        step_success_rate: mean(sums[2]),
        task_success_rate: mean(sums[3]),
        n_tasks,
    }
}

/// F1 of the sets of whitespace-separated tokens; two empty strings score 1.
#[must_use]
pub fn token_set_f1(predicted: &str, reference: &str) -> f64 {
    let predicted: BTreeSet<&str> = predicted.split_whitespace().collect();
    let reference: BTreeSet<&str> = reference.split_whitespace().collect();
    if predicted.is_empty() && reference.is_empty() {
        return 1.0;
    }
    let common = predicted.intersection(&reference).count() as f64;
    if common == 0.0 {
        return 0.0;
    }
    let precision = common / predicted.len() as f64;
    let recall = common / reference.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

fn action_string(op: &str, value: &str) -> String {
    format!("{} {}", op.trim(), value.trim()).trim().to_string()
}

#[cfg(test)]
mod tests {
    use crate::mind2web::{WebStepPrediction, WebStepReference, WebTask, score_step, score_web_tasks, token_set_f1};

    fn reference(elements: &[&str], op: &str, value: &str) -> WebStepReference {
        WebStepReference {
            elements: elements.iter().map(|e| e.to_string()).collect(),
            op: op.into(),
            value: value.into(),
        }
    }

    fn predicted(element: Option<&str>, op: &str, value: &str) -> WebStepPrediction {
        WebStepPrediction { element: element.map(str::to_string), op: op.into(), value: value.into() }
    }

    #[test]
    fn token_f1_follows_the_set_definition() {
        assert_eq!(token_set_f1("", ""), 1.0);
        assert_eq!(token_set_f1("CLICK", ""), 0.0);
        assert_eq!(token_set_f1("CLICK", "CLICK"), 1.0);
        // {TYPE, new, york} vs {TYPE, york}: p = 1, r = 2/3, F1 = 0.8.
        assert!((token_set_f1("TYPE york", "TYPE new york") - 0.8).abs() < 1e-12);
        // Sets: repeated and reordered tokens do not matter.
        assert_eq!(token_set_f1("TYPE york new new", "TYPE new york"), 1.0);
        assert_eq!(token_set_f1("SELECT blue", "TYPE red"), 0.0);
    }

    #[test]
    fn a_click_on_any_acceptable_element_succeeds() {
        let step = score_step(&predicted(Some("b"), "CLICK", ""), &reference(&["a", "b"], "CLICK", ""));
        assert!(step.element_correct && step.step_success);
        assert_eq!(step.action_f1, 1.0);
    }

    #[test]
    fn right_action_on_the_wrong_element_fails_the_step() {
        let step = score_step(&predicted(Some("c"), "TYPE", "boston"), &reference(&["a"], "TYPE", "boston"));
        assert!(!step.element_correct && !step.step_success);
        assert_eq!(step.action_f1, 1.0);
    }

    #[test]
    fn no_element_chosen_is_wrong() {
        assert!(!score_step(&predicted(None, "CLICK", ""), &reference(&["a"], "CLICK", "")).element_correct);
    }

    #[test]
    fn task_metrics_are_macro_averages() {
        let tasks = vec![
            // Task 1: two steps, both right.
            WebTask {
                reference: vec![reference(&["a"], "CLICK", ""), reference(&["b"], "TYPE", "new york")],
                predicted: vec![predicted(Some("a"), "CLICK", ""), predicted(Some("b"), "TYPE", "new york")],
            },
            // Task 2: four steps; step 2 types a partial value, step 4 has no prediction.
            WebTask {
                reference: vec![
                    reference(&["a"], "CLICK", ""),
                    reference(&["b"], "TYPE", "new york"),
                    reference(&["c"], "SELECT", "2"),
                    reference(&["d"], "CLICK", ""),
                ],
                predicted: vec![
                    predicted(Some("a"), "CLICK", ""),
                    predicted(Some("b"), "TYPE", "york"),
                    predicted(Some("x"), "SELECT", "2"),
                ],
            },
        ];
        let metrics = score_web_tasks(&tasks);
        assert_eq!(metrics.n_tasks, 2);
        // Elements: task 1 = 1, task 2 = 2/4.
        assert!((metrics.element_accuracy - 0.75).abs() < 1e-12);
        // F1: task 1 = 1, task 2 = (1 + 0.8 + 1 + 0) / 4 = 0.7.
        assert!((metrics.action_f1 - 0.85).abs() < 1e-12);
        // Step success: task 1 = 1, task 2 = 1/4.
        assert!((metrics.step_success_rate - 0.625).abs() < 1e-12);
        assert!((metrics.task_success_rate - 0.5).abs() < 1e-12);
    }

    #[test]
    fn tasks_without_reference_steps_are_skipped() {
        let metrics = score_web_tasks(&[WebTask { reference: vec![], predicted: vec![] }]);
        assert_eq!(metrics.n_tasks, 0);
        assert_eq!(metrics.task_success_rate, 0.0);
    }
}
