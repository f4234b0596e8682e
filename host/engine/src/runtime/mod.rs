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

use std::fmt;
use weir_core::time::timers::TimeDomain;
use weir_core::time::Timestamp;

/// What a UDF learns at start-up.
#[derive(Debug, Clone, Default)]
pub struct InitInfo {
    /// Key/value configuration from the pipeline file (`[udf.config]`), with the
    /// command line's `--config KEY=VALUE` overrides applied. Values are text.
    pub config: Vec<(String, String)>,
    /// The names of the inputs connected to the function, in pipeline-file order:
    /// [`ElementRef::input`] indexes this.
    pub inputs: Vec<String>,
}

/// One input element, borrowed from the source's buffer.
#[derive(Debug, Clone, Copy)]
pub struct ElementRef<'a> {
    /// Which input the element came from: an index into [`InitInfo::inputs`].
    pub input: u32,
    /// The key the host extracted from the record (UTF-8 text for JSON string and
    /// number keys).
    pub key: &'a [u8],
    /// The key group of `key` ([`key_group`](weir_core::key::key_group)), computed
    /// once when the record was decoded, so that no shard of a stage hashes the key
    /// again to see whether it owns it.
    pub group: u16,
    /// The record itself: one line's bytes (a JSON document) or a Kafka message's
    /// payload.
    pub value: &'a [u8],
    /// The record's event time.
    pub timestamp: Timestamp,
}

/// A timer that fired.
#[derive(Debug, Clone, Copy)]
pub struct FiredTimer<'a> {
    /// The clock the timer followed.
    pub domain: TimeDomain,
    /// The time the timer was registered for (not the time it actually fired).
    pub timestamp: Timestamp,
    /// The bytes of the key the timer was registered for; the call is scoped to it.
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
    OutOfMemory {
        /// The instance's memory limit ([`Limits::memory_bytes`](wasm::Limits::memory_bytes)).
        limit_bytes: usize,
        /// The runtime's own description of the failed growth.
        detail: String,
    },
    /// The UDF rejected its element or timer (the `dead-letters.reject` import): the
    /// call's effects are taken back and the element goes to the dead letters with the
    /// reason, whatever the pipeline's `on_error` policy.
    Rejected(String),
    /// The call (or a batch of one entry) emitted more than `[udf] max_emit_bytes`.
    EmitLimit {
        /// The limit ([`Emitted::limit`](services::Emitted::limit)).
        limit_bytes: usize,
    },
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Returned(message) => write!(f, "returned an error: {message}"),
            CallError::StateDecode(message) => write!(f, "cannot read its state: {message}"),
            CallError::Rejected(reason) => write!(f, "rejected it: {reason}"),
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
            CallError::EmitLimit { limit_bytes } => write!(
                f,
                "emitted more than {} in one call, the pipeline's max_emit_bytes",
                human_bytes(*limit_bytes)
            ),
        }
    }
}

impl std::error::Error for CallError {}

/// One entry of a batch: an element, or a timer that fires.
#[derive(Debug, Clone, Copy)]
pub enum BatchEntry<'a> {
    /// An element, as [`ProcessFunction::process_element`] would get it.
    Element {
        /// The element itself.
        element: ElementRef<'a>,
        /// The id of the element's key in the host's key table (interned when the batch
        /// was built).
        key: weir_core::state::KeyId,
        /// The watermark while the element is processed.
        watermark: Timestamp,
        /// The watermark once it has been processed.
        watermark_after: Timestamp,
    },
    /// A timer that falls due, as [`ProcessFunction::on_timer`] would get it. The
    /// operator puts only event-time timers in a batch; processing-time timers are
    /// fired one call at a time.
    Timer {
        /// The clock the timer follows.
        domain: TimeDomain,
        /// The time the timer was registered for.
        timestamp: Timestamp,
        /// The id of the timer's key in the host's key table.
        key: weir_core::state::KeyId,
        /// The watermark whose advance made the timer due: the watermark while it
        /// fires.
        watermark: Timestamp,
    },
}

impl BatchEntry<'_> {
    /// The id of the key the entry is about.
    pub fn key(&self) -> weir_core::state::KeyId {
        match *self {
            BatchEntry::Element { key, .. } | BatchEntry::Timer { key, .. } => key,
        }
    }
}

/// How much of a batch a function took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchTaken {
    /// Entries processed, from the start.
    pub consumed: usize,
    /// Consumed timer entries that did not fire because the UDF deleted them first.
    pub skipped: usize,
}

/// A keyed process function, as the operator sees it: Flink's `KeyedProcessFunction`.
///
/// One instance serves one operator, driven by the run's one thread: the engine never
/// makes two calls at once. Every call gets the [`HostServices`]; before each element or
/// timer call the operator scopes them to that entry's key, so state reads and writes,
/// timer registrations and emitted records all belong to that key. The operator may
/// replace an instance at any time between calls (a new version, a recreated sandbox):
/// all state lives in the host, never in the function.
pub trait ProcessFunction: Send {
    /// The UDF's name, for messages. Called at any time; must be cheap.
    fn name(&self) -> &str;

    /// Parses config and declares states and outputs. Called once, before any other
    /// call, with `host` not scoped to a key (and again on a new version swapped into a
    /// running operator, against the live host, whose states are matched by name); an
    /// implementation may call the UDF's own `init` again when it recreates an instance.
    fn init(&mut self, host: &mut HostServices, info: &InitInfo) -> Result<(), CallError>;

    /// Handles one element. Called for every decoded record of every input in merge
    /// order (smallest next timestamp first, ties in pipeline-file order); `host` is
    /// scoped to the element's key, and its watermark is the pipeline's before this
    /// element: the element's timestamp moves the watermark only after the call returns
    /// (then the timers that fell due fire). A late element (at or below the watermark)
    /// is still passed, and counted as late; the function decides what to do with it.
    fn process_element(
        &mut self,
        host: &mut HostServices,
        element: ElementRef<'_>,
    ) -> Result<(), CallError>;

    /// Handles one firing timer. Called for an event-time timer when the watermark
    /// reaches its timestamp, for a processing-time timer when the wall clock does, in
    /// timestamp order and, among timers due at the same time, in the fixed order of
    /// their keys ([`weir_core::key::tie_order`]); `host` is scoped to the timer's key.
    /// The timer is no longer pending when this is called.
    fn on_timer(&mut self, host: &mut HostServices, timer: FiredTimer<'_>)
        -> Result<(), CallError>;

    /// A new instance of the same function, not initialised yet, for another shard of a
    /// pipeline whose parallelism is above 1 (each shard calls its own instance from its
    /// own thread). Called when such a run opens, and when a new version is swapped into
    /// it, once per shard after the first; `None` (the default) means the function
    /// cannot be instantiated again, and such a run fails to start, saying so.
    fn another_instance(&self) -> Option<Box<dyn ProcessFunction>> {
        None
    }

    /// Whether [`process_batch`](Self::process_batch) is available. Asked before each
    /// run of elements; a function that says `false` gets one call per entry.
    fn takes_batches(&self) -> bool {
        false
    }

    /// Processes a prefix of `entries` in one call, with the same meaning as calling
    /// `process_element` and `on_timer` for each; says how many entries it took.
    /// Called by the operator instead of the one-entry calls when the function takes
    /// batches, with up to `[udf] max_batch` entries: the elements of a run of records
    /// and the timers due between them, in the order the one-entry calls would have
    /// had. Timer entries are still pending in `host`; the consumed ones are removed before
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

/// `64 MiB`, `512 KiB` or `100 bytes`: a size as people write it.
fn human_bytes(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}
