//! The one seam between the typed API and whatever executes host calls.
//!
//! [`Backend`] mirrors the WIT imports as untyped byte-level calls. The public types
//! (`ValueState`, `Output`, `Context`, ...) only ever call [`Active`], which is chosen at
//! compile time, so each call is a direct (inlinable) function call:
//!
//! - `wasm32`: [`wasm::Wasm`], the component's imports;
//! - native: [`native::Native`], the in-memory host behind `testing::TestHost`.
//!
//! Another backend (for example a guest-side overlay that batches state writes and
//! flushes them in [`Backend::call_finished`]) implements the same trait and replaces
//! the `Active` alias; nothing public changes.

use crate::{LogLevel, TimeDomain};

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod native;
#[cfg(target_arch = "wasm32")]
mod wasm;

/// The backend in use for this target.
#[cfg(target_arch = "wasm32")]
pub(crate) type Active = wasm::Wasm;
/// The backend in use for this target.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) type Active = native::Native;

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

/// Host operations, one per WIT import. Errors of the fallible imports are the host's
/// message. State and timer calls act on the current key; outside a key scope the host
/// traps (the native backend panics with the same meaning).
pub(crate) trait Backend {
    fn declare_state(name: &str, kind: StateKind) -> Result<u32, String>;
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

    /// Runs `f` on the current value without copying it where the backend can lend it.
    fn value_with<R>(state: u32, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        f(Self::value_get(state).as_deref())
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
