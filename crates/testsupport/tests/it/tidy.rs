//! The repository's tidy checks: ARCHITECTURE.md's invariants, enforced over the
//! workspace sources.
//!
//! Each rule is a function from one file's path and text to its violations, so the
//! rules are tested on in-memory sources below and then run over every file under
//! `crates/`. A failure names the file and line and says which invariant it breaks.
//!
//! The rules read Rust through a small lexer ([`lex`]) that separates code from
//! comments and string literals, so a word in a comment or a doc never counts as code,
//! and a word in code is never hidden by a string that happens to contain it.

use std::fmt;
use std::path::{Path, PathBuf};

/// One broken rule at one place.
#[derive(Debug, PartialEq)]
struct Violation {
    path: String,
    line: usize,
    message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path, self.line, self.message)
    }
}

fn violation(path: &str, line: usize, message: impl Into<String>) -> Violation {
    Violation { path: path.to_owned(), line, message: message.into() }
}

/// A string literal: where it starts (byte offset and line), its source text (quotes
/// and prefix included), and its length in characters between the quotes.
#[derive(Debug)]
struct Literal {
    offset: usize,
    line: usize,
    source: String,
    chars: usize,
}

impl Literal {
    /// Whether the literal holds more than one line of text, as written or as
    /// `\n` escapes.
    fn is_multiline(&self) -> bool {
        self.source.contains('\n') || self.source.contains("\\n")
    }
}

/// A Rust file split into code and string literals.
struct Lexed {
    /// The code with every comment and every string or char literal replaced by
    /// spaces; newlines are kept, so byte offsets map to the original lines.
    code: String,
    /// Every string literal (plain, raw, byte or C) in source order.
    literals: Vec<Literal>,
}

impl Lexed {
    /// The 1-based line of byte offset `at` of [`Lexed::code`].
    fn line_of(&self, at: usize) -> usize {
        self.code[..at].bytes().filter(|&b| b == b'\n').count() + 1
    }

    /// Every byte offset where `word` appears in code as a whole identifier.
    fn word(&self, word: &str) -> Vec<usize> {
        let bytes = self.code.as_bytes();
        let mut found = Vec::new();
        let mut from = 0;
        while let Some(pos) = self.code[from..].find(word) {
            let at = from + pos;
            let end = at + word.len();
            let before = at.checked_sub(1).map(|i| bytes[i]);
            let after = bytes.get(end).copied();
            if !before.is_some_and(is_ident_byte) && !after.is_some_and(is_ident_byte) {
                found.push(at);
            }
            from = end;
        }
        found
    }

