//! The web UI of `flowmem serve` (issue 21) in a real browser: Playwright
//! (`playwright-core` from npm) drives Debian's Chromium through `tests/browser/ui.mjs`
//! against a server started here, with a memory that learned from a conversation
//! recorded through the gateway and a scout run made by `flowmem scout`. The MCP
//! Python SDK checks that what the browser retired left the agents' tool list.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use serde_json::{Value, json};

use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer, deps_dir, require_path};

use crate::gateway::{cancel_turns, gateway_url, tools};
use crate::scout_log::sums_scout_run;
use crate::serve::{Served, create_token, tau_bench_memory, tool_names};
use crate::support::TestDir;

/// Markup a tool result and a description carry; it must show as text, never run.
const XSS: &str = "<script>window.__xss=1</script><img src=x onerror=window.__xss=2><b class=injected>bold</b>";

fn upstream() -> Script {
    Script::new()
        .models(["scripted-model"])
        .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "the order was cancelled as asked"})))
        .when_seq(
            Match::last_user_contains("uitest"),
            cancel_turns("#W0000042", "no longer needed", "Your order #W0000042 is cancelled."),
        )
        .otherwise(Reply::text("unexpected request"))
}

/// Where failing browser tests leave their screenshots (kept after the test).
fn shots_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-shots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn browser(program: &Value) -> Value {
    let playwright =
        require_path(&deps_dir().join("playwright/node_modules/playwright-core"), "scripts/setup/50-playwright.sh");
    let chromium = Command::new("chromium").arg("--version").output().is_ok_and(|out| out.status.success());
    assert!(chromium, "`chromium` is not installed; run `scripts/setup/40-chromium.sh`");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/ui.mjs");
    let output = Command::new("node")
        .arg(script)
        .arg(program.to_string())
        .env("PLAYWRIGHT_CORE", playwright)
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| {
        panic!(
            "the browser script printed no JSON ({err}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_signs_in_searches_curates_and_opens_conversations_and_scout_runs_in_chromium() {
    // A scout run, made by `flowmem scout` against the scripted models and the real
    // `server-everything`: one rewrite of the answer's prompt.
    let runs = sums_scout_run().await;

    // A memory of τ-bench workflows, served with the gateway and the run directory.
    let dir = TestDir::new();
    tau_bench_memory(&dir);
    let write = create_token(&dir, "write");
    let read = create_token(&dir, "read");
    let upstream = Arc::new(ScriptedLlmServer::start(upstream()).await);
    let base_url = upstream.base_url();
    let runs_root = runs.path("runs");
    let args = [
        "-v",
        "--memory",
        "memory.db",
        "--upstream",
        base_url.as_str(),
        "--quiet-secs",
        "0.5",
        "--runs",
        runs_root.to_str().unwrap(),
        "--max-workflow-tools",
        "200",
    ];
    let served =
        Served::start(&dir, &args, &[("OPENAI_BASE_URL", base_url.as_str()), ("FLOWMEM_MODEL", "scripted-model")]);
    let base = served.url.trim_end_matches("/mcp").to_owned();

    // A conversation through the gateway (the official `openai` SDK), whose tool result
    // holds markup; the gateway learns a workflow from it.
    let results = json!({
        "get_order_details": format!("{{\"order_id\": \"#W0000042\", \"status\": \"pending\", \"note\": \"{XSS}\"}}"),
        "cancel_pending_order": "{\"status\": \"cancelled\"}",
    });
    let conversation = json!({"base_url": gateway_url(&served), "api_key": write, "steps": [
        {"op": "loop", "messages": [{"role": "user", "content": "Please cancel my pending order #W0000042 (uitest), I no longer need it."}],
         "tools": tools(), "results": results},
        {"op": "wait", "done": 1, "timeout": 60}
    ]});
    let document = tokio::task::spawn_blocking(move || crate::gateway::client(&conversation)).await.unwrap();
    assert_eq!(document["steps"][1]["conversations"]["done"], 1, "learned from: {document}");

    // The learned workflow is an agent's tool over MCP (the official Python SDK).
    let find =
        json!({"op": "call", "name": "find_workflows", "args": {"task": "cancel order W0000042 uitest", "k": 5}});
    let before = crate::serve::client(&served.program(Some(&read), json!([{"op": "list_tools"}, find])));
    let hits = before["steps"][1]["structured"]["workflows"].as_array().unwrap_or_else(|| panic!("{before}"));
    let learned = hits
        .iter()
        .find(|hit| hit["description"].as_str().unwrap_or("").contains("uitest"))
        .unwrap_or_else(|| panic!("{before}"));
    let tool = learned["tool"].as_str().unwrap().to_owned();
    assert!(tool_names(&before["steps"][0]).contains(&tool), "{tool} is offered before");

    let listed = dir.run(&["--json", "memory", "list", "--memory", "memory.db"]);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let spare = listed.as_array().unwrap().iter().find(|w| w["id"] != learned["id"]).unwrap()["id"].clone();

    let program = json!({"base": base, "write_token": write, "read_token": read, "find": "uitest", "xss": XSS,
        "run_key": "0.sums", "spare_id": spare, "shots": shots_dir()});
    let report = tokio::task::spawn_blocking(move || browser(&program)).await.unwrap();
    let tests = report["tests"].as_array().unwrap_or_else(|| panic!("{report}"));
    assert_eq!(tests.len(), 3, "{report}");
    for test in tests {
        assert_eq!(
            test["ok"], true,
            "browser test {} failed: {}\nscreenshot: {}",
            test["name"], test["error"], test["screenshot"]
        );
    }
    assert_eq!(tests[0]["workflow_id"], learned["id"], "the browser opened the learned workflow: {report}");
    assert_eq!(tests[2]["forged_status"], 403);

    // What the browser retired left the agents' tool list; the read token changed nothing.
    let after = crate::serve::client(&served.program(Some(&read), json!([{"op": "list_tools"}])));
    assert!(!tool_names(&after["steps"][0]).contains(&tool), "{tool} left the MCP tool list: {after}");
    let http = reqwest::Client::new();
    let get = |path: String, token: String| {
        let (http, base) = (http.clone(), base.clone());
        async move { http.get(format!("{base}/api/v1{path}")).bearer_auth(token).send().await.unwrap() }
    };
    let spare_now: Value =
        get(format!("/workflows/{}", spare.as_str().unwrap()), read.clone()).await.json().await.unwrap();
    assert!(spare_now["workflow"].get("retired").is_none(), "the forged POST changed nothing: {spare_now}");
    let edited: Value =
        get(format!("/workflows/{}", learned["id"].as_str().unwrap()), read.clone()).await.json().await.unwrap();
    assert_eq!(edited["workflow"]["description"], XSS, "the description was saved as typed");
    assert_eq!(edited["workflow"]["retired"]["reason"], "superseded in the UI test");

    // The same records through the REST API: the conversation is the write token's only.
    let conversation_id = tests[0]["conversation_id"].as_str().unwrap().to_owned();
    let listed: Value = get("/conversations".to_owned(), write.clone()).await.json().await.unwrap();
    assert_eq!(listed["items"][0]["id"], conversation_id.as_str(), "{listed}");
    assert!(listed["items"][0]["first_user"].as_str().unwrap().contains("uitest"), "{listed}");
    assert_eq!(listed["items"][0]["verdict"], true, "judged: {listed}");
    assert_eq!(listed["items"][0]["verdict_reason"], "the order was cancelled as asked", "{listed}");
    assert_eq!(listed["items"][0]["learned"], 1, "one workflow stored: {listed}");
    let detail: Value = get(format!("/conversations/{conversation_id}"), write.clone()).await.json().await.unwrap();
    assert_eq!(detail["state"], "done", "{detail}");
    assert_eq!(detail["result"]["stored"][0]["id"], learned["id"], "{detail}");
    assert_eq!(
        get(format!("/conversations/{conversation_id}"), read.clone()).await.status(),
        404,
        "not the read token's"
    );
    let learning: Value = get("/learning".to_owned(), read.clone()).await.json().await.unwrap();
    assert_eq!(learning["counts"]["done"], 1, "{learning}");
    let run: Value = get("/runs/0.sums".to_owned(), read.clone()).await.json().await.unwrap();
    assert_eq!(run["tree"].as_array().map(Vec::len), Some(tests[1]["tree_nodes"].as_u64().unwrap() as usize), "{run}");

    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
    for token in [&write, &read] {
        assert!(!stderr.contains(token.as_str()), "a token reached the log");
    }
    assert!(stderr.contains("signed in to the web UI"), "sign-ins are logged: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_pages_need_a_session_escape_what_they_show_and_refuse_forms_without_the_csrf_token() {
    let dir = TestDir::new();
    tau_bench_memory(&dir);
    let write = create_token(&dir, "write");
    let served = Served::start(&dir, &["--memory", "memory.db"], &[]);
    let base = served.url.trim_end_matches("/mcp").to_owned();
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();

    // Without a session every page sends the browser to sign in, back to where it was.
    for path in ["/", "/workflows/x", "/conversations", "/runs", "/learning", "/runs/0"] {
        let reply = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(reply.status(), 303, "{path}");
        let location = reply.headers()["location"].to_str().unwrap().to_owned();
        assert!(location.starts_with("/signin?next=%2F"), "{path}: {location}");
        let csp = reply.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    }
    // A form without a session is refused, and changes nothing.
    let listed = dir.run(&["--json", "memory", "list", "--memory", "memory.db"]);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    let reply = http.post(format!("{base}/workflows/{id}/delete")).form(&[("csrf", "x")]).send().await.unwrap();
    assert_eq!(reply.status(), 403);

    // Hostile paths and parameters get an answer (here: go and sign in), never a
    // dropped connection.
    let hostile = [("/runs/0..", 303), ("/runs/..%2F..%2Fetc", 303), ("/?page=abc", 303), ("/workflows/%FF", 400)];
    for (path, status) in hostile {
        assert_eq!(http.get(format!("{base}{path}")).send().await.unwrap().status(), status, "{path}");
    }
    // Sign in; only a local path is followed after.
    let off_site =
        ["//evil.example/", "/\\evil.example/", "/\t/evil.example/", "https://evil.example/", "/a\r\nSet-Cookie: x=1"];
    for next in off_site {
        let reply = http
            .post(format!("{base}/signin"))
            .form(&[("token", write.as_str()), ("next", next)])
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 303, "{next:?}");
        assert_eq!(reply.headers()["location"], "/", "an off-site `next` is not followed: {next:?}");
    }
    let reply = http
        .post(format!("{base}/signin"))
        .form(&[("token", write.as_str()), ("next", "/learning?x=1")])
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 303);
    assert_eq!(reply.headers()["location"], "/learning?x=1", "a local `next` is followed");
    let cookie = reply.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && !cookie.contains(&write), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_owned();

    let hostile = [
        ("/runs/0..", 404),
        ("/runs/..%2F..%2Fetc", 404),
        ("/runs/0.%2E%2E", 404),
        ("/runs/99", 404),
        ("/?page=abc", 400),
        ("/?page=0&status=bogus&sort=x", 200),
        ("/workflows/nope", 404),
        ("/conversations/nope", 404),
    ];
    for (path, status) in hostile {
        let reply = http.get(format!("{base}{path}")).header("cookie", &session).send().await.unwrap();
        assert_eq!(reply.status(), status, "{path}");
    }
    let reply =
        http.post(format!("{base}/workflows/{id}/explode")).header("cookie", &session).form(&[("csrf", "x")]).send();
    assert_eq!(reply.await.unwrap().status(), 403, "a wrong CSRF token is refused before the action is looked at");

    // The session's forms carry its CSRF token; without it, or with another, a change is
    // refused.
    let page = http.get(format!("{base}/workflows/{id}")).header("cookie", &session).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    let csrf = page.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    for wrong in ["", "0000", &csrf[1..]] {
        let reply = http
            .post(format!("{base}/workflows/{id}/retire"))
            .header("cookie", &session)
            .form(&[("csrf", wrong), ("reason", "no")])
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 403, "csrf {wrong:?}");
    }
    // With it, a description with markup is stored and shown escaped, in the page and
    // in the search results fetched as you type.
    let reply = http
        .post(format!("{base}/workflows/{id}/edit"))
        .header("cookie", &session)
        .form(&[("csrf", csrf.as_str()), ("description", XSS)])
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 303);
    for path in [format!("/workflows/{id}"), "/?q=injected&fragment=1".to_owned()] {
        let page =
            http.get(format!("{base}{path}")).header("cookie", &session).send().await.unwrap().text().await.unwrap();
        assert!(page.contains("&lt;script&gt;window.__xss=1&lt;"), "{path}: escaped");
        assert!(!page.contains("<script>window") && !page.contains("<img src=x"), "{path}: no raw markup");
    }
    // Signing out ends the session.
    let reply = http
        .post(format!("{base}/signout"))
        .header("cookie", &session)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 303);
    let reply = http.get(format!("{base}/")).header("cookie", &session).send().await.unwrap();
    assert_eq!(reply.status(), 303, "the old cookie no longer works");
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
}
