//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong while reading or mining a log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MiningError {
    /// The file could not be opened or read.
    #[error("cannot read `{}`", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The XES document is not well-formed XML.
    #[error("malformed XES in `{}` at byte {position}", path.display())]
    Xml {
        /// The file.
        path: PathBuf,
        /// The byte offset in the (decompressed) document.
        position: u64,
        /// The cause.
        #[source]
        source: quick_xml::Error,
    },
    /// The document is XML but not an XES log.
    #[error("`{}` is not an XES log: {reason}", path.display())]
    NotXes {
        /// The file.
        path: PathBuf,
        /// What was missing.
        reason: String,
    },
    /// The document is XML but not a PNML net flowmem can read.
    #[error("`{}` is not a usable PNML net: {reason}", path.display())]
    Pnml {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}
