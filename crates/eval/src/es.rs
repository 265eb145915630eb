//! The execution score (FlowScout Eq. 4): an LLM judge rates a result against the
//! reference on four dimensions.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use flowmem_llm::{ChatModel, ChatRequest, EmbeddedPrompt, LlmError, Message, Prompts, Purpose, ResponseFormat};

use flowmem_model::canonical_json;

use crate::EvalError;

/// The judge's template, `prompts/judge_es.j2`.
pub const JUDGE_ES_PROMPT: EmbeddedPrompt = flowmem_llm::embedded_prompt!("judge_es");

/// What the judge sees: the query, the reference result and the produced result.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct JudgeInput<'a> {
    /// The user's query `q_i`.
    pub query: &'a str,
    /// The reference result `r_i`.
    pub reference: &'a str,
    /// The produced result `r̂_i`.
    pub answer: &'a str,
    /// Values the result must state (τ-bench's outputs); may be empty.
    pub required_outputs: &'a [String],
}

/// The judge's verdict: a rationale and one score in `[0, 1]` per dimension.
///
/// The field order is the order the judge writes them in: the rationale first, so the
/// scores follow from it (G-Eval's evaluation steps before the score).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EsJudgement {
    /// Why, in a few sentences.
    #[schemars(length(max = 600))]
    pub rationale: String,
    /// Facts and actions consistent with the reference.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub correctness: f64,
    /// Coverage of everything the reference covers.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub completeness: f64,
    /// Addresses the request without unrelated content.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub relevance: f64,
    /// Clear and easy to act on.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub clarity: f64,
}

impl EsJudgement {
    /// ES for this result: the mean of the four dimensions.
    #[must_use]
    pub fn es(&self) -> f64 {
        (self.correctness + self.completeness + self.relevance + self.clarity) / 4.0
    }

    /// The JSON Schema the judge's reply must satisfy.
    ///
    /// The type's own documentation is left out: it is for programmers, and every token
    /// of it would be read by the judge.
    #[must_use]
    pub fn schema() -> serde_json::Value {
        let mut schema = serde_json::to_value(schemars::schema_for!(EsJudgement))
            .expect("a JSON Schema is a JSON object with string keys, so it always converts");
        if let Some(map) = schema.as_object_mut() {
            map.remove("description");
            map.remove("$schema");
        }
        schema
    }

    fn check(&self) -> Result<(), String> {
        let dims = [
            ("correctness", self.correctness),
            ("completeness", self.completeness),
            ("relevance", self.relevance),
            ("clarity", self.clarity),
        ];
        for (name, value) in dims {
            if !(0.0..=1.0).contains(&value) {
                return Err(format!("`{name}` = {value} is outside [0, 1]"));
            }
        }
        Ok(())
    }
}

/// Asks `model` to judge one result, with structured output.
///
/// The prompt is `judge_es` from `prompts` (register [`JUDGE_ES_PROMPT`] first; an
/// override directory may replace it). The request is greedy (temperature 0), so a
/// caching model replays it; pass a model wrapped in the LLM-access cache to make judge
/// calls repeatable and free on the second run.
///
/// The request carries [`EsJudgement::schema`] as its response format. The HTTP client
/// validates the reply against it and, when it does not match, re-asks once with the
/// validation error; only a second bad reply fails. The scores are checked here again,
/// for models that do not validate.
///
/// # Errors
///
/// - [`EvalError::Prompt`] when the template is missing or does not render;
/// - [`EvalError::Llm`] when the model fails (transport, timeout, cache);
/// - [`EvalError::Judge`] when the reply, after the client's re-ask, is not the
///   requested JSON or a score lies outside `[0, 1]`; its `problem` names what is wrong
///   (the field, such as `/correctness`) and `raw` holds the last reply.
pub async fn judge_es(
    model: &dyn ChatModel,
    prompts: &Prompts,
    input: &JudgeInput<'_>,
) -> Result<EsJudgement, EvalError> {
    let schema = EsJudgement::schema();
    let ctx = JudgeContext {
        query: input.query,
        reference: input.reference,
        answer: input.answer,
        required_outputs: input.required_outputs,
        // Canonical (sorted-key) text, so the prompt and its cache key do not depend on
        // whether serde_json preserves key order in this build.
        schema: canonical_json(&schema),
    };
    let rendered = prompts.render("judge_es", &ctx).map_err(EvalError::Prompt)?;
    let mut request = ChatRequest::new(vec![Message::user(rendered.text)], Purpose::Judge);
    request.response_format = Some(ResponseFormat { name: "es_judgement".to_string(), schema });
    request.max_tokens = Some(400);
    let response = match model.chat(&request).await {
        Ok(response) => response,
        // The client validates structured replies against the schema and re-asks once
        // with the validation error; a second bad reply is the judge's fault, not the
        // transport's.
        Err(LlmError::InvalidReply { problem, raw, .. }) => {
            return Err(EvalError::Judge { model: model.name().to_string(), problem, raw });
        }
        Err(err) => return Err(EvalError::Llm(err)),
    };
    let raw = response.content.unwrap_or_default();
    let judgement: EsJudgement = serde_json::from_str(raw.trim()).map_err(|err| EvalError::Judge {
        model: model.name().to_string(),
        problem: err.to_string(),
        raw: raw.clone(),
    })?;
    judgement.check().map_err(|problem| EvalError::Judge { model: model.name().to_string(), problem, raw })?;
    Ok(judgement)
}

