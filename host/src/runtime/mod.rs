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
}
