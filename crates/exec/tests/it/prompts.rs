//! The role templates: all register, render from the typed context, and show it.

use std::path::Path;

use flowmem_exec::{ContextItem, EXEC_PROMPTS, PromptContext, exec_prompts};

fn context() -> Vec<ContextItem> {
    vec![
        ContextItem {
            node: "plan".into(),
            kind: "llm:plan".into(),
            iteration: 0,
            output: "1. find order".into(),
            failed: false,
        },
        ContextItem {
            node: "lookup".into(),
            kind: "tool".into(),
            iteration: 1,
            output: "error: not found".into(),
            failed: true,
        },
    ]
}

#[test]
fn every_role_template_renders_the_query_context_and_instruction() {
    let prompts = exec_prompts(None).unwrap();
    let items = context();
    let options = vec!["yes".to_owned(), "no".to_owned()];
    let hints = vec!["get_order_details".to_owned()];
    let ctx = PromptContext {
        query: "Where is order #W1?",
        instruction: Some("Be brief."),
        context: &items,
        question: Some("Was the order found?"),
        options: &options,
        hints: &hints,
    };
    for prompt in EXEC_PROMPTS
        .iter()
        .filter(|prompt| !matches!(prompt.name, "results" | "context" | "react" | "reask" | "left_out"))
    {
        let rendered = prompts.render(prompt.name, &ctx).unwrap();
        assert_eq!(rendered.id.name, prompt.name);
        assert_eq!(rendered.id.version, 1);
        let text = rendered.text;
        assert!(text.contains("Task: Where is order #W1?"), "{}: {text}", prompt.name);
        assert!(text.contains("- [plan, llm:plan] 1. find order"), "{}: {text}", prompt.name);
        assert!(text.contains("- [lookup #1, tool] FAILED: error: not found"), "{}: {text}", prompt.name);
        assert!(text.contains("Instructions: Be brief."), "{}: {text}", prompt.name);
        assert!(!text.contains("{{") && !text.contains("{#"), "{}: {text}", prompt.name);
    }
    let judge = prompts.render("judge", &ctx).unwrap().text;
    assert!(judge.contains("Question: Was the order found?"), "{judge}");
    assert!(judge.contains("Answer with exactly one of: `yes`, `no`."), "{judge}");
    let tool = prompts.render("tool", &ctx).unwrap().text;
    assert!(tool.contains("Allowed tools: get_order_details."), "{tool}");
    let react = prompts.render("react", &ctx).unwrap().text;
    assert!(react.contains("Be brief."), "{react}");
}

#[test]
fn an_override_directory_replaces_a_template() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("plan.j2"), "{# prompt: plan v7 #}\nPLAN {{ query }}").unwrap();
    let prompts = exec_prompts(Some(dir.path())).unwrap();
    let items = context();
    let ctx =
        PromptContext { query: "q", instruction: None, context: &items, question: None, options: &[], hints: &[] };
    let rendered = prompts.render("plan", &ctx).unwrap();
    assert_eq!(rendered.text, "PLAN q");
    assert_eq!(rendered.id.version, 7);
    assert!(exec_prompts(Some(Path::new("/nonexistent/prompts"))).is_err());
}

#[test]
fn a_context_budget_clips_each_upstream_result_and_says_how_much() {
    let mut prompts = exec_prompts(None).unwrap();
    flowmem_exec::limit_context_items(&mut prompts, 5);
    let items = context();
    let ctx = PromptContext {
        query: "Where is order #W1?",
        instruction: None,
        context: &items,
        question: None,
        options: &[],
        hints: &[],
    };
    let text = prompts.render("synthesize", &ctx).unwrap().text;
    assert!(text.contains("- [plan, llm:plan] 1. fi […8 more characters]"), "{text}");
    assert!(text.contains("FAILED: error […11 more characters]"), "{text}");
    assert!(text.contains("Task: Where is order #W1?"), "the query is never clipped: {text}");
}
