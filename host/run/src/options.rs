//! What a run is given besides its pipeline ([`RunOptions`]), and how it fails
//! ([`RunFailure`]).

use crate::control::RunControl;
use crate::report::RunReport;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A failed run: what went wrong, and the figures up to then.
#[derive(Debug)]
pub struct RunFailure {
    /// What went wrong, naming the record, timer or connector where it happened.
    pub error: anyhow::Error,
    /// The figures up to the failure (none if the run failed to start).
    pub report: Option<Box<RunReport>>,
    /// The failure is a mistake on the command line found only once the UDF said what
    /// it declares (a [`CommandLineMistake`]); `weir run` exits 2 for it, as for any
    /// bad command line.
    pub command_line: bool,
}

/// A mistake on the command line that only the UDF's `init` reveals: `--output NAME=...`
/// for an output the UDF does not declare, or a `--config KEY=VALUE` the UDF refuses.
#[derive(Debug)]
pub struct CommandLineMistake(pub String);

impl std::fmt::Display for CommandLineMistake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandLineMistake {}

impl std::fmt::Display for RunFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

/// Options of a run that are not part of the pipeline.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Show a progress line on stderr (only when stderr is a terminal).
    pub progress: bool,
    /// Set (by a signal handler, say) to stop the run: reading stops at the next record
    /// boundary, what was read is processed, a checkpoint is taken, and the run ends
    /// successfully.
    pub stop: Option<Arc<AtomicBool>>,
    /// Deletes the checkpoints in the state directory before starting.
    pub fresh: bool,
    /// Lets `weir serve` / `weir dev` swap the UDF and read the status while it runs.
    pub control: Option<Arc<RunControl>>,
}
