//! Rule-based induction: group runs by tool-name sequence and data flow, abstract what
//! differs.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use flowmem_mining::Source;
use flowmem_model::{
    Provenance, Record, Scope, StepSource, ToolCall, Trajectory, ValueShape, Workflow, WorkflowAction, WorkflowStats,
    WorkflowStep, canonical_json,
};

use crate::induce::{Induction, SkipReason, SkippedCandidate, scope_of};

/// Options of [`rule`].
#[derive(Debug, Clone, PartialEq)]
pub struct RuleConfig {
    /// The fewest steps a workflow may have (AWM: 2).
    pub min_steps: usize,
    /// The scope given to every workflow; `None` takes each trajectory's site and domain,
    /// and trajectories of different scopes never share a workflow.
    pub scope: Option<Scope>,
}

impl RuleConfig {
    /// At least 2 steps, scope from each trajectory.
    #[must_use]
    pub fn standard() -> RuleConfig {
        RuleConfig { min_steps: 2, scope: None }
    }
}

/// Induces one workflow per distinct tool-name sequence and data flow, deterministically.
///
/// 1. Each trajectory is reduced to its tool calls that did not fail (`error` unset).
/// 2. Its data flow is mined ([`flowmem_mining::mine_dataflow`]): for each argument of
///    each call, where its value came from (the query, an earlier step's result at a
///    path, an earlier step's argument, or nowhere found).
/// 3. Trajectories with the same scope, the same tool-name sequence and the same data
///    flow form a group; the group's first member, in input order, is its
///    representative.
/// 4. A group whose sequence has fewer than [`RuleConfig::min_steps`] calls is reported
///    as [`SkipReason::TooFewSteps`].
/// 5. In the representative's calls, an argument whose value differs across the group's
///    members (or is missing in some) becomes the string `"{name}"`, named after the
///    argument. Arguments that carry the same values across members share a variable,
///    so data flow between steps survives; a name clash with different values gets a
///    numeric suffix (`{order_id_2}`). Values equal in every member stay literal.
///
/// A variable whose value came from the query, or from an earlier step's result, records
/// that in its action's [`WorkflowAction::sources`]. The description is the
/// representative's query; provenance lists every member.
///
/// # Example
///
/// ```
/// use flowmem_memory::induce::{RuleConfig, rule};
/// # let t = |id: &str, order: &str| -> flowmem_model::Trajectory { serde_json::from_value(serde_json::json!({
/// #   "id": id, "query": "q", "steps": [
/// #   {"action": {"kind": "tool_call", "tool": "find_user", "args": {"zip": "10001"}}},
/// #   {"action": {"kind": "tool_call", "tool": "get_order", "args": {"order_id": order}}}]})).unwrap() };
/// let induction = rule(&[t("a", "#1"), t("b", "#2")], &RuleConfig::standard());
/// let steps = &induction.workflows[0].steps;
/// assert_eq!(steps[0].action.args["zip"], "10001");
/// assert_eq!(steps[1].action.args["order_id"], "{order_id}");
/// ```
pub fn rule(trajectories: &[Trajectory], cfg: &RuleConfig) -> Induction {
    struct Group<'t> {
        scope: Scope,
        tools: Vec<String>,
        flow: Flow,
        members: Vec<(&'t Trajectory, Vec<&'t ToolCall>)>,
    }
    let mut groups: Vec<Group<'_>> = Vec::new();
    // Scope is not `Hash`; its two fields are.
    type GroupKey = (Option<String>, Option<String>, Vec<String>, Flow);
    let mut index: HashMap<GroupKey, usize> = HashMap::new();
    for trajectory in trajectories {
        let calls: Vec<&ToolCall> = trajectory.tool_calls().filter(|call| !call.failed()).collect();
        let tools: Vec<String> = calls.iter().map(|call| call.tool.clone()).collect();
        let scope = scope_of(trajectory, cfg.scope.as_ref());
        let flow = data_flow(&trajectory.query, &calls);
        let key = (scope.site.clone(), scope.domain.clone(), tools.clone(), flow.clone());
        let group_idx = *index.entry(key).or_insert_with(|| {
            groups.push(Group { scope, tools, flow, members: Vec::new() });
            groups.len() - 1
        });
        groups[group_idx].members.push((trajectory, calls));
    }

    let mut res = Induction { proposed: groups.len(), ..Induction::default() };
    for group in groups {
        let trajectory_ids: Vec<String> = group.members.iter().map(|(t, _)| t.id.clone()).collect();
        if group.tools.len() < cfg.min_steps {
            res.skipped.push(SkippedCandidate {
                trajectory_ids,
                description: None,
                reason: SkipReason::TooFewSteps { tools: group.tools, min_steps: cfg.min_steps },
            });
            continue;
        }
        res.workflows.push(abstract_group(&group.members, &group.flow, group.scope, trajectory_ids));
    }
    res
}

