//! The one seam between the typed API and whatever executes host calls.
//!
//! [`Backend`] mirrors the WIT imports as untyped byte-level calls. The public types
//! (`ValueState`, `Output`, `Context`, ...) only ever call the backend in use,
//! [`Active`](crate::backend::Active), chosen at compile time.
//!
//! Another backend (for example a guest-side overlay that batches state writes and
//! flushes them in [`Backend::call_finished`]) implements the same trait and replaces
//! the `Active` alias; nothing public changes.

use crate::time::TimeDomain;
use crate::ttl::StateTtl;
use std::any::Any;

/// Severity of a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// The shape of a keyed state, as declared to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StateKind {
    Value,
    List,
    Map,
}

#[cfg(not(target_arch = "wasm32"))]
impl StateKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StateKind::Value => "value",
            StateKind::List => "list",
            StateKind::Map => "map",
        }
    }
}

/// A decoded value state value that a backend may keep between calls (the cached batch
/// path keeps them from one batch to the next, so a read-modify-write neither decodes nor
/// copies the value). It knows how to encode itself for the host.
pub(crate) trait CachedValue: Any {
    /// Appends the value as stored (the state's encoding, schema tag included) to `out`.
    fn encode_into(&self, out: Vec<u8>) -> anyhow::Result<Vec<u8>>;
    /// The value as stored.
    fn encode(&self) -> anyhow::Result<Vec<u8>> {
        self.encode_into(Vec::with_capacity(64))
    }
    /// The value, to downcast to the typed state's own type.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// A value state's current value, as [`Backend::value_view`] lends it.
pub(crate) enum ValueView<'a> {
    /// The key holds no value.
    Absent,
    /// The stored bytes.
    Bytes(&'a [u8]),
    /// A decoded value the backend keeps (only the component's batch overlay keeps any).
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    Decoded(&'a dyn CachedValue),
}

/// Host operations, one per WIT import. Errors of the fallible imports are the host's
/// message. State and timer calls act on the current key; outside a key scope the host
/// traps (the native backend panics with the same meaning).
pub(crate) trait Backend {
    /// Declares a state (`state.declare`, or `state.declare-with-ttl` with a `ttl`).
    fn declare_state(name: &str, kind: StateKind, ttl: Option<StateTtl>) -> Result<u32, String>;
    fn value_get(state: u32) -> Option<Vec<u8>>;
    fn value_set(state: u32, value: &[u8]);
    fn list_get(state: u32) -> Vec<Vec<u8>>;
    fn list_append(state: u32, item: &[u8]);
    fn list_set(state: u32, items: &[Vec<u8>]);
    fn map_get(state: u32, key: &[u8]) -> Option<Vec<u8>>;
    fn map_put(state: u32, key: &[u8], value: &[u8]);
    fn map_remove(state: u32, key: &[u8]);
    fn map_entries(state: u32) -> Vec<(Vec<u8>, Vec<u8>)>;
    fn clear(state: u32);
    fn clear_all();

    fn register_timer(domain: TimeDomain, at: i64);
    fn delete_timer(domain: TimeDomain, at: i64);
    fn current_watermark() -> i64;
    fn current_processing_time() -> i64;

    fn declare_output(name: &str) -> Result<u32, String>;
    fn emit(output: u32, value: &[u8], key: Option<&[u8]>, timestamp: Option<i64>);

    fn log(level: LogLevel, message: &str);

    /// Runs `f` on the current value as the backend holds it: bytes, or a decoded value
    /// it keeps. Backends without a cache lend bytes.
    fn value_view<R>(state: u32, f: impl FnOnce(ValueView<'_>) -> R) -> R {
        let bytes = Self::value_get(state);
        f(match &bytes {
            Some(bytes) => ValueView::Bytes(bytes),
            None => ValueView::Absent,
        })
    }

    /// Takes the decoded value the backend keeps for the current key, if it keeps one,
    /// so that the UDF can change it in place; it must be handed back with
    /// [`value_keep`](Self::value_keep) or [`value_restore`](Self::value_restore) before
    /// the call ends. Backends without a cache keep none.
    fn value_take(_state: u32) -> Option<Box<dyn CachedValue>> {
        None
    }

    /// Makes `value` the current key's value. A backend with a cache keeps it decoded
    /// (and encodes it once, when it hands its writes to the host); the others encode it
    /// now.
    fn value_keep(state: u32, value: Box<dyn CachedValue>) -> anyhow::Result<()> {
        Self::value_set_owned(state, value.encode()?);
        Ok(())
    }

    /// Hands back a value [`value_take`](Self::value_take) took, as the current value
    /// again: unchanged, or `tainted` when a failed change may have altered it in place
    /// (the backend must then fail the work it is part of, so that it is run again
    /// without the cache). Only a backend that hands out values is ever given one back.
    fn value_restore(state: u32, _value: Box<dyn CachedValue>, _tainted: bool) {
        unreachable!("state #{state}: this backend hands out no decoded values")
    }

    /// [`value_set`](Self::value_set) with an owned buffer the backend may keep.
    fn value_set_owned(state: u32, value: Vec<u8>) {
        Self::value_set(state, &value)
    }

    /// Emits a record whose value `write` appends to a buffer, so a backend can have it
    /// written in place.
    fn emit_with<E>(
        output: u32,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut value = Vec::new();
        write(&mut value)?;
        Self::emit(output, &value, key, timestamp);
        Ok(())
    }

    /// Called after every export call (init, element, timer) returns, successful or not;
    /// the place for a buffering backend to flush.
    fn call_finished() {}
}
