//! The memory crate's errors.

use std::path::PathBuf;

/// Everything that can go wrong opening, reading or writing a workflow memory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The database failed: the SQLite file, or the PostgreSQL server.
    #[error("memory database `{path}`: {what}")]
    Database {
        /// The database file, or the PostgreSQL URL without its password.
        path: PathBuf,
        /// What the store was doing.
        what: &'static str,
        /// The database's error.
        #[source]
        source: flowmem_db::DbError,
    },
    /// The file is a database of another application (or another kind of file), which
    /// flowmem leaves as it is.
    #[error(
        "`{path}` is not a flowmem memory: {reason}; flowmem leaves it unchanged\nhint: pass another --memory file (a new or empty file becomes a memory)"
    )]
    NotMemory {
        /// The file.
        path: PathBuf,
        /// What it holds instead.
        reason: String,
    },
    /// The file was written by a newer flowmem with a schema this build does not know.
    #[error(
        "memory database `{path}` has schema version {found}, newer than the {supported} this flowmem supports\nhint: upgrade flowmem, or use another --memory file"
    )]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// The `user_version` found in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A stored row did not decode; the file was edited by hand or is corrupt.
    #[error("memory database `{path}`: workflow `{id}` has a corrupt `{column}` column")]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// The workflow id.
        id: String,
        /// The column that failed to decode.
        column: &'static str,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// No workflow with this id is stored.
    #[error("no workflow `{id}` in memory database `{path}`\nhint: `flowmem memory list` shows the stored ids")]
    NotFound {
        /// The database file.
        path: PathBuf,
        /// The id asked for.
        id: String,
    },
    /// The embedding model failed to embed a query or workflows.
    #[error("embedding model `{model}` failed")]
    Embedding {
        /// The embedding model's name.
        model: String,
        /// The model's error.
        #[source]
        source: flowmem_llm::LlmError,
    },
    /// A search or a vector write cannot be done as asked: a vector mode without an
    /// embedding model, vectors that do not fit the workflows.
    #[error("{reason}")]
    Retrieval {
        /// What is wrong, with what to do.
        reason: String,
    },
    /// A workflow to be stored is unusable.
    #[error("workflow `{description}` cannot be stored: {reason}")]
    InvalidWorkflow {
        /// The workflow's description, to name it.
        description: String,
        /// Why it was refused.
        reason: String,
    },
}

/// Why an induction run could not proceed (as opposed to items it skipped, which are
/// reported in its result).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InduceError {
    /// The induction prompt did not render.
    #[error("the induction prompt did not render")]
    Prompt(#[source] flowmem_llm::PromptError),
    /// The inducer model failed.
    #[error("the inducer model failed")]
    Llm(#[source] flowmem_llm::LlmError),
    /// Storing the induced workflows failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// Why a memory-augmented run, an evaluation or the online loop failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OnlineError {
    /// The memory could not be read or written.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// Induction from a judged run failed.
    #[error(transparent)]
    Induce(#[from] InduceError),
    /// A prompt template did not render.
    #[error("the `{template}` prompt did not render")]
    Prompt {
        /// The template's name.
        template: &'static str,
        /// The renderer's error.
        #[source]
        source: flowmem_llm::PromptError,
    },
    /// The evaluator model could not be reached.
    #[error("the evaluator model failed")]
    Llm(#[source] flowmem_llm::LlmError),
    /// The evaluator's reply is not the structured judgement asked for.
    #[error("the evaluator `{model}` replied with no valid judgement ({problem}): {raw}")]
    Judge {
        /// The evaluator model's name.
        model: String,
        /// What is wrong with the reply.
        problem: String,
        /// The reply text.
        raw: String,
    },
    /// A file of the online run could not be read or written.
    #[error("`{path}`: {what}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// What was being done.
        what: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line of the progress file does not parse.
    #[error(
        "`{path}` line {line}: {message}\nhint: the progress file was written by another flowmem version or edited; remove it to start over"
    )]
    Progress {
        /// The progress file.
        path: std::path::PathBuf,
        /// The 1-based line number.
        line: usize,
        /// The parser's message.
        message: String,
    },
    /// The saved task stream does not parse or differs from the records given.
    #[error(
        "`{path}` line {line}: {message}\nhint: resume with the records the run started with, or use another --out directory"
    )]
    Stream {
        /// The stream file.
        path: std::path::PathBuf,
        /// The 1-based line (task) number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A stateful tool server could not give a run a fresh state.
    #[error("{0}\nhint: check that the reset tool exists and the tool server is healthy")]
    StateReset(flowmem_tools::StateResetError),
}