    /// The byte ranges of the items under `#[cfg(test)]` (unit tests are test code).
    fn test_items(&self) -> Vec<std::ops::Range<usize>> {
        let mut ranges = Vec::new();
        let mut from = 0;
        while let Some(pos) = self.code[from..].find("#[cfg(test)]") {
            let start = from + pos;
            let Some(open) = self.code[start..].find('{').map(|p| start + p) else { break };
            let mut depth = 0;
            let mut end = self.code.len();
            for (k, b) in self.code.bytes().enumerate().skip(open) {
                match b {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            ranges.push(start..end);
            from = end;
        }
        ranges
    }
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Splits Rust source into code, comments and literals. It understands line and
/// (nested) block comments, plain, byte and C strings with escapes, raw strings with
/// any number of `#`, and tells char literals from lifetimes.
fn lex(text: &str) -> Lexed {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let byte = |i: usize| chars.get(i).map_or(text.len(), |&(b, _)| b);
    let after_ident = |i: usize| i > 0 && is_ident_char(chars[i - 1].1);
    let mut code = String::with_capacity(text.len());
    let mut literals = Vec::new();
    // Appends `chars[from..to]` to the code as blanks, keeping newlines.
    let blank = |code: &mut String, from: usize, to: usize| {
        for &(_, c) in &chars[from..to] {
            if c == '\n' {
                code.push('\n');
            } else {
                code.extend(std::iter::repeat_n(' ', c.len_utf8()));
            }
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i].1;
        let start = i;
        if c == '/' && at(i + 1) == Some('/') {
            while i < chars.len() && chars[i].1 != '\n' {
                i += 1;
            }
            blank(&mut code, start, i);
            continue;
        }
        if c == '/' && at(i + 1) == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i].1 == '/' && at(i + 1) == Some('*') {
                    depth += 1;
                    i += 2;
                } else if chars[i].1 == '*' && at(i + 1) == Some('/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            let i_end = i.min(chars.len());
            blank(&mut code, start, i_end);
            i = i_end;
            continue;
        }
        // A string literal: an optional `b` or `c` prefix, an optional raw `r#*`, a quote.
        let fresh = !after_ident(i);
        let mut j = if fresh && matches!(c, 'b' | 'c') { i + 1 } else { i };
        let mut hashes = None;
        if fresh && at(j) == Some('r') {
            let mut k = j + 1;
            while at(k) == Some('#') {
                k += 1;
            }
            if at(k) == Some('"') {
                hashes = Some(k - j - 1);
                j = k;
            }
        }
        if at(j) == Some('"') && (fresh || j == i) {
            j += 1;
            let mut content = 0;
            let end = loop {
                match (at(j), hashes) {
                    (None, _) => break chars.len(),
                    (Some('\\'), None) => {
                        j += 2;
                        content += 2;
                    }
                    (Some('"'), None) => break j + 1,
                    (Some('"'), Some(n)) if (1..=n).all(|h| at(j + h) == Some('#')) => break j + 1 + n,
                    (Some(_), _) => {
                        j += 1;
                        content += 1;
                    }
                }
            };
            let end = end.min(chars.len());
            let line = text[..byte(start)].matches('\n').count() + 1;
            literals.push(Literal {
                offset: byte(start),
                line,
                source: text[byte(start)..byte(end)].to_owned(),
                chars: content,
            });
            blank(&mut code, start, end);
            i = end;
            continue;
        }
        if c == '\'' {
            // `'\…'` and `'x'` are char literals; `'a` is a lifetime or a label.
            let close = if at(i + 1) == Some('\\') {
                (i + 3..chars.len()).find(|&k| chars[k].1 == '\'')
            } else if at(i + 2) == Some('\'') {
                Some(i + 2)
            } else {
                None
            };
            if let Some(close) = close {
                blank(&mut code, i, close + 1);
                i = close + 1;
                continue;
            }
        }
        code.push(c);
        i += 1;
    }
    Lexed { code, literals }
}

/// Where a file sits in the workspace, from its path relative to the repository root.
struct Place<'a> {
    /// The directory name under `crates/`.
    krate: &'a str,
    /// Library or binary code (`crates/<crate>/src/`), as opposed to tests and benches.
    in_src: bool,
}

fn place(path: &str) -> Option<Place<'_>> {
    let rest = path.strip_prefix("crates/")?;
    let (krate, inner) = rest.split_once('/')?;
    Some(Place { krate, in_src: inner.starts_with("src/") })
}

/// The files allowed `unsafe` code: the SIMD kernels of the embedded model, and the
/// server's scheduler calls, which neither std nor nix wraps (`sched_getattr`, `sched_setattr`).
const UNSAFE_HOMES: [&str; 2] = ["crates/llm-local/src/kernels.rs", "crates/server/src/sched.rs"];

/// `unsafe` appears in code only in [`UNSAFE_HOMES`] (tests and benches included).
fn check_unsafe(path: &str, lexed: &Lexed) -> Vec<Violation> {
    if UNSAFE_HOMES.contains(&path) {
        return Vec::new();
    }
    lexed
        .word("unsafe")
        .into_iter()
        .map(|at| violation(path, lexed.line_of(at), format!("`unsafe` outside {}", UNSAFE_HOMES.join(" and "))))
        .collect()
}

