//! Rendering: AWM prompt text (and its round trip), the linear graph, JSONL.

use flowmem_memory::render::{self, parse_text, read_jsonl, to_graph, write_jsonl};
use flowmem_model::{EdgeKind, LlmRole, NodeKind, Workflow};

use crate::workflow;

fn sample() -> Vec<Workflow> {
    let mut first = workflow("Look up a user's order", &["find_user_id_by_email", "get_order_details"], Some("retail"));
    first.steps[0].state = "The user gave their email.".to_owned();
    first.steps[0].action.args.insert("email".to_owned(), "{email}".into());
    first.steps[1].action.args.insert("include_items".to_owned(), true.into());
    let second = workflow("Cancel a pending order", &["get_order_details", "cancel_pending_order"], Some("retail"));
    vec![first, second]
}

#[test]
fn awm_text_renders_from_the_template_and_reads_back() {
    let prompts = render::prompts().unwrap();
    let rendered = render::prompt_text(&prompts, &sample()).unwrap();
    assert_eq!(rendered.id.name, "workflow");
    insta::assert_snapshot!(rendered.text);

    let (parsed, errors) = parse_text(&rendered.text);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(parsed.len(), 2);
    for (parsed, original) in parsed.iter().zip(sample()) {
        assert_eq!(parsed.description, original.description);
        assert_eq!(parsed.steps, original.steps);
    }
}

#[test]
fn a_workflow_becomes_a_linear_plan_tools_synthesize_graph() {
    let workflow = &sample()[0];
    let graph = to_graph(workflow);
    let ids: Vec<&str> = graph.nodes.iter().map(|node| node.id.as_str()).collect();
    assert_eq!(ids, ["plan", "step_1", "step_2", "synthesize"]);
    assert!(matches!(graph.nodes[0].kind, NodeKind::Llm { role: LlmRole::Plan, .. }));
    assert!(matches!(graph.nodes[3].kind, NodeKind::Llm { role: LlmRole::Synthesize, .. }));
    let NodeKind::Tool { hints, instruction, .. } = &graph.nodes[1].kind else { panic!("step_1 is a tool node") };
    assert_eq!(hints, &["find_user_id_by_email"]);
    let instruction = instruction.as_deref().unwrap();
    assert!(instruction.contains("The user gave their email.") && instruction.contains("{email}"), "{instruction}");
    let edges: Vec<(&str, &str)> = graph.edges.iter().map(|e| (e.from.as_str(), e.to.as_str())).collect();
    assert_eq!(edges, [("plan", "step_1"), ("step_1", "step_2"), ("step_2", "synthesize")]);
    assert!(graph.edges.iter().all(|edge| edge.kind == EdgeKind::Data));
    assert_eq!((graph.entry.as_str(), graph.exit.as_str()), ("plan", "synthesize"));
}

#[test]
fn jsonl_round_trips_and_reports_bad_lines() {
    let mut out = Vec::new();
    write_jsonl(&sample(), &mut out).unwrap();
    out.extend_from_slice(b"\n{\"description\": \"no steps field\"}\n");
    let (workflows, errors) = read_jsonl(&mut out.as_slice()).unwrap();
    assert_eq!(workflows, sample());
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].line, 4);
    assert!(errors[0].to_string().contains("steps"), "{}", errors[0]);
}

#[test]
fn the_induction_prompt_says_what_awm_says() {
    use serde_json::json;
    let prompts = render::prompts().unwrap();
    let trajectory: flowmem_model::Trajectory = serde_json::from_value(json!({"id": "t1", "query": "Cancel order #W1", "steps": [
        {"reasoning": "find the order", "action": {"kind": "tool_call", "tool": "get_order_details", "args": {"order_id": "#W1"}, "result": "pending"}},
        {"action": {"kind": "tool_call", "tool": "cancel_pending_order", "args": {"order_id": "#W1"}, "error": "denied"}}]}))
    .unwrap();
    let ctx = json!({"min_steps": 2, "tools": ["cancel_pending_order", "get_order_details"], "structured": false,
        "trajectories": [{"id": "t1", "query": trajectory.query, "steps": [
            {"reasoning": "find the order", "tool": "get_order_details", "args": "{\"order_id\":\"#W1\"}", "result": "pending", "error": null},
            {"reasoning": null, "tool": "cancel_pending_order", "args": "{\"order_id\":\"#W1\"}", "result": null, "error": "denied"}]}]});
    let rendered = prompts.render("induce", &ctx).unwrap();
    insta::assert_snapshot!(rendered.text);
    for phrase in [
        "finer granularity",
        "at least 2 steps",
        "{order_id}",
        "Do not generate similar or overlapping workflows",
        "State:",
        "Reasoning:",
        "Action:",
    ] {
        assert!(rendered.text.contains(phrase), "the prompt lacks {phrase:?}");
    }
}
