//! The UDF runtime: how the keyed operator calls a process function.
//!
//! [`ProcessFunction`] is the host-side face of a UDF: `init`, then one call per element
//! and one per firing timer. Every call gets the [`HostServices`] (keyed state, timers,
//! outputs, clocks), scoped by the operator to one key. [`wasm::WasmFunction`] runs a
//! sandboxed wasm component through the WIT contract in `wit/`; anything else that
//! implements the trait (a native function in a benchmark, say) runs on the same engine.

pub mod services;
pub mod wasm;

pub use services::{Emitted, HostServices, OutputId, Scope};

use crate::time::timers::TimeDomain;
use crate::time::Timestamp;
use std::fmt;

/// What a UDF learns at start-up.
#[derive(Debug, Clone, Default)]
pub struct InitInfo {
    pub config: Vec<(String, String)>,
    pub inputs: Vec<String>,
}

/// One input element, borrowed from the source's buffer.
#[derive(Debug, Clone, Copy)]
pub struct ElementRef<'a> {
    pub input: u32,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub timestamp: Timestamp,
}

/// A timer that fired.
#[derive(Debug, Clone, Copy)]
pub struct FiredTimer<'a> {
    pub domain: TimeDomain,
    pub timestamp: Timestamp,
    pub key: &'a [u8],
}

/// Why a call into a UDF failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The UDF returned an error.
    Returned(String),
    /// The UDF could not decode a state value (written by another version, as another
    /// type): the element goes to the dead-letter output and the run goes on.
    StateDecode(String),
    /// The UDF trapped: a panic, a misuse of the contract, an out-of-bounds access...
    Trapped(String),
    /// The call ran past its deadline.
    Timeout(std::time::Duration),
    /// The UDF tried to grow its memory past its limit.
    OutOfMemory { limit_bytes: usize, detail: String },
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Returned(message) => write!(f, "returned an error: {message}"),
            CallError::StateDecode(message) => write!(f, "cannot read its state: {message}"),
            CallError::Trapped(detail) => write!(f, "trapped: {detail}"),
            CallError::Timeout(limit) => {
                write!(
                    f,
                    "ran longer than its call timeout of {} ms and was stopped",
                    limit.as_millis()
                )
            }
            CallError::OutOfMemory {
                limit_bytes,
                detail,
            } => write!(
                f,
                "ran out of memory: it tried to grow past its limit of {} MiB ({detail})",
                limit_bytes >> 20
            ),
        }
    }
}

impl std::error::Error for CallError {}

/// One entry of a batch: an element, or a timer that fires.
#[derive(Debug, Clone, Copy)]
pub enum BatchEntry<'a> {
    Element {
        element: ElementRef<'a>,
        key: crate::state::KeyId,
        /// The watermark while the element is processed.
        watermark: Timestamp,
        /// The watermark once it has been processed.
        watermark_after: Timestamp,
    },
    Timer {
        domain: TimeDomain,
        timestamp: Timestamp,
        key: crate::state::KeyId,
        watermark: Timestamp,
    },
}

/// How much of a batch a function took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchTaken {
    /// Entries processed, from the start.
    pub consumed: usize,
    /// Consumed timer entries that did not fire because the UDF deleted them first.
    pub skipped: usize,
}

/// A keyed process function, as the operator sees it.
pub trait ProcessFunction: Send {
    /// The UDF's name, for messages.
    fn name(&self) -> &str;

    /// Parses config and declares states and outputs. Called once before anything else;
    /// an implementation may call the UDF's own `init` again when it recreates an instance.
    fn init(&mut self, host: &mut HostServices, info: &InitInfo) -> Result<(), CallError>;

    /// Handles one element; `host` is scoped to the element's key.
    fn process_element(
        &mut self,
        host: &mut HostServices,
        element: ElementRef<'_>,
    ) -> Result<(), CallError>;

    /// Handles one firing timer; `host` is scoped to the timer's key.
    fn on_timer(&mut self, host: &mut HostServices, timer: FiredTimer<'_>)
        -> Result<(), CallError>;

    /// Whether [`process_batch`](Self::process_batch) is available.
    fn takes_batches(&self) -> bool {
        false
    }

    /// Processes a prefix of `entries` in one call, with the same meaning as calling
    /// `process_element` and `on_timer` for each; says how many entries it took.
    /// Timer entries are still pending in `host`; the consumed ones are removed before
    /// the effects are applied. Effects reach `host` only if the call succeeds (the
    /// operator then replays the entries one call at a time, which reports a failure
    /// exactly).
    fn process_batch(
        &mut self,
        host: &mut HostServices,
        entries: &[BatchEntry<'_>],
    ) -> Result<BatchTaken, CallError> {
        let _ = (host, entries);
        Err(CallError::Trapped(
            "this function does not take batches".into(),
        ))
    }
}