/// Library and binary code starts processes only in `crates/tools`. Tests, benches and
/// the dev-only `testsupport` may start the binary, browsers and servers.
fn check_processes(path: &str, lexed: &Lexed) -> Vec<Violation> {
    let Some(place) = place(path) else { return Vec::new() };
    if !place.in_src || matches!(place.krate, "tools" | "testsupport") {
        return Vec::new();
    }
    let mut found = Vec::new();
    // `std::process::Command`, `tokio::process::Command`, and any `use …::process::{…}`
    // or glob that brings `Command` (or everything) in; rmcp's child-process transport.
    for at in lexed.word("process") {
        let after = lexed.code[at + "process".len()..].trim_start();
        let Some(after) = after.strip_prefix("::") else { continue };
        let after = after.trim_start();
        let names_command = if let Some(group) = after.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            group.split(',').any(|name| matches!(name.split_whitespace().next(), Some("Command" | "*")))
        } else {
            after.starts_with("Command") && !after[7..].starts_with(is_ident_char) || after.starts_with('*')
        };
        if names_command {
            found.push(violation(path, lexed.line_of(at), "a process is started outside crates/tools"));
        }
    }
    for at in lexed.word("TokioChildProcess") {
        found.push(violation(path, lexed.line_of(at), "a tool process is started outside crates/tools"));
    }
    found
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The crates whose library code may send model requests (and the dev-only
/// `testsupport`, whose scripted server answers them).
const MODEL_CLIENTS: [&str; 3] = ["llm", "llm-local", "testsupport"];

/// Model requests are sent only by `llm` and `llm-local`: no other library or binary
/// code names `reqwest` or an OpenAI endpoint path. (Other crates reach HTTP only
/// through a dependency's own client for a non-model protocol: tools' streamable HTTP
/// MCP transport inside `rmcp`, exec's OTLP exporter inside `opentelemetry-otlp`.)
fn check_model_requests(path: &str, lexed: &Lexed) -> Vec<Violation> {
    let Some(place) = place(path) else { return Vec::new() };
    if !place.in_src || MODEL_CLIENTS.contains(&place.krate) {
        return Vec::new();
    }
    let mut found: Vec<Violation> = lexed
        .word("reqwest")
        .into_iter()
        .map(|at| violation(path, lexed.line_of(at), "an HTTP client outside crates/llm and crates/llm-local"))
        .collect();
    for literal in &lexed.literals {
        if ["chat/completions", "/v1/models", "/v1/completions", "/embeddings"]
            .iter()
            .any(|p| literal.source.contains(p))
        {
            found.push(violation(path, literal.line, "a model endpoint outside crates/llm and crates/llm-local"));
        }
    }
    found
}

/// `reqwest` is a normal (not dev-) dependency only of the model clients.
fn check_manifest(path: &str, text: &str) -> Vec<Violation> {
    let Some(place) = place(path) else { return Vec::new() };
    if MODEL_CLIENTS.contains(&place.krate) {
        return Vec::new();
    }
    let mut section = "";
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line;
            continue;
        }
        let normal = section == "[dependencies]"
            || section.starts_with("[target.") && section.ends_with(".dependencies]")
            || section == "[dependencies.reqwest]";
        let key = line.split(['=', ' ', '.']).next().unwrap_or("");
        if normal && (key == "reqwest" || section == "[dependencies.reqwest]" && !line.is_empty()) {
            found.push(violation(path, n + 1, "reqwest is a dependency outside crates/llm and crates/llm-local"));
        }
    }
    found
}

/// A string literal in library code at least this long (in characters), spanning
/// lines, is instruction text and belongs in a template file.
const PROMPT_CHARS: usize = 200;

/// What a long literal that is not a prompt starts with: SQL statements (the memory
/// store's schema and queries, the LLM cache's table) and HTML pages (the reports).
/// Prompts are prose; these are code in another language.
const NOT_PROSE: [&str; 10] =
    ["CREATE ", "ALTER ", "INSERT ", "SELECT ", "UPDATE ", "DELETE ", "PRAGMA ", "WITH ", "<!doctype", "<html"];

/// The calls whose message a literal is: errors and hints printed to the user, never
/// sent to a model.
const MESSAGE_CALLS: [&str; 4] = ["bail!(", "anyhow!(", "panic!(", "#[error("];

/// Prompts live in template files (`crates/<crate>/prompts/*.j2`): library and binary
/// code holds no multi-line string literal of [`PROMPT_CHARS`] characters or more,
/// outside `#[cfg(test)]` items, unless it is SQL or HTML ([`NOT_PROSE`]) or a
/// user-facing message ([`MESSAGE_CALLS`]).
fn check_prompts(path: &str, lexed: &Lexed) -> Vec<Violation> {
    let Some(place) = place(path) else { return Vec::new() };
    if !place.in_src || place.krate == "testsupport" {
        return Vec::new();
    }
    let tests = lexed.test_items();
    let not_prose = |literal: &Literal| {
        let body = literal.source.trim_start_matches(['b', 'c', 'r', '#']).trim_start_matches('"').trim_start();
        NOT_PROSE.iter().any(|start| body.get(..start.len()).is_some_and(|head| head.eq_ignore_ascii_case(start)))
    };
    let message = |literal: &Literal| {
        let before = lexed.code[..literal.offset].trim_end();
        MESSAGE_CALLS.iter().any(|call| before.ends_with(call))
    };
    lexed
        .literals
        .iter()
        .filter(|literal| literal.chars >= PROMPT_CHARS && literal.is_multiline())
        .filter(|literal| !tests.iter().any(|range| range.contains(&literal.offset)))
        .filter(|literal| !not_prose(literal) && !message(literal))
        .map(|literal| {
            violation(
                path,
                literal.line,
                format!(
                    "a {}-character multi-line string literal: prompts go in crates/{}/prompts/*.j2",
                    literal.chars, place.krate
                ),
            )
        })
        .collect()
}

