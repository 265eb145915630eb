//! `flowmem serve`'s REST API under `/api/v1` (issue 21), over real HTTP: listing,
//! filtering, paging and curating workflows with `write` and `read` tokens, and
//! schemathesis (a client we did not write) fuzzing every route from the OpenAPI
//! document.

use std::collections::HashSet;
use std::process::Command;

use reqwest::StatusCode;
use serde_json::{Value, json};

use flowmem_testsupport::{deps_dir, require_path};

use crate::scout_log::sums_scout_run;
use crate::serve::{Served, create_token, tau_bench_memory};
use crate::support::TestDir;

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    fn of(served: &Served) -> Api {
        Api { base: served.url.trim_end_matches("/mcp").to_owned(), http: reqwest::Client::new() }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}/api/v1{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}")))
    }

    async fn get(&self, path: &str, token: &str) -> Value {
        let (status, body) = self.send(reqwest::Method::GET, path, Some(token), None).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        body
    }
}

fn ids(page: &Value) -> Vec<String> {
    page["items"].as_array().unwrap().iter().map(|item| item["id"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_api_lists_filters_pages_and_curates_workflows() {
    let dir = TestDir::new();
    let n_stored = tau_bench_memory(&dir) as u64;
    let write = create_token(&dir, "write");
    let read = create_token(&dir, "read");
    let served = Served::start(&dir, &["--memory", "memory.db"], &[]);
    let api = Api::of(&served);

    // Pages of 25, oldest first, cover every workflow once.
    let mut seen = Vec::new();
    for offset in (0..n_stored).step_by(25) {
        let page = api.get(&format!("/workflows?limit=25&offset={offset}"), &read).await;
        assert_eq!(page["total"], n_stored);
        seen.extend(ids(&page));
    }
    assert_eq!(seen.len() as u64, n_stored);
    assert_eq!(seen.iter().collect::<HashSet<_>>().len() as u64, n_stored, "no workflow twice");
    let newest = api.get("/workflows?sort=newest&limit=1", &read).await;
    assert_eq!(ids(&newest), [seen.last().unwrap().clone()]);

    // Text search: every hit holds the words, and the count is every such workflow's.
    let hits = api.get("/workflows?q=Cancel&limit=500", &read).await;
    let n_hits = hits["total"].as_u64().unwrap();
    assert!(n_hits > 0 && n_hits < n_stored, "{n_hits} of {n_stored}");
    for item in hits["items"].as_array().unwrap() {
        let text = format!("{} {}", item["description"], item["tools"]).to_lowercase();
        assert!(text.contains("cancel"), "{item}");
    }
    assert_eq!(api.get("/workflows?domain=airline", &read).await["total"], 0);

    // A read token reads, and may change nothing: a forged POST gets a 403.
    let id = seen[0].clone();
    let (status, body) = api.send(reqwest::Method::POST, &format!("/workflows/{id}/retire"), Some(&read), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["kind"], "forbidden");
    let (status, body) = api.send(reqwest::Method::GET, "/workflows", None, None).await;
    assert_eq!((status, body["error"]["kind"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));

    // Retire, find it among the retired only, restore, edit, delete.
    let (status, body) = api
        .send(reqwest::Method::POST, &format!("/workflows/{id}/retire"), Some(&write), Some(json!({"reason": "stale"})))
        .await;
    assert_eq!((status, body["action"].as_str()), (StatusCode::OK, Some("retired")), "{body}");
    assert_eq!(api.get("/workflows?limit=500", &read).await["total"], n_stored - 1);
    let retired = api.get("/workflows?status=retired", &read).await;
    assert_eq!(ids(&retired), std::slice::from_ref(&id));
    assert_eq!(retired["items"][0]["retired"]["reason"], "stale");
    let (status, _) = api.send(reqwest::Method::POST, &format!("/workflows/{id}/restore"), Some(&write), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(api.get("/workflows", &read).await["total"], n_stored);

    let edit = json!({"description": "Swap a delivered item for another variant"});
    let (status, body) = api.send(reqwest::Method::PATCH, &format!("/workflows/{id}"), Some(&write), Some(edit)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let detail = api.get(&format!("/workflows/{id}"), &read).await;
    assert_eq!(detail["workflow"]["description"], "Swap a delivered item for another variant");
    let provenance = &detail["provenances"][0];
    assert_eq!(provenance["inducer"], "rule");
    assert!(!provenance["trajectory_ids"].as_array().unwrap().is_empty(), "{detail}");
    let found = api.get("/workflows?q=variant", &read).await;
    assert!(ids(&found).contains(&id), "{found}");
    let usage = api.get(&format!("/workflows/{id}/usage"), &read).await;
    assert_eq!(usage["totals"], detail["workflow"]["stats"], "{usage}");
    assert!(usage["days"].is_array(), "{usage}");

    for (body, status) in [
        (json!({"description": "   "}), StatusCode::UNPROCESSABLE_ENTITY),
        (json!({"description": "x".repeat(2001)}), StatusCode::UNPROCESSABLE_ENTITY),
        (json!({"describe": "typo"}), StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        let (got, reply) =
            api.send(reqwest::Method::PATCH, &format!("/workflows/{id}"), Some(&write), Some(body)).await;
        assert_eq!(got, status, "{reply}");
        assert!(reply["error"]["message"].is_string(), "{reply}");
    }
    let (status, body) = api.send(reqwest::Method::GET, "/workflows?limit=501", Some(&read), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"]["message"].as_str().unwrap().contains("`limit`"), "{body}");

    let (status, _) = api.send(reqwest::Method::DELETE, &format!("/workflows/{id}"), Some(&write), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = api.send(reqwest::Method::GET, &format!("/workflows/{id}"), Some(&read), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"]["message"].as_str().unwrap().contains(&id), "{body}");

    // The document names every route and the types behind them.
    let document = api.get("/openapi.json", &read).await;
    assert_eq!(document["openapi"], "3.1.0");
    for path in
        ["/api/v1/workflows", "/api/v1/workflows/{id}", "/api/v1/workflows/{id}/retire", "/api/v1/workflows/{id}/usage"]
    {
        assert!(document["paths"][path].is_object(), "{path} is documented");
    }
    assert!(document["components"]["schemas"]["Workflow"].is_object());
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
}

/// schemathesis generates requests from the OpenAPI document (valid ones, and invalid
/// ones that must be refused) and checks every reply: no 5xx, every status and body as
/// documented. With the write token and with the read token, on a server that records
/// runs (`--otlp`) and shows a real scout run (`--runs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_undocumented_reply() {
    let schemathesis =
        require_path(&deps_dir().join("schemathesis-venv/bin/schemathesis"), "scripts/setup/45-schemathesis.sh");
    let runs = sums_scout_run().await;
    let dir = TestDir::new();
    tau_bench_memory(&dir);
    let tokens = [create_token(&dir, "write"), create_token(&dir, "read")];
    let runs_root = runs.path("runs");
    let served = Served::start(&dir, &["--memory", "memory.db", "--otlp", "--runs", runs_root.to_str().unwrap()], &[]);
    // The run's routes answer with the run, not only with 404s to made-up keys.
    let http = reqwest::Client::new();
    for path in ["/runs", "/runs/0.sums", "/runs/0.sums/candidates/1", "/learning", "/conversations"] {
        let reply = http
            .get(format!("{}/api/v1{path}", served.url.trim_end_matches("/mcp")))
            .bearer_auth(&tokens[1])
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), StatusCode::OK, "{path}: {}", reply.text().await.unwrap());
    }
    let base = served.url.trim_end_matches("/mcp").to_owned();
    for (scope, token) in ["write", "read"].into_iter().zip(&tokens) {
        let output = Command::new(&schemathesis)
            // Its cache goes where it runs.
            .current_dir(dir.path("."))
            .args(["run", &format!("{base}/api/v1/openapi.json"), "--url", &base, "--checks", "all"])
            .args(["--max-examples", "25", "--seed", "7", "--header", &format!("Authorization: Bearer {token}")])
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "schemathesis with a {scope} token:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!stdout.contains("FAILURES"), "{stdout}");
        // "N generated, N passed": every case passed.
        let counts = stdout
            .lines()
            .find_map(|line| {
                line.trim().strip_suffix(" skipped").or(Some(line.trim())).and_then(|line| {
                    let (generated, rest) = line.split_once(" generated, ")?;
                    let passed = rest.split_once(" passed")?.0;
                    Some((generated.parse::<u64>().ok()?, passed.parse::<u64>().ok()?))
                })
            })
            .unwrap_or_else(|| panic!("no case counts in:\n{stdout}"));
        assert!(counts.0 > 100 && counts.0 == counts.1, "{counts:?}\n{stdout}");
        if scope == "read" {
            // Every route that changes memory answered the read token with 403 only.
            let warning = stdout.split("403 Forbidden (4 operations):").nth(1).unwrap_or_else(|| panic!("{stdout}"));
            for route in ["DELETE /api/v1/workflows/{id}", "PATCH /api/v1/workflows/{id}", "/restore", "/retire"] {
                assert!(warning.contains(route), "{route}: {stdout}");
            }
        }
        assert!(!stdout.contains(token.as_str()), "the token is not echoed");
    }
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
}
