//! `flowmem schema`: prints the JSON Schema of a data-model type.

use flowmem_model as model;

use crate::args::{SchemaArgs, SchemaType};
use crate::commands::ExitStatus;
use crate::printer::Printer;

/// Prints the schema of the requested type.
pub fn run(args: &SchemaArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let schema = match args.type_name {
        SchemaType::ToolCall => schemars::schema_for!(model::ToolCall),
        SchemaType::Trajectory => schemars::schema_for!(model::Trajectory),
        SchemaType::Step => schemars::schema_for!(model::Step),
        SchemaType::Record => schemars::schema_for!(model::Record),
        SchemaType::Workflow => schemars::schema_for!(model::Workflow),
        SchemaType::WorkflowGraph => schemars::schema_for!(model::WorkflowGraph),
        SchemaType::Trace => schemars::schema_for!(model::Trace),
        SchemaType::TraceEvent => schemars::schema_for!(model::TraceEvent),
    };
    printer.json_result(&schema)?;
    Ok(ExitStatus::Success)
}