/// Per (step, argument), where a run's values came from.
type Flow = BTreeMap<(usize, String), StepOrigin>;

/// Where one argument value of a run came from, in terms of its steps.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum StepOrigin {
    Query,
    Result { step: usize, path: String },
    Argument { step: usize, arg: String },
}

/// The data flow of one run's calls: the first source mining finds for each scalar
/// argument (an argument with no source is left out), with tools mapped to the latest
/// earlier step that called them.
fn data_flow(query: &str, calls: &[&ToolCall]) -> Flow {
    let record = Record {
        id: String::new(),
        query: query.to_owned(),
        reference_result: String::new(),
        required_outputs: Vec::new(),
        orchestration: calls.iter().map(|call| (*call).clone()).collect(),
        meta: Default::default(),
    };
    let mined = flowmem_mining::mine_dataflow(std::slice::from_ref(&record));
    let latest = |tool: &str, before: usize| calls[..before].iter().rposition(|call| call.tool == tool);
    let mut res = Flow::new();
    for value in mined.per_record.iter().flat_map(|record| &record.values) {
        let origin = match value.sources.first() {
            Some(Source::Query) => Some(StepOrigin::Query),
            Some(Source::Result { tool, path }) => {
                latest(tool, value.call).map(|step| StepOrigin::Result { step, path: path.clone() })
            }
            Some(Source::Argument { tool, arg }) => {
                latest(tool, value.call).map(|step| StepOrigin::Argument { step, arg: arg.clone() })
            }
            Some(Source::Constant { .. }) | None => None,
        };
        if let Some(origin) = origin {
            res.entry((value.call, value.arg.clone())).or_insert(origin);
        }
    }
    res
}

/// Fills the [`WorkflowAction::sources`] of a workflow that was not induced by rule (an
/// LM wrote it) from the runs it was induced from. Each run's successful calls are
/// aligned to the steps by tool, in order; in each run that holds every step, a step
/// argument that is one whole `{variable}` takes the source mining finds for that call's
/// value (the query, or the result of the call aligned to an earlier step). A source is
/// kept only when every such run agrees; whatever the workflow said before is replaced.
pub(crate) fn sources_from_runs(workflow: &mut Workflow, trajectories: &[Trajectory]) {
    let mut agreed: BTreeMap<(usize, String), Option<StepSource>> = BTreeMap::new();
    for trajectory in trajectories {
        let calls: Vec<&ToolCall> = trajectory.tool_calls().filter(|call| !call.failed()).collect();
        // Step → the call it aligns to.
        let mut aligned = Vec::with_capacity(workflow.steps.len());
        let mut next = 0;
        for step in &workflow.steps {
            let Some(found) = calls[next..].iter().position(|call| call.tool == step.action.tool) else { break };
            aligned.push(next + found);
            next += found + 1;
        }
        if aligned.len() != workflow.steps.len() {
            continue;
        }
        let flow = data_flow(&trajectory.query, &calls);
        for (step_idx, step) in workflow.steps.iter().enumerate() {
            let call = calls[aligned[step_idx]];
            for (arg, template) in &step.action.args {
                if !template.as_str().is_some_and(is_whole_variable) {
                    continue;
                }
                let source = match flow.get(&(aligned[step_idx], arg.clone())) {
                    Some(StepOrigin::Query) => {
                        Some(StepSource::Query { shape: call.args.get(arg).and_then(ValueShape::of) })
                    }
                    Some(StepOrigin::Result { step, path }) => aligned
                        .iter()
                        .position(|&call_idx| call_idx == *step)
                        .map(|from| StepSource::Result { step: from, path: path.clone() }),
                    Some(StepOrigin::Argument { .. }) | None => None,
                };
                let entry = agreed.entry((step_idx, arg.clone())).or_insert_with(|| source.clone());
                if *entry != source {
                    *entry = None;
                }
            }
        }
    }
    for step in &mut workflow.steps {
        step.action.sources.clear();
    }
    for ((step_idx, arg), source) in agreed {
        if let Some(source) = source {
            workflow.steps[step_idx].action.sources.insert(arg, source);
        }
    }
}

/// Whether `text` is one `{variable}` and nothing else.
fn is_whole_variable(text: &str) -> bool {
    text.strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|name| !name.is_empty() && name.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_'))
}

