//! The HTML report opened in headless Chromium: its charts must lay out and paint.

use std::process::Command;

use flowmem_eval::{RunMeasurement, SystemRole, render_html, summarize};

use crate::util::repo_root;

fn run(system: &str, role: SystemRole, record: &str, repeat: u32, tc: f64, es: f64) -> RunMeasurement {
    RunMeasurement {
        system: system.into(),
        role,
        record_id: record.into(),
        repeat,
        tc,
        es: Some(es),
        judge_failed: false,
        task_success: Some(tc == 1.0),
        latency_ms: 900.0,
        llm_calls: 3,
        prompt_tokens: 200,
        completion_tokens: 40,
        tool_calls: 2,
        error: None,
        tools: Vec::new(),
    }
}

fn chromium() -> String {
    let found = Command::new("chromium").arg("--version").output().is_ok_and(|out| out.status.success());
    assert!(found, "`chromium` is not installed; run `scripts/setup/40-chromium.sh` (or `scripts/test.sh`)");
    "chromium".to_string()
}

/// Appends a script that measures every chart in the laid-out page and writes the sizes
/// into the DOM, where `--dump-dom` shows them. The report itself has no script.
fn with_probe(html: &str) -> String {
    const PROBE: &str = r#"<script>
const out = {};
for (const svg of document.querySelectorAll('svg')) {
  const box = svg.getBoundingClientRect();
  const painted = sel => [...svg.querySelectorAll(sel)].filter(e => { const b = e.getBBox(); return b.width > 0 && b.height > 0; }).length;
  out[svg.id] = { width: box.width, height: box.height, bars: painted('rect.bar'), boxes: painted('rect.iqr') };
}
document.body.setAttribute('data-probe', JSON.stringify(out));
</script>"#;
    html.replace("</body>", &format!("{PROBE}</body>"))
}

#[test]
fn charts_render_in_headless_chromium() {
    let browser = chromium();
    let mut runs = Vec::new();
    for record in ["r1", "r2", "r3"] {
        for repeat in 0..3 {
            let jitter = f64::from(repeat) * 0.1;
            runs.push(run("react", SystemRole::Baseline, record, repeat, 0.5, 0.3 + jitter));
            runs.push(run("workflow", SystemRole::Workflow, record, repeat, 1.0, 0.7 + jitter / 4.0));
        }
    }
    let html = render_html(&summarize(runs), "report test");
    assert!(!html.contains("<script"), "the report must not need scripts");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    std::fs::write(&page, with_probe(&html)).unwrap();
    let profile = dir.path().join("profile");
    let output = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .current_dir(repo_root())
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    let start = dom.find("data-probe=\"").expect("the probe ran and wrote its result") + "data-probe=\"".len();
    let end = start + dom[start..].find('"').unwrap();
    let probe: serde_json::Value = serde_json::from_str(&dom[start..end].replace("&quot;", "\"")).unwrap();
    let bars = &probe["score-bars"];
    let boxes = &probe["cv-boxplot"];
    assert!(bars["width"].as_f64().unwrap() > 100.0 && bars["height"].as_f64().unwrap() > 100.0, "{probe}");
    // Two systems × TC, ES and task success (react has 0 task success: a zero-height bar).
    assert_eq!(bars["bars"], 5, "{probe}");
    assert!(boxes["width"].as_f64().unwrap() > 100.0, "{probe}");
    assert_eq!(boxes["boxes"], 2, "{probe}");
}
