//! Issue 27: hostile input, tried as a new user would. Every bad input gets a clear
//! error, nothing good is lost, no file is clobbered. One test (or a few) per finding of
//! the issue, numbered as there.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
use serde_json::{Value, json};

use crate::support::{TestDir, data};

const TASKS: &str = r#"{"id": 0, "instruction": "q0", "actions": [{"name": "a", "kwargs": {"x": 1}}], "outputs": []}
{"id": 1, "instruction": "q1", "actions": [{"name": "b", "kwargs": {}}]}
"#;

/// Runs the binary in `dir` with a clean model environment plus `env`, bounded by
/// `timeout`.
async fn flowmem_async(dir: &Path, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_flowmem"));
    command.current_dir(dir).args(args);
    for var in ["OPENAI_BASE_URL", "OPENAI_API_KEY", "FLOWMEM_MODEL", "FLOWMEM_CONFIG", "FLOWMEM_MEMORY"] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    tokio::time::timeout(timeout, command.output()).await.expect("flowmem hung").expect("running flowmem")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// 1. Output paths are not clobbered.

#[test]
fn an_output_that_is_a_fifo_is_refused_and_named() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", TASKS);
    let status = Command::new("mkfifo").arg(dir.path("out.jsonl")).status().expect("mkfifo");
    assert!(status.success());
    let run = dir.run(&["import", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("`out.jsonl`") && run.stderr.contains("not a regular file"), "{}", run.stderr);
    let file_type = std::fs::symlink_metadata(dir.path("out.jsonl")).unwrap().file_type();
    assert!(file_type.is_fifo(), "the FIFO is still there");
}

#[test]
fn an_output_that_is_a_symlink_is_written_through_to_its_target() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", TASKS);
    std::fs::create_dir(dir.path("real")).unwrap();
    std::fs::write(dir.path("real/out.jsonl"), "old\n").unwrap();
    std::os::unix::fs::symlink("real/out.jsonl", dir.path("out.jsonl")).unwrap();
    let run = dir.run(&["import", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(std::fs::symlink_metadata(dir.path("out.jsonl")).unwrap().file_type().is_symlink(), "the link stays");
    assert_eq!(dir.read("real/out.jsonl").lines().count(), 2, "the target holds the new items");
}

#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", TASKS);
    std::os::unix::fs::symlink("tasks.jsonl", dir.path("alias.jsonl")).unwrap();
    for output in ["tasks.jsonl", "./tasks.jsonl", "alias.jsonl"] {
        let run = dir.run(&["import", "--format", "tau-bench", "tasks.jsonl", "-o", output]);
        assert_eq!(run.code, 2, "{output}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!("`{output}`")) && run.stderr.contains("is also an input"),
            "{}",
            run.stderr
        );
        assert_eq!(dir.read("tasks.jsonl"), TASKS);
    }
    // `split` and `memory export` read inputs too.
    dir.write("records.jsonl", "");
    let run = dir.run(&["import", "--format", "tau-bench", "tasks.jsonl", "-o", "records.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    std::fs::create_dir(dir.path("parts")).unwrap();
    std::fs::copy(dir.path("records.jsonl"), dir.path("parts/opt.jsonl")).unwrap();
    let run = dir.run(&["split", "parts/opt.jsonl", "--out", "parts"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("is also an input"), "{}", run.stderr);
}

#[test]
fn output_files_get_the_mode_the_umask_allows() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", TASKS);
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 022 && exec {} import --format tau-bench tasks.jsonl -o out.jsonl",
            env!("CARGO_BIN_EXE_flowmem")
        ))
        .current_dir(dir.path("."))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let mode = std::fs::metadata(dir.path("out.jsonl")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "{mode:o}");
}

// 2. One bad byte loses nothing else.

#[test]
fn a_line_that_is_not_utf8_is_skipped_by_line_and_the_rest_import() {
    let dir = TestDir::new();
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(br#"{"id": 0, "instruction": "q0", "actions": []}"#);
    bytes.extend_from_slice(b"\n{\"id\": 1, \"instruction\": \"q\xff\", \"actions\": []}\n");
    bytes.extend_from_slice(br#"{"id": 2, "instruction": "q2", "actions": []}"#);
    std::fs::write(dir.path("tasks.jsonl"), bytes).unwrap();
    let run = dir.run(&["import", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("`tasks.jsonl:2`: not valid UTF-8"), "{}", run.stderr);
    let ids: Vec<String> = dir
        .read("out.jsonl")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["0", "2"], "the line with a BOM imports too");
}

#[test]
fn a_binary_file_in_a_directory_is_skipped_and_the_others_import() {
    let dir = TestDir::new();
    std::fs::create_dir(dir.path("answers")).unwrap();
    for name in ["13_ChatGPT_DFS_woFilter_w2.json", "15_ChatGPT_DFS_woFilter_w2.json"] {
        let source = data(&format!("toolbench-data_example/answer/G3_answer/{name}"));
        std::fs::copy(source, dir.path(&format!("answers/{name}"))).unwrap();
    }
    std::fs::write(dir.path("answers/2_junk.json"), [0x89, b'P', b'N', b'G', 0, 0xff, 0xfe, 1, 2, 3]).unwrap();
    let run = dir.run(&["import", "--format", "toolbench", "answers", "-o", "out.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("2_junk.json:1`: not valid UTF-8"), "{}", run.stderr);
    assert_eq!(dir.read("out.jsonl").lines().count(), 2);
}

// 3. Duplicate ids are reported, and kept or renamed as asked.

#[test]
fn duplicate_ids_are_reported_and_kept_or_renamed_as_asked() {
    let dir = TestDir::new();
    dir.write(
        "tasks.jsonl",
        "{\"id\": 7, \"instruction\": \"a\", \"actions\": []}\n\
         {\"id\": 8, \"instruction\": \"b\", \"actions\": []}\n\
         {\"id\": 7, \"instruction\": \"c\", \"actions\": []}\n",
    );
    let ids = |dir: &TestDir| -> Vec<String> {
        dir.read("out.jsonl")
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap()["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let run = dir.run(&["import", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("warning: duplicate id `7`: `tasks.jsonl:3` repeats `tasks.jsonl:1`"),
        "{}",
        run.stderr
    );
    assert_eq!(ids(&dir), ["7", "8", "7"], "kept by default");
    let run =
        dir.run(&["import", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl", "--duplicate-ids", "rename"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(ids(&dir), ["7", "8", "7~2"]);
    let run = dir.run(&["--json", "import", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl"]);
    let summary: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(summary["duplicates"][0]["id"], "7");
    assert_eq!(summary["duplicates"][0]["locations"].as_array().map(Vec::len), Some(2));
}

// 3 and 13. XES logs: repeated case ids, bad timestamps and empty traces are reported.

#[test]
fn xes_repeated_cases_bad_timestamps_and_empty_traces_are_reported() {
    let dir = TestDir::new();
    dir.write(
        "log.xes",
        r#"<log>
<trace><string key="concept:name" value="c1"/>
<event><string key="concept:name" value="a"/><date key="time:timestamp" value="2020-01-01T00:00:01Z"/></event>
</trace>
<trace><string key="concept:name" value="c2"/></trace>
<trace><string key="concept:name" value="c1"/>
<event><string key="concept:name" value="b"/><date key="time:timestamp" value="2020-01-01T00:00:02Z"/></event>
</trace>
<trace><string key="concept:name" value="c3"/>
<event><string key="concept:name" value="x"/><date key="time:timestamp" value="yesterday"/></event>
<event><string key="concept:name" value="y"/><date key="time:timestamp" value="2020-01-01T00:00:03Z"/></event>
</trace>
</log>"#,
    );
    let run = dir.run(&["import", "--format", "xes", "log.xes", "-o", "out.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("case `c1`") && run.stderr.contains("trace 3") && run.stderr.contains("trace 1"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("trace 2") && run.stderr.contains("`c2`") && run.stderr.contains("no events"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("`yesterday`") && run.stderr.contains("case `c3`"), "{}", run.stderr);
    let run = dir.run(&["--json", "import", "--format", "xes", "log.xes", "-o", "out.jsonl"]);
    let summary: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(summary["notes"].as_array().map(Vec::len), Some(3), "{summary:#}");
}

// 4. Typos in graph files and prompt overrides are errors.

#[test]
fn an_unknown_field_in_a_graph_is_an_error_naming_the_nearest_known_one() {
    let dir = TestDir::new();
    let graph = json!({
        "nodes": [
            {"id": "look", "kind": "tool", "hint": ["get_order"]},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instrucion": "Be brief"}
        ],
        "edges": [{"from": "look", "to": "answer"}],
        "entry": "look",
        "exit": "answer"
    });
    dir.write("g.json", &graph.to_string());
    let run = dir.run(&["graph", "check", "g.json"]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("g.json"), "{}", run.stderr);
    assert!(run.stderr.contains("`nodes[0].hint`") && run.stderr.contains("did you mean `hints`"), "{}", run.stderr);
    dir.write("g.yaml", "nodes:\n  - {id: a, kind: llm, role: plan, instrucion: x}\nentry: a\nexit: a\n");
    let run = dir.run(&["graph", "check", "g.yaml"]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("did you mean `instruction`"), "{}", run.stderr);
}

#[tokio::test]
async fn a_misnamed_prompt_template_is_an_error() {
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::text("done"))).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("prompts")).unwrap();
    std::fs::write(dir.path().join("prompts/synthesise.j2"), "{# prompt: synthesise v1 #}\nSay {{ query }}").unwrap();
    let graph = json!({"nodes": [{"id": "a", "kind": "llm", "role": "synthesize"}], "entry": "a", "exit": "a"});
    std::fs::write(dir.path().join("g.json"), graph.to_string()).unwrap();
    let base_url = server.base_url();
    let env = [("OPENAI_BASE_URL", base_url.as_str()), ("FLOWMEM_MODEL", "m")];
    let args = ["run", "g.json", "--query", "hi", "--prompts", "prompts"];
    let output = flowmem_async(dir.path(), &args, &env, Duration::from_secs(60)).await;
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = text(&output.stderr);
    assert!(stderr.contains("synthesise.j2") && stderr.contains("did you mean `synthesize`"), "{stderr}");
    assert!(server.chat_requests().is_empty(), "nothing ran");
}

// 6. A broken HTTP body is a protocol error, never model output.

#[tokio::test]
async fn a_broken_http_body_is_a_protocol_error_naming_the_endpoint() {
    let runs = r##"{"id":"t1","query":"q","success":true,"steps":[{"action":{"kind":"tool_call","tool":"a","args":{}}},{"action":{"kind":"tool_call","tool":"b","args":{}}}]}"##;
    for (reply, problem) in [
        (Reply::raw(200, "<html><body>Bad gateway</body></html>"), "not JSON"),
        (Reply::missing_choices(), "choices"),
        (Reply::malformed_json(), "not JSON"),
    ] {
        let server = ScriptedLlmServer::start(Script::new().otherwise(reply)).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("runs.jsonl"), runs).unwrap();
        let config = format!(
            "[models.m]\nbase_url = \"{}\"\nmodel = \"m\"\nretries = 0\n[llm]\ncache = \"off\"\n",
            server.base_url()
        );
        std::fs::write(dir.path().join("flowmem.toml"), config).unwrap();
        let args = ["induce", "--mode", "lm", "runs.jsonl", "--memory", "memory.db", "--model", "m"];
        let output = flowmem_async(dir.path(), &args, &[], Duration::from_secs(60)).await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&format!("{}/chat/completions", server.base_url())), "{stderr}");
        assert!(stderr.contains("protocol error") && stderr.contains(problem), "{stderr}");
    }
}

// 7. Secrets a server echoes are never printed.

#[tokio::test]
async fn a_secret_echoed_by_the_server_is_redacted_from_everything_printed() {
    const KEY: &str = "sk-hostile-ECHOED-0123456789";
    let echo = format!("{{\"error\": {{\"message\": \"Incorrect API key provided: {KEY}\"}}}}");
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::raw(401, echo))).await;
    let dir = tempfile::tempdir().unwrap();
    let base_url = server.base_url();
    let env = [("OPENAI_BASE_URL", base_url.as_str()), ("OPENAI_API_KEY", KEY)];
    for args in [
        &["llm", "chat", "--model", "m", "hi"][..],
        &["-vv", "llm", "chat", "--model", "m", "hi"],
        &["--json", "llm", "chat", "--model", "m", "hi"],
    ] {
        let output = flowmem_async(dir.path(), args, &env, Duration::from_secs(60)).await;
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let all = format!("{}{}", text(&output.stdout), text(&output.stderr));
        assert!(all.contains("401"), "{all}");
        assert!(!all.contains(KEY), "{args:?} printed the key: {all}");
        assert!(all.contains("[redacted]"), "{all}");
    }
}

// 8. With --json, every error is one JSON document on stdout.

/// A failing command line, the kind of error it must report, and the fields it must name.
type Case<'a> = (&'a [&'a str], &'a str, &'a [(&'a str, Value)]);

/// Runs each case with `--json` in `dir`: exit 2, and stdout one JSON document whose
/// `error` has the kind, a message, a hint (or null), and the fields.
fn check_json_errors(dir: &TestDir, cases: &[Case<'_>]) {
    for (args, kind, fields) in cases {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let run = dir.run(&all);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        let doc: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|err| panic!("{args:?}: stdout is not JSON ({err}): {}", run.stdout));
        let error = &doc["error"];
        assert_eq!(error["kind"], *kind, "{args:?}: {doc:#}");
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{args:?}: {doc:#}");
        assert!(error.get("hint").is_some(), "{args:?}: a hint (or null): {doc:#}");
        for (name, value) in *fields {
            assert_eq!(error[name], *value, "{args:?}: {doc:#}");
        }
    }
}

#[test]
fn every_error_with_json_prints_one_json_document() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", TASKS);
    dir.write("bad.json", "{\"nodes\": [}");
    dir.write("flowmem.toml", "[models.x]\nmodle = \"y\"\n");
    let cases: &[Case<'_>] = &[
        (&["import", "--format", "openai", "nope.jsonl", "-o", "o.jsonl"], "io", &[("file", json!("nope.jsonl"))]),
        (&["graph", "check", "bad.json"], "input", &[("file", json!("bad.json")), ("line", json!(1))]),
        (&["graph", "check"], "usage", &[]),
        (&["run", "x.json", "--query", "q", "--concurrency", "0"], "usage", &[("field", json!("--concurrency"))]),
        (&["nonsense"], "usage", &[]),
        (&["llm", "chat", "hi", "--config", "flowmem.toml"], "config", &[("file", json!("flowmem.toml"))]),
        (
            &["import", "--format", "tau-bench", "tasks.jsonl", "-o", "tasks.jsonl"],
            "input",
            &[("file", json!("tasks.jsonl"))],
        ),
    ];
    check_json_errors(&dir, cases);
}

/// More of the probe's error cases, one per command that reads something: each prints
/// one JSON document naming the kind, and the file, line, flag or node at fault.
#[test]
fn every_command_names_what_failed_in_its_json_error() {
    let dir = TestDir::new();
    dir.write("recs.jsonl", "{\"id\": \"a\", \"query\": \"q\", \"orchestration\": []}\n{bad\n");
    dir.write(
        "invalid.json",
        r#"{"name": "g", "nodes": [{"id": "a", "kind": "llm", "role": "plan"}], "edges": [], "entry": "a", "exit": "zz"}"#,
    );
    dir.write("notdb.db", "not a database at all, but long enough to look like a file");
    std::fs::create_dir_all(dir.path("emptydir")).unwrap();
    let other = rusqlite::Connection::open(dir.path("other.db")).unwrap();
    other.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);").unwrap();
    drop(other);
    let file = |name: &str| ("file", json!(name));
    let cases: &[Case<'_>] = &[
        (&["stats", "missing.jsonl"], "io", &[file("missing.jsonl")]),
        (&["stats", "recs.jsonl"], "input", &[file("recs.jsonl"), ("line", json!(2))]),
        (&["mine", "missing.jsonl"], "io", &[file("missing.jsonl")]),
        (&["mine", "recs.jsonl", "--miner", "nope"], "usage", &[("field", json!("--miner"))]),
        (&["split", "recs.jsonl", "--seed", "1", "--out", "s/"], "input", &[file("recs.jsonl"), ("line", json!(2))]),
        (&["split", "missing.jsonl", "--seed", "1", "--out", "s/"], "io", &[file("missing.jsonl")]),
        (&["score", "--records", "missing.jsonl", "--runs", "r.jsonl"], "io", &[file("missing.jsonl")]),
        (&["memory", "list", "--memory", "other.db"], "memory", &[file("other.db")]),
        (&["memory", "list"], "usage", &[("field", json!("--memory"))]),
        (&["memory", "show", "x", "--memory", "fresh.db"], "memory", &[file("fresh.db")]),
        (&["memory", "search", "x", "--memory", "notdb.db"], "memory", &[file("notdb.db")]),
        (&["memory", "eval-retrieval", "recs.jsonl", "--memory", "fresh.db"], "memory", &[file("fresh.db")]),
        (&["conform", "recs.jsonl", "--model", "missing.json"], "io", &[file("missing.json")]),
        (
            &["conform", "recs.jsonl", "--model", "invalid.json"],
            "graph",
            &[file("invalid.json"), ("node", json!("zz"))],
        ),
        (&["run", "invalid.json", "--query", "q"], "graph", &[("node", json!("zz"))]),
        (&["serve"], "usage", &[("field", json!("--memory"))]),
        (&["induce", "--mode", "rule", "missing.jsonl", "--memory", "m.db"], "io", &[file("missing.jsonl")]),
        (&["tools", "list"], "usage", &[("field", json!("--config"))]),
        (&["scout", "--resume", "emptydir"], "io", &[file("emptydir/run.json")]),
        (&["import", "--format", "xes", "missing.xes", "-o", "o.jsonl"], "io", &[file("missing.xes")]),
        (&["agent", "--query", "q", "--guard", "missing.tree"], "io", &[file("missing.tree")]),
        (&["learn", "--online", "missing.jsonl", "--memory", "m.db", "--out", "o/"], "io", &[file("missing.jsonl")]),
        (
            &["eval", "--workflow", "w.json", "--records", "recs.jsonl", "--out", "e/"],
            "input",
            &[file("recs.jsonl"), ("line", json!(2))],
        ),
    ];
    check_json_errors(&dir, cases);
    assert!(!dir.path("fresh.db").exists(), "a command that reads a memory does not create one");
}

// 9. Foreign databases are left alone; flowmem's own can be checked.

#[test]
fn a_foreign_sqlite_file_is_refused_and_left_unchanged() {
    let dir = TestDir::new();
    let path = dir.path("other.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');").unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let run = dir.run(&["memory", "list", "--memory", "other.db"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("`other.db`") && run.stderr.contains("not a flowmem memory"), "{}", run.stderr);
    assert_eq!(std::fs::read(&path).unwrap(), before, "the file is unchanged");
    // flowmem's own files are marked, and an empty file may become one.
    dir.write("new.db", "");
    let run = dir.run(&["memory", "list", "--memory", "new.db"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let conn = rusqlite::Connection::open(dir.path("new.db")).unwrap();
    let id: i64 = conn.query_row("PRAGMA application_id", [], |row| row.get(0)).unwrap();
    assert_ne!(id, 0);
}

#[test]
fn memory_check_reports_a_corrupted_page() {
    let dir = TestDir::new();
    let lines: Vec<String> = (0..60)
        .map(|i| {
            format!(
                r#"{{"id":"wf-{i}","description":"Workflow number {i} {}","steps":[{{"state":"s","reasoning":"r","action":{{"tool":"tool_{i}","args":{{"x":"{{x}}"}}}}}}],"scope":{{"domain":"d"}}}}"#,
                "padding ".repeat(40)
            )
        })
        .collect();
    dir.write("workflows.jsonl", &lines.join("\n"));
    let run = dir.run(&["memory", "import", "workflows.jsonl", "--memory", "m.db"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = dir.run(&["memory", "check", "--memory", "m.db"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("ok"), "{}", run.stdout);
    // Overwrite the middle of a page holding workflows.
    let mut bytes = std::fs::read(dir.path("m.db")).unwrap();
    let page = 4096;
    assert!(bytes.len() >= 6 * page, "{} bytes", bytes.len());
    let start = bytes.len() - 2 * page + 8;
    for byte in &mut bytes[start..start + 512] {
        *byte = 0xA5;
    }
    std::fs::write(dir.path("m.db"), bytes).unwrap();
    let run = dir.run(&["memory", "check", "--memory", "m.db"]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("m.db") && run.stdout.to_lowercase().contains("corrupt"), "{}", run.stdout);
}

// 11. Counts of zero are rejected by the argument parser.

#[test]
fn zero_counts_are_rejected_naming_the_flag() {
    let dir = TestDir::new();
    let cases: &[(&[&str], &str)] = &[
        (&["run", "g.json", "--query", "q", "--concurrency", "0"], "--concurrency"),
        (&["eval", "--records", "r.jsonl", "--baseline", "--out", "o", "--concurrency", "0"], "--concurrency"),
        (&["eval", "--records", "r.jsonl", "--baseline", "--out", "o", "--repeat", "0"], "--repeat"),
        (&["induce", "runs.jsonl", "--memory", "m.db", "--batch-size", "0"], "--batch-size"),
        (&["learn", "--online", "r.jsonl", "--memory", "m.db", "--out", "o", "--batch-size", "0"], "--batch-size"),
        (&["tools", "replay", "r.jsonl", "--concurrency", "0"], "--concurrency"),
        (&["scout", "--records", "r.jsonl", "--out", "o", "--concurrency", "0"], "--concurrency"),
        (&["agent", "--query", "q", "--max-steps", "0"], "--max-steps"),
        (&["memory", "eval-retrieval", "r.jsonl", "--memory", "m.db", "-k", "0"], "--k"),
        (&["conform", "r.jsonl", "--tree", "'a'", "--max-states", "0"], "--max-states"),
    ];
    for (args, flag) in cases {
        let run = dir.run(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!("invalid value '0' for '{flag}")) && run.stderr.contains("at least 1"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

// 12. A trace grows linearly with the run.

/// A chain of `n` LLM nodes, `n0` to `n{n-1}`.
fn chain(n: usize) -> Value {
    flowmem_testsupport::llm_chain(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_grows_linearly_with_the_chain() {
    let server =
        ScriptedLlmServer::start(Script::new().otherwise(Reply::text("a result of forty characters or so....."))).await;
    let dir = tempfile::tempdir().unwrap();
    let base_url = server.base_url();
    let env = [("OPENAI_BASE_URL", base_url.as_str()), ("FLOWMEM_MODEL", "m")];
    let mut sizes = Vec::new();
    for n in [60, 120] {
        std::fs::write(dir.path().join("g.json"), chain(n).to_string()).unwrap();
        let trace = format!("trace{n}.jsonl");
        let args = ["run", "g.json", "--query", "go", "--trace", trace.as_str()];
        let output = flowmem_async(dir.path(), &args, &env, Duration::from_secs(120)).await;
        assert!(output.status.success(), "{output:?}");
        let bytes = std::fs::metadata(dir.path().join(&trace)).unwrap().len();
        let text = std::fs::read_to_string(dir.path().join(&trace)).unwrap();
        // Every node line still says what the node read: the entries, by number.
        let last: Value = serde_json::from_str(text.lines().rev().nth(1).unwrap()).unwrap();
        assert_eq!(last["node_id"], format!("n{}", n - 1), "{last}");
        assert!(last["input"].is_array(), "{last}");
        sizes.push(bytes);
    }
    let ratio = sizes[1] as f64 / sizes[0] as f64;
    assert!(ratio < 2.5, "twice the nodes gave {ratio:.2} times the bytes ({sizes:?})");
}

// 14. A kill loses at most the work in flight; a rerun adds only what is missing.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_induction_keeps_finished_batches_and_a_rerun_adds_only_the_rest() {
    let workflow = |tool: &str| {
        json!({"workflows": [{"description": format!("Use {tool} twice"), "steps": [
            {"state": "s", "reasoning": "r", "action": {"tool": tool, "args": {"x": "{x}"}}},
            {"state": "s", "reasoning": "r", "action": {"tool": tool, "args": {"x": "{x}"}}}]}]})
    };
    let runs: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|tool| {
            json!({"id": format!("t-{tool}"), "query": format!("do {tool}"), "success": true, "steps": [
                {"action": {"kind": "tool_call", "tool": tool, "args": {"x": "1"}}},
                {"action": {"kind": "tool_call", "tool": tool, "args": {"x": "2"}}}]})
            .to_string()
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("runs.jsonl"), runs.join("\n")).unwrap();
    let config = |url: &str| format!("[models.m]\nbase_url = \"{url}\"\nmodel = \"m\"\n[llm]\ncache = \"off\"\n");
    let args = [
        "--json",
        "induce",
        "--mode",
        "lm",
        "runs.jsonl",
        "--memory",
        "memory.db",
        "--model",
        "m",
        "--batch-size",
        "1",
    ];

    // The third batch never gets an answer: the process is killed while it waits.
    let first = ScriptedLlmServer::start(Script::in_order([
        Reply::json(workflow("a")),
        Reply::json(workflow("b")),
        Reply::text("never sent").delay(Duration::from_secs(600)),
    ]))
    .await;
    std::fs::write(dir.path().join("flowmem.toml"), config(&first.base_url())).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_flowmem"))
        .current_dir(dir.path())
        .args(args)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("FLOWMEM_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), first.wait_for_chat_requests(3))
        .await
        .expect("the third batch was asked");
    child.kill().await.unwrap();

    let list =
        flowmem_async(dir.path(), &["--json", "memory", "list", "--memory", "memory.db"], &[], Duration::from_secs(30))
            .await;
    let stored: Value = serde_json::from_slice(&list.stdout).unwrap();
    let described: Vec<&str> = stored.as_array().unwrap().iter().map(|w| w["description"].as_str().unwrap()).collect();
    assert_eq!(described, ["Use a twice", "Use b twice"], "the finished batches survived the kill");

    // The rerun asks only for the batch that was in flight.
    let second = ScriptedLlmServer::start(Script::new().otherwise(Reply::json(workflow("c")))).await;
    std::fs::write(dir.path().join("flowmem.toml"), config(&second.base_url())).unwrap();
    let output = flowmem_async(dir.path(), &args, &[], Duration::from_secs(60)).await;
    assert!(output.status.success(), "{output:?}");
    assert_eq!(second.chat_requests().len(), 1, "only the missing batch is induced");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let statuses: Vec<&str> =
        report["workflows"].as_array().unwrap().iter().map(|w| w["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["stored"], "{report:#}");
    let list =
        flowmem_async(dir.path(), &["--json", "memory", "list", "--memory", "memory.db"], &[], Duration::from_secs(30))
            .await;
    let stored: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(stored.as_array().unwrap().len(), 3);
    for workflow in stored.as_array().unwrap() {
        let id = workflow["id"].as_str().unwrap();
        let args = ["--json", "memory", "show", id, "--memory", "memory.db"];
        let shown = flowmem_async(dir.path(), &args, &[], Duration::from_secs(30)).await;
        let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
        assert_eq!(shown["provenances"].as_array().map(Vec::len), Some(1), "learned once: {shown:#}");
    }
}