/// Builds the workflow of one group from its representative, abstracting differences.
fn abstract_group(
    members: &[(&Trajectory, Vec<&ToolCall>)],
    flow: &Flow,
    scope: Scope,
    trajectory_ids: Vec<String>,
) -> Workflow {
    // Invariant: a group is created with its first member, so it is never empty.
    let (representative, rep_calls) = &members[0];
    let rep_steps: Vec<&flowmem_model::Step> = representative
        .steps
        .iter()
        .filter(|step| matches!(&step.action, flowmem_model::Action::ToolCall(call) if !call.failed()))
        .collect();
    // Variables are keyed by argument name and the values they take across members, so
    // equal columns of values (the same id passed to two steps) share one variable.
    let mut variables: HashMap<(String, Vec<String>), String> = HashMap::new();
    let mut names_taken: HashMap<String, usize> = HashMap::new();
    let mut steps = Vec::with_capacity(rep_calls.len());
    for (step_idx, call) in rep_calls.iter().enumerate() {
        let mut args = flowmem_model::JsonObject::new();
        let mut sources = BTreeMap::new();
        for (name, value) in &call.args {
            let column: Vec<String> = members
                .iter()
                .map(|(_, calls)| {
                    calls[step_idx].args.get(name).map_or_else(|| "\u{0}missing".to_owned(), canonical_json)
                })
                .collect();
            let all_equal = column.iter().all(|v| *v == column[0]);
            if all_equal {
                args.insert(name.clone(), value.clone());
                continue;
            }
            let var = variables
                .entry((name.clone(), column))
                .or_insert_with(|| {
                    let n = names_taken.entry(name.clone()).or_insert(0);
                    *n += 1;
                    if *n == 1 { name.clone() } else { format!("{name}_{n}") }
                })
                .clone();
            args.insert(name.clone(), Value::String(format!("{{{var}}}")));
            match flow.get(&(step_idx, name.clone())) {
                Some(StepOrigin::Query) => {
                    sources.insert(name.clone(), StepSource::Query { shape: ValueShape::of(value) });
                }
                Some(StepOrigin::Result { step, path }) => {
                    sources.insert(name.clone(), StepSource::Result { step: *step, path: path.clone() });
                }
                // An earlier step's argument shares its variable, which says where it came from.
                Some(StepOrigin::Argument { .. }) | None => {}
            }
        }
        let state = match step_idx {
            0 => "The task has just started.".to_owned(),
            _ => format!("The previous call to {} has returned.", rep_calls[step_idx - 1].tool),
        };
        let reasoning = rep_steps
            .get(step_idx)
            .and_then(|step| step.reasoning.as_deref())
            .map(|text| one_line(text, 300))
            .filter(|text| !text.is_empty())
            .unwrap_or_else(|| format!("Call {} next.", call.tool));
        steps.push(WorkflowStep {
            state,
            reasoning,
            action: WorkflowAction { tool: call.tool.clone(), args, sources },
        });
    }
    Workflow {
        id: String::new(),
        description: one_line(&representative.query, 300),
        steps,
        scope,
        provenance: Provenance {
            trajectory_ids,
            inducer: "rule".to_owned(),
            model: None,
            prompt_version: None,
            created_at: None,
        },
        stats: WorkflowStats::default(),
        composed_of: Vec::new(),
        retired: None,
    }
}

