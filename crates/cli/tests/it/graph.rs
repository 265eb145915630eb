//! `flowmem graph check|render`.

use std::process::Output;

fn flowmem(dir: &std::path::Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_flowmem"))
        .args(args)
        .current_dir(dir)
        .env_remove("FLOWMEM_CONFIG")
        .output()
        .unwrap()
}

const BROKEN: &str = "\
nodes:
  - {id: plan, kind: llm, role: plan}
  - {id: lookup, kind: tool, hints: [get_order_details], instruction: 'use {{ nowhere }}'}
  - {id: pick, kind: branch, condition: {type: always}}
  - {id: answer, kind: llm, role: synthesize}
edges:
  - {from: plan, to: lookup}
  - {from: lookup, to: pick}
  - {from: pick, to: answer}
entry: plan
exit: answer
";

#[test]
fn check_prints_every_violation_with_its_node_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("g.yaml"), BROKEN).unwrap();
    let out = flowmem(dir.path(), &["graph", "check", "g.yaml", "--tool", "echo"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines.contains(&"g.yaml: node `lookup`: tool hint `get_order_details` names no available tool"),
        "{stdout}"
    );
    assert!(
        lines.iter().any(|line| line.contains("node `lookup`: the instruction template uses `nowhere`")),
        "{stdout}"
    );
    assert!(
        lines.iter().any(|line| line.contains("node `pick`: the branch edge to `answer` has no route label")),
        "{stdout}"
    );
    assert!(
        lines.iter().any(|line| line.contains("node `pick`: the condition can choose route `default`")),
        "{stdout}"
    );

    let out = flowmem(dir.path(), &["--json", "graph", "check", "g.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["tools_checked"], false);
    let nodes: Vec<&str> =
        report["violations"].as_array().unwrap().iter().map(|v| v["node"].as_str().unwrap()).collect();
    assert_eq!(nodes, ["pick", "pick", "lookup"]);
}

#[test]
fn check_passes_a_valid_graph_and_render_draws_it() {
    let dir = tempfile::tempdir().unwrap();
    let fixed = BROKEN
        .replace(" instruction: 'use {{ nowhere }}'", "")
        .replace("{from: pick, to: answer}", "{from: pick, to: answer, label: default}");
    std::fs::write(dir.path().join("g.yaml"), fixed).unwrap();
    let out = flowmem(dir.path(), &["graph", "check", "g.yaml", "--tool", "get_order_details"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8(out.stderr).unwrap().contains("g.yaml: valid (4 nodes, 3 edges)"));
    let out = flowmem(dir.path(), &["graph", "render", "g.yaml", "--format", "dot"]);
    assert_eq!(out.status.code(), Some(0));
    let dot = String::from_utf8(out.stdout).unwrap();
    assert!(
        dot.starts_with("digraph workflow {") && dot.contains("\"pick\" -> \"answer\" [label=\"default\"];"),
        "{dot}"
    );
    let out = flowmem(dir.path(), &["graph", "render", "g.yaml"]);
    assert!(String::from_utf8(out.stdout).unwrap().starts_with("flowchart TD"));
    let out = flowmem(dir.path(), &["graph", "render", "missing.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("missing.yaml"));
}