/// Every Rust file starts with a `//!` doc comment.
fn check_file_doc(path: &str, text: &str) -> Vec<Violation> {
    match text.lines().enumerate().find(|(_, line)| !line.trim().is_empty()) {
        Some((_, line)) if line.starts_with("//!") => Vec::new(),
        Some((n, _)) => vec![violation(path, n + 1, "the file does not start with a `//!` doc comment")],
        None => vec![violation(path, 1, "the file is empty; it should at least say what it is for in `//!`")],
    }
}

/// Every crate has its line in `crates/README.md` (`` - `dir` (`package`) ``) and its
/// section in `ARCHITECTURE.md` (`` ### `crates/dir` (package) ``).
fn check_crate_listed(dir: &str, package: &str, readme: &str, architecture: &str) -> Vec<Violation> {
    let mut found = Vec::new();
    let line = format!("- `{dir}` (`{package}`)");
    if !readme.lines().any(|l| l.starts_with(&line)) {
        found.push(violation("crates/README.md", 1, format!("no line `{line}: …` for crates/{dir}")));
    }
    let heading = format!("### `crates/{dir}` ({package})");
    if !architecture.lines().any(|l| l.trim_end() == heading) {
        found.push(violation("ARCHITECTURE.md", 1, format!("no section `{heading}` for crates/{dir}")));
    }
    found
}

/// The `name` of a manifest's `[package]`.
fn package_name(manifest: &str) -> Option<&str> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(value) = line.strip_prefix("name") {
            return value.trim_start().strip_prefix('=')?.trim().strip_prefix('"')?.strip_suffix('"');
        }
    }
    None
}

/// Every file under `dir` whose name ends with one of `endings`, skipping build
/// output and hidden directories, as paths relative to `root` with `/` separators.
fn files(root: &Path, dir: &Path, endings: &[&str], out: &mut Vec<(String, PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                files(root, &path, endings, out);
            }
        } else if endings.iter().any(|ending| name.ends_with(ending)) {
            let relative = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            out.push((relative, path));
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()))
}

/// Runs every rule over the workspace and fails listing each violation.
#[test]
fn the_workspace_keeps_the_architecture_invariants() {
    let root = flowmem_testsupport::repo_root();
    let mut sources = Vec::new();
    files(&root, &root.join("crates"), &[".rs", "Cargo.toml"], &mut sources);
    let mut found = Vec::new();
    let mut n_rust = 0;
    for (path, file) in &sources {
        let text = read(file);
        if path.ends_with("Cargo.toml") {
            found.extend(check_manifest(path, &text));
            continue;
        }
        n_rust += 1;
        let lexed = lex(&text);
        found.extend(check_file_doc(path, &text));
        found.extend(check_unsafe(path, &lexed));
        found.extend(check_processes(path, &lexed));
        found.extend(check_model_requests(path, &lexed));
        found.extend(check_prompts(path, &lexed));
    }
    // The walk found the workspace, and the `unsafe` homes still exist (else the rule
    // would guard files that are gone).
    assert!(n_rust > 100, "only {n_rust} Rust files under {}", root.display());
    for home in UNSAFE_HOMES {
        assert!(sources.iter().any(|(path, _)| path == home), "{home} is gone; update the tidy rule");
    }

    let readme = read(&root.join("crates/README.md"));
    let architecture = read(&root.join("ARCHITECTURE.md"));
    for (path, file) in &sources {
        let Some(dir) = path.strip_prefix("crates/").and_then(|rest| rest.strip_suffix("/Cargo.toml")) else {
            continue;
        };
        if dir.contains('/') {
            continue;
        }
        let manifest = read(file);
        let package = package_name(&manifest).unwrap_or_else(|| panic!("{path} has no [package] name"));
        found.extend(check_crate_listed(dir, package, &readme, &architecture));
    }
    found.extend(check_one_sqlite(&read(&root.join("Cargo.lock"))));
    let report: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(report.is_empty(), "{} tidy violations (see ARCHITECTURE.md):\n{}", report.len(), report.join("\n"));
}

