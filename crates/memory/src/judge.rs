//! AWM's LM evaluator: a judge model labels a run successful or not, with a reason.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use flowmem_llm::{ChatModel, ChatRequest, EmbeddedPrompt, Message, Prompts, Purpose, ResponseFormat};
use flowmem_model::{ToolCall, canonical_json};

use crate::error::OnlineError;

/// The `evaluate` template: the task, the run's calls and answer, the reply schema.
pub const EVALUATE_PROMPT: EmbeddedPrompt = flowmem_llm::embedded_prompt!("evaluate");

/// The longest reason the evaluator may give, in characters.
const REASON_CHARS: u32 = 200;

/// The evaluator's reply budget, in tokens. It must hold the longest reply the schema
/// allows: a reason of [`REASON_CHARS`] plain characters (a token holds at least one)
/// and the JSON around it. Under 400 characters and 200 tokens, the embedded model's
/// reply could be cut before its JSON closed, and the online run failed with it.
const REPLY_TOKENS: u32 = REASON_CHARS + 120;

/// The evaluator's label `L_eval(e) ∈ {0, 1}` with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Judgement {
    /// Whether the run accomplished the task.
    pub success: bool,
    /// A short reason.
    pub reason: String,
}

impl Judgement {
    /// The JSON schema of the structured reply.
    #[must_use]
    pub fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "success": {"type": "boolean"},
                "reason": {"type": "string", "maxLength": REASON_CHARS}
            },
            "required": ["success", "reason"],
            "additionalProperties": false
        })
    }
}

/// What the evaluator sees of a run.
#[derive(Debug, Clone, Copy)]
pub struct RunToJudge<'a> {
    /// The user's task.
    pub query: &'a str,
    /// The real tool calls made, with results or errors.
    pub calls: &'a [ToolCall],
    /// The final answer, if any.
    pub answer: Option<&'a str>,
    /// The error the run ended with, if any.
    pub error: Option<&'a str>,
}

#[derive(Serialize)]
struct EvaluateContext<'a> {
    query: &'a str,
    calls: Vec<CallView>,
    answer: &'a str,
    error: &'a str,
    schema: String,
}

#[derive(Serialize)]
struct CallView {
    tool: String,
    args: String,
    result: String,
    error: String,
}

/// The longest result text shown to the evaluator per call, in characters.
const MAX_RESULT_CHARS: usize = 600;

/// Asks `model` whether `run` accomplished its task (greedy, structured output).
///
/// # Errors
///
/// [`OnlineError::Prompt`] when the `evaluate` template is missing from `prompts`,
/// [`OnlineError::Llm`] when the model fails and [`OnlineError::Judge`] when its reply
/// is not a [`Judgement`].
pub async fn judge_run(
    model: &dyn ChatModel,
    prompts: &Prompts,
    run: &RunToJudge<'_>,
) -> Result<Judgement, OnlineError> {
    let schema = Judgement::schema();
    let ctx = EvaluateContext {
        query: run.query,
        calls: run
            .calls
            .iter()
            .map(|call| CallView {
                tool: call.tool.clone(),
                args: canonical_json(&Value::Object(call.args.clone())),
                result: call.result.as_ref().map(|value| truncate(&canonical_json(value))).unwrap_or_default(),
                error: call.error.clone().unwrap_or_default(),
            })
            .collect(),
        answer: run.answer.unwrap_or_default(),
        error: run.error.unwrap_or_default(),
        schema: canonical_json(&schema),
    };
    let rendered = prompts
        .render(EVALUATE_PROMPT.name, &ctx)
        .map_err(|source| OnlineError::Prompt { template: EVALUATE_PROMPT.name, source })?;
    let mut request = ChatRequest::new(vec![Message::user(rendered.text)], Purpose::Judge);
    request.response_format = Some(ResponseFormat { name: "run_judgement".to_owned(), schema });
    request.max_tokens = Some(REPLY_TOKENS);
    let response = model.chat(&request).await.map_err(OnlineError::Llm)?;
    let raw = response.content.unwrap_or_default();
    serde_json::from_str(raw.trim()).map_err(|err| OnlineError::Judge {
        model: model.name().to_owned(),
        problem: err.to_string(),
        raw,
    })
}

fn truncate(text: &str) -> String {
    if text.chars().count() <= MAX_RESULT_CHARS {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(MAX_RESULT_CHARS).collect();
        cut.push('…');
        cut
    }
}

/// How well the evaluator agrees with ground truth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// Runs with both a judgement and ground truth.
    pub n: usize,
    /// Judged successful and truly successful.
    pub true_positives: usize,
    /// Judged successful but truly failed.
    pub false_positives: usize,
    /// Judged failed and truly failed.
    pub true_negatives: usize,
    /// Judged failed but truly successful.
    pub false_negatives: usize,
    /// `(TP + TN) / n`; `None` when `n = 0`.
    pub accuracy: Option<f64>,
    /// `FP / (FP + TN)`, the share of true failures judged successful; `None` without
    /// true failures.
    pub false_positive_rate: Option<f64>,
}

/// The agreement of `(judged, truth)` pairs.
#[must_use]
pub fn agreement(pairs: impl IntoIterator<Item = (bool, bool)>) -> Agreement {
    let mut out = Agreement::default();
    for (judged, truth) in pairs {
        out.n += 1;
        match (judged, truth) {
            (true, true) => out.true_positives += 1,
            (true, false) => out.false_positives += 1,
            (false, false) => out.true_negatives += 1,
            (false, true) => out.false_negatives += 1,
        }
    }
    if out.n > 0 {
        out.accuracy = Some((out.true_positives + out.true_negatives) as f64 / out.n as f64);
    }
    let negatives = out.false_positives + out.true_negatives;
    if negatives > 0 {
        out.false_positive_rate = Some(out.false_positives as f64 / negatives as f64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{EVALUATE_PROMPT, EvaluateContext, agreement};

    #[test]
    fn agreement_counts_the_confusion_matrix() {
        let a = agreement([(true, true), (true, false), (false, false), (false, false), (false, true)]);
        assert_eq!((a.true_positives, a.false_positives, a.true_negatives, a.false_negatives), (1, 1, 2, 1));
        assert_eq!(a.accuracy, Some(0.6));
        assert_eq!(a.false_positive_rate, Some(1.0 / 3.0));
        assert_eq!(agreement([(true, true)]).false_positive_rate, None);
        assert_eq!(agreement([]).accuracy, None);
    }

    #[test]
    fn the_template_shows_calls_errors_and_answer() {
        let mut prompts = flowmem_llm::Prompts::new();
        prompts.register(EVALUATE_PROMPT).unwrap();
        let ctx = EvaluateContext {
            query: "QUERY",
            calls: vec![super::CallView {
                tool: "TOOL".into(),
                args: "ARGS".into(),
                result: String::new(),
                error: "BROKE".into(),
            }],
            answer: "ANSWER",
            error: "",
            schema: "SCHEMA".into(),
        };
        let text = prompts.render("evaluate", &ctx).unwrap().text;
        for part in ["QUERY", "TOOL(ARGS)", "Error: BROKE", "ANSWER", "SCHEMA"] {
            assert!(text.contains(part), "missing {part} in {text}");
        }
        assert!(!text.contains("ended with an error"));
    }
}
