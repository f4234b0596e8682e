//! Pipeline files: what to read, which UDF runs, where outputs go.
//!
//! A pipeline is a TOML file (documented in `docs/pipeline.md`). [`PipelineFile`] is its
//! literal shape, checked by serde so that a misspelt field is an error naming it;
//! [`PipelineSpec::load`] resolves paths relative to the file, parses durations and
//! sizes, and applies the command line's [`Overrides`].

#![warn(missing_docs)]

mod file;
mod graph;
mod load;
pub mod name;
mod resolve;
mod spec;

pub use file::*;
pub use graph::{Stage, StageGraph};
pub use resolve::parse_size;
pub use spec::*;
pub use weir_io::sink::SinkTarget;
pub use weir_io::source::SourceLocation;

#[cfg(test)]
mod tests;