#[derive(Serialize)]
struct JudgeContext<'a> {
    query: &'a str,
    reference: &'a str,
    answer: &'a str,
    required_outputs: &'a [String],
    schema: String,
}

#[cfg(test)]
mod tests {
    use crate::es::{EsJudgement, JUDGE_ES_PROMPT, JudgeContext};
    use flowmem_llm::Prompts;

    #[test]
    fn es_is_the_mean_of_the_four_dimensions() {
        let judgement =
            EsJudgement { rationale: String::new(), correctness: 1.0, completeness: 0.5, relevance: 0.5, clarity: 0.0 };
        assert_eq!(judgement.es(), 0.5);
    }

    #[test]
    fn out_of_range_scores_are_rejected() {
        let judgement =
            EsJudgement { rationale: String::new(), correctness: 1.2, completeness: 0.5, relevance: 0.5, clarity: 0.0 };
        assert!(judgement.check().unwrap_err().contains("correctness"));
    }

    #[test]
    fn the_schema_bounds_every_score_and_the_rationale() {
        let schema = EsJudgement::schema();
        for dim in ["correctness", "completeness", "relevance", "clarity"] {
            assert_eq!(schema["properties"][dim]["minimum"], 0.0, "{dim}");
            assert_eq!(schema["properties"][dim]["maximum"], 1.0, "{dim}");
        }
        assert_eq!(schema["properties"]["rationale"]["maxLength"], 600);
        assert_eq!(schema["required"].as_array().map(Vec::len), Some(5));
    }

    #[test]
    fn the_rendered_prompt_is_reviewed_as_a_snapshot() {
        let mut prompts = Prompts::new();
        prompts.register(JUDGE_ES_PROMPT).unwrap();
        let outputs = vec!["1628".to_string()];
        let ctx = JudgeContext {
            query: "Cancel order #W123 and tell me the refund.",
            reference: "Order #W123 was cancelled; a refund of $1628 goes to the gift card.",
            answer: "Done: #W123 is cancelled and $1,628 will be refunded.",
            required_outputs: &outputs,
            schema: flowmem_model::canonical_json(&EsJudgement::schema()),
        };
        insta::assert_snapshot!(prompts.render("judge_es", &ctx).unwrap().text);
    }

    #[test]
    fn the_template_renders_every_part_of_the_input() {
        let mut prompts = Prompts::new();
        prompts.register(JUDGE_ES_PROMPT).unwrap();
        let outputs = vec!["327".to_string()];
        let ctx = JudgeContext {
            query: "QUERY",
            reference: "REFERENCE",
            answer: "ANSWER",
            required_outputs: &outputs,
            schema: "SCHEMA".into(),
        };
        let rendered = prompts.render("judge_es", &ctx).unwrap();
        for part in ["QUERY", "REFERENCE", "ANSWER", "SCHEMA", "must state these values: 327"] {
            assert!(rendered.text.contains(part), "missing {part}");
        }
        assert_eq!(rendered.id.name, "judge_es");
        let without = JudgeContext { required_outputs: &[], ..ctx };
        assert!(!prompts.render("judge_es", &without).unwrap().text.contains("must state"));
    }
}
