//! The learning-curve report lays out in a real browser (headless Chromium).

use std::process::Command;

use flowmem_memory::{Arm, Judgement, ProgressLine, TaskRun, learning_curve, render_curve_html};

use crate::repo_root;

fn run(index: usize, arm: Arm, success: bool) -> ProgressLine {
    ProgressLine::Run(Box::new(TaskRun {
        index,
        record_id: format!("r{index}"),
        arm,
        judgement: Judgement { success, reason: "scripted".to_owned() },
        judge_error: None,
        truth: Some(success),
        oracle_error: None,
        success,
        steps: 3,
        offered: Vec::new(),
        used: Vec::new(),
        failed_workflow_steps: Vec::new(),
        trajectory: None,
    }))
}

#[test]
fn the_learning_curve_renders_in_headless_chromium() {
    let found = Command::new("chromium").arg("--version").output().is_ok_and(|out| out.status.success());
    assert!(found, "`chromium` is not installed; run `scripts/setup/40-chromium.sh` (or `scripts/test.sh`)");
    let lines: Vec<ProgressLine> =
        (0..5).flat_map(|i| [run(i, Arm::Memory, i > 0), run(i, Arm::Baseline, i % 2 == 0)]).collect();
    let curve = learning_curve(&lines);
    assert_eq!(curve.memory.cumulative_success_rate, [0.0, 0.5, 2.0 / 3.0, 0.75, 0.8]);
    assert_eq!(curve.baseline.as_ref().unwrap().n_solved, 3);
    let html = render_curve_html(&curve);
    assert!(!html.contains("<script"), "the report must not need scripts");
    const PROBE: &str = r#"<script>
const svg = document.querySelector('svg');
const box = svg.getBoundingClientRect();
const lines = [...svg.querySelectorAll('polyline.curve')].filter(e => { const b = e.getBBox(); return b.width > 0 && b.height > 0; }).length;
document.body.setAttribute('data-probe', JSON.stringify({width: box.width, height: box.height, lines}));
</script>"#;
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("curve.html");
    std::fs::write(&page, html.replace("</body>", &format!("{PROBE}</body>"))).unwrap();
    let output = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", dir.path().join("profile").display()))
        .arg(format!("file://{}", page.display()))
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    let dom = String::from_utf8_lossy(&output.stdout);
    let start = dom.find("data-probe=\"").expect("the probe ran") + "data-probe=\"".len();
    let end = start + dom[start..].find('"').unwrap();
    let probe: serde_json::Value = serde_json::from_str(&dom[start..end].replace("&quot;", "\"")).unwrap();
    assert!(probe["width"].as_f64().unwrap() > 300.0 && probe["height"].as_f64().unwrap() > 100.0, "{probe}");
    assert_eq!(probe["lines"], 2, "memory and baseline curves are painted: {probe}");
}