/// flowmem-db's invariant: one SQLite in the build (rusqlite's); a PostgreSQL client that
/// brings its own (sqlx with SQLite) would clash with it.
fn check_one_sqlite(lock: &str) -> Vec<Violation> {
    let n = lock.lines().filter(|line| *line == "name = \"libsqlite3-sys\"").count();
    if n == 1 {
        return Vec::new();
    }
    vec![violation("Cargo.lock", 1, format!("{n} `libsqlite3-sys` packages, not one: a crate brings its own SQLite"))]
}

#[cfg(test)]
mod rules {
    use super::*;

    fn lines(found: &[Violation]) -> Vec<usize> {
        found.iter().map(|v| v.line).collect()
    }

    #[test]
    fn the_lexer_hides_comments_and_literals_but_keeps_lines() {
        let text = "let a = \"unsafe\"; // unsafe\n/* unsafe /* nested */ unsafe */ let b = r#\"a \"quoted\" unsafe\"#;\nfn f<'a>(x: &'a str) -> char { '\\'' }\nunsafe {}\n";
        let lexed = lex(text);
        assert_eq!(lexed.code.len(), text.len());
        assert_eq!(lexed.word("unsafe").len(), 1, "{}", lexed.code);
        assert_eq!(lexed.line_of(lexed.word("unsafe")[0]), 4);
        let sources: Vec<&str> = lexed.literals.iter().map(|l| l.source.as_str()).collect();
        assert_eq!(sources, ["\"unsafe\"", "r#\"a \"quoted\" unsafe\"#"]);
        assert_eq!(lexed.literals[1].line, 2);
        assert!(lexed.code.contains("fn f<'a>(x: &'a str)"), "lifetimes stay code: {}", lexed.code);
    }

    #[test]
    fn the_lexer_reads_byte_and_escaped_strings_and_tracks_lines_across_them() {
        let text = "let a = b\"x\\\"y\";\nlet b = \"two\nlines\";\nlet c = br##\"#\"#\"##; let d = 1;\n";
        let lexed = lex(text);
        let sources: Vec<&str> = lexed.literals.iter().map(|l| l.source.as_str()).collect();
        assert_eq!(sources, ["b\"x\\\"y\"", "\"two\nlines\"", "br##\"#\"#\"##"]);
        assert_eq!(lexed.literals.iter().map(|l| l.line).collect::<Vec<_>>(), [1, 2, 4]);
        assert_eq!(lexed.line_of(lexed.code.find("let d").unwrap()), 4);
        // An identifier ending in `r` or `b` before a string is not a prefix.
        let lexed = lex("f(bar\"x\")");
        assert_eq!(lexed.literals[0].source, "\"x\"");
    }

    #[test]
    fn unsafe_is_allowed_only_in_its_homes() {
        let text = "//! x\nfn f() {}\nunsafe fn g() {}\n// unsafe in a comment\n#![deny(unsafe_code)]\n";
        let found = check_unsafe("crates/exec/src/run.rs", &lex(text));
        assert_eq!(lines(&found), [3]);
        assert_eq!(
            found[0].to_string(),
            "crates/exec/src/run.rs:3: `unsafe` outside crates/llm-local/src/kernels.rs and crates/server/src/sched.rs"
        );
        assert!(check_unsafe("crates/exec/tests/it/x.rs", &lex(text)).len() == 1, "tests are not exempt");
        assert!(check_unsafe("crates/cli/src/main.rs", &lex(text)).len() == 1, "a file elsewhere is not");
        for home in UNSAFE_HOMES {
            assert!(check_unsafe(home, &lex(text)).is_empty(), "{home}");
        }
    }

    #[test]
    fn only_tools_starts_processes_in_library_code() {
        let text = "//! x\nuse std::process::ExitCode;\nuse std::process::{Stdio, Command};\nfn f() { tokio::process::Command::new(\"sh\"); }\nuse std::process::*;\nlet t = TokioChildProcess::new(cmd);\n// std::process::Command in a comment\n";
        let found = check_processes("crates/eval/src/lib.rs", &lex(text));
        assert_eq!(lines(&found), [3, 4, 5, 6], "{found:?}");
        assert_eq!(lines(&check_processes("crates/cli/src/main.rs", &lex(text))), [3, 4, 5, 6], "the binary too");
        assert!(check_processes("crates/tools/src/server.rs", &lex(text)).is_empty());
        assert!(check_processes("crates/cli/tests/it/support.rs", &lex(text)).is_empty());
        assert!(check_processes("crates/tools/benches/b.rs", &lex(text)).is_empty());
        assert!(check_processes("crates/testsupport/src/lib.rs", &lex(text)).is_empty());
        // A type that merely ends in `Command` is no process.
        assert!(check_processes("crates/cli/src/args.rs", &lex("use std::process::CommandExt2;\n")).is_empty());
    }