/// The text on one line, whitespace collapsed, cut at `max_chars` characters.
pub(crate) fn one_line(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    match out.char_indices().nth(max_chars) {
        Some((cut, _)) => {
            out.truncate(cut);
            out.push('…');
            out
        }
        None => out,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use flowmem_model::Trajectory;

    use crate::induce::{RuleConfig, SkipReason, rule};

    fn trajectory(id: &str, calls: serde_json::Value) -> Trajectory {
        let steps: Vec<serde_json::Value> = calls
            .as_array()
            .unwrap()
            .iter()
            .map(
                |call| json!({"action": {"kind": "tool_call", "tool": call[0], "args": call[1], "error": call.get(2)}}),
            )
            .collect();
        serde_json::from_value(json!({"id": id, "query": format!("query {id}"), "steps": steps})).unwrap()
    }

    #[test]
    fn failed_calls_are_dropped_before_grouping() {
        let a = trajectory("a", json!([["f", {}], ["g", {}, "boom"], ["h", {}]]));
        let b = trajectory("b", json!([["f", {}], ["h", {}]]));
        let induction = rule(&[a, b], &RuleConfig::standard());
        assert_eq!(induction.workflows.len(), 1);
        let tools: Vec<&str> = induction.workflows[0].tool_sequence().collect();
        assert_eq!(tools, ["f", "h"]);
        assert_eq!(induction.workflows[0].provenance.trajectory_ids, ["a", "b"]);
    }

    #[test]
    fn shared_values_share_a_variable_and_clashes_get_a_suffix() {
        let a = trajectory("a", json!([["f", {"id": 1, "k": "x"}], ["g", {"id": 1}], ["h", {"id": 5}]]));
        let b = trajectory("b", json!([["f", {"id": 2, "k": "x"}], ["g", {"id": 2}], ["h", {"id": 6}]]));
        let induction = rule(&[a, b], &RuleConfig::standard());
        let steps = &induction.workflows[0].steps;
        assert_eq!(steps[0].action.args["id"], "{id}");
        assert_eq!(steps[0].action.args["k"], "x");
        assert_eq!(steps[1].action.args["id"], "{id}");
        assert_eq!(steps[2].action.args["id"], "{id_2}");
    }

    /// Runs of `find_user` → `get_order` whose order id comes from `find_user`'s result
    /// (`tail` "by result") or from the query.
    fn lookup(id: &str, user: &str, order: &str, order_in_query: bool) -> Trajectory {
        let query = if order_in_query { format!("user {user}, order {order}") } else { format!("user {user}") };
        serde_json::from_value(json!({"id": id, "query": query, "steps": [
            {"action": {"kind": "tool_call", "tool": "find_user", "args": {"user_id": user},
                        "result": {"orders": [order]}}},
            {"action": {"kind": "tool_call", "tool": "get_order", "args": {"order_id": order}, "result": "ok"}}
        ]}))
        .unwrap()
    }

    #[test]
    fn runs_group_by_data_flow_and_variables_record_where_they_came_from() {
        use flowmem_model::{StepSource, ValueShape};
        let runs = [
            lookup("a", "u_1", "#W1", false),
            lookup("b", "u_2", "#W2", false),
            lookup("c", "u_3", "#W3", true),
            lookup("d", "u_4", "#W4", true),
        ];
        let induction = rule(&runs, &RuleConfig::standard());
        assert_eq!(induction.workflows.len(), 2, "same tools, two data flows");
        let by_result = &induction.workflows[0];
        assert_eq!(by_result.provenance.trajectory_ids, ["a", "b"]);
        let first = &by_result.steps[0].action;
        assert_eq!(first.args["user_id"], "{user_id}");
        assert_eq!(first.sources["user_id"], StepSource::Query { shape: Some(ValueShape::Id) });
        let second = &by_result.steps[1].action;
        assert_eq!(second.args["order_id"], "{order_id}");
        assert_eq!(second.sources["order_id"], StepSource::Result { step: 0, path: "$.orders[*]".into() });
        let by_query = &induction.workflows[1];
        assert_eq!(by_query.provenance.trajectory_ids, ["c", "d"]);
        assert_eq!(by_query.steps[1].action.sources["order_id"], StepSource::Query { shape: Some(ValueShape::Id) });
    }

    #[test]
    fn an_lm_workflow_gets_the_sources_its_runs_agree_on() {
        use flowmem_model::{StepSource, ValueShape, Workflow};
        let mut workflow: Workflow = serde_json::from_value(json!({"description": "d", "steps": [
            {"action": {"tool": "find_user", "args": {"user_id": "{user}"}}},
            {"action": {"tool": "get_order", "args": {"order_id": "{order}"},
                        "sources": {"order_id": {"from": "query"}}}}
        ]}))
        .unwrap();
        super::sources_from_runs(&mut workflow, &[lookup("a", "u_1", "#W1", false), lookup("b", "u_2", "#W2", false)]);
        assert_eq!(workflow.steps[0].action.sources["user_id"], StepSource::Query { shape: Some(ValueShape::Id) });
        assert_eq!(
            workflow.steps[1].action.sources["order_id"],
            StepSource::Result { step: 0, path: "$.orders[*]".into() },
            "what the model wrote is replaced by what the runs show"
        );
        // Runs that disagree teach nothing about that argument.
        super::sources_from_runs(&mut workflow, &[lookup("a", "u_1", "#W1", false), lookup("c", "u_3", "#W3", true)]);
        assert!(!workflow.steps[1].action.sources.contains_key("order_id"), "{:?}", workflow.steps[1].action.sources);
        assert!(workflow.steps[0].action.sources.contains_key("user_id"));
    }

    #[test]
    fn short_sequences_are_reported() {
        let a = trajectory("a", json!([["f", {}]]));
        let induction = rule(&[a], &RuleConfig::standard());
        assert!(induction.workflows.is_empty());
        assert_eq!(induction.skipped.len(), 1);
        assert!(matches!(&induction.skipped[0].reason, SkipReason::TooFewSteps { tools, .. } if tools == &["f"]));
    }
}