    #[test]
    fn only_the_model_crates_send_model_requests() {
        let text = "//! x\nuse reqwest::Client;\nlet url = format!(\"{base}/v1/chat/completions\");\n// reqwest in a comment\n";
        let found = check_model_requests("crates/eval/src/judge.rs", &lex(text));
        assert_eq!(lines(&found), [2, 3], "{found:?}");
        assert!(check_model_requests("crates/llm/src/openai.rs", &lex(text)).is_empty());
        assert!(check_model_requests("crates/llm-local/src/serve.rs", &lex(text)).is_empty());
        assert!(check_model_requests("crates/eval/tests/it/judge.rs", &lex(text)).is_empty());

        let manifest = "[package]\nname = \"x\"\n\n[dependencies]\nreqwest.workspace = true\n\n[dev-dependencies]\nreqwest.workspace = true\n\n[dependencies.reqwest]\nworkspace = true\n";
        let found = check_manifest("crates/eval/Cargo.toml", manifest);
        assert_eq!(lines(&found), [5, 11], "{found:?}");
        assert!(check_manifest("crates/llm/Cargo.toml", manifest).is_empty());
        assert!(check_manifest("crates/eval/Cargo.toml", "[dependencies]\nreqwest-middleware = \"1\"\n").is_empty());
    }

    #[test]
    fn long_multiline_literals_in_library_code_are_prompts() {
        let prompt = format!("You are a helpful agent.\n{}", "Follow the plan. ".repeat(12));
        let text = format!(
            "//! x\nconst SHORT: &str = \"a\\nb\";\nconst ONE_LINE: &str = \"{long}\";\nconst PROMPT: &str = \"{prompt}\";\nconst ESCAPED: &str = \"{escaped}\";\nconst SQL: &str = \"\n  CREATE TABLE t (\n{long});\";\nfn f() {{ bail!(\"{escaped}\") }}\n#[cfg(test)]\nmod tests {{\n    const FIXTURE: &str = \"{escaped}\";\n}}\nconst AFTER: &str = r#\"{prompt}\"#;\n",
            long = "x".repeat(300),
            escaped = "Do this.\\n".repeat(30)
        );
        let found = check_prompts("crates/memory/src/induce/lm.rs", &lex(&text));
        assert_eq!(lines(&found), [4, 6, 15], "{found:?}");
        assert!(found[0].message.contains("crates/memory/prompts/*.j2"), "{}", found[0]);
        assert!(check_prompts("crates/memory/tests/it/induce.rs", &lex(&text)).is_empty());
    }

    #[test]
    fn every_file_starts_with_a_module_doc() {
        assert!(check_file_doc("a.rs", "\n//! Does a.\nfn a() {}\n").is_empty());
        assert_eq!(lines(&check_file_doc("a.rs", "\n/// Not a module doc.\nfn a() {}\n")), [2]);
        assert_eq!(lines(&check_file_doc("a.rs", "use x;\n//! late\n")), [1]);
        assert_eq!(lines(&check_file_doc("a.rs", "\n\n")), [1]);
    }

    #[test]
    fn every_crate_is_listed_in_both_documents() {
        let readme = "# crates\n\n- `exec` (`flowmem-exec`): runs graphs.\n";
        let architecture = "## Code map\n\n### `crates/exec` (flowmem-exec)\n\nRuns.\n";
        assert!(check_crate_listed("exec", "flowmem-exec", readme, architecture).is_empty());
        let found = check_crate_listed("server", "flowmem-server", readme, architecture);
        let paths: Vec<&str> = found.iter().map(|v| v.path.as_str()).collect();
        assert_eq!(paths, ["crates/README.md", "ARCHITECTURE.md"]);
        assert_eq!(
            package_name("[package]\nname = \"flowmem-exec\"\n[dependencies]\nname = 1\n"),
            Some("flowmem-exec")
        );
    }
}
