//! What the host offers a UDF call: keyed state, timers, outputs and clocks.
//!
//! This is the contract of `wit/weir.wit` in host terms, independent of wasm, so that
//! the wasm imports and native functions share one implementation. Every call is scoped
//! to the key set by the operator ([`Scope`]); using state or timers outside a scope, a
//! state as the wrong kind, or an undeclared output is a [`ContractError`] (a trap for a
//! wasm UDF).

mod emitted;
mod expiry;
mod spill;

pub use emitted::{EmitLimitExceeded, Emitted, DEFAULT_MAX_EMIT_BYTES};

use std::ops::{Deref, DerefMut};
use weir_core::state::ttl::{self, unstamped};
use weir_core::state::ByteMap;
use weir_core::state::{
    KeyEntry, KeyId, KeyTable, Slot, StampChange, StateId, StateKind, StateRegistry, StateTtl,
};
use weir_core::time::timers::{TimeDomain, TimerService};
use weir_core::time::{wall_clock_ms, Timestamp, MIN_WATERMARK};

/// An output's id: its index in declaration order.
pub type OutputId = u32;

/// A map state's entry as the host hands it to the UDF: key bytes and value bytes.
pub type MapEntry<'a> = (&'a [u8], &'a [u8]);

/// A broken rule of the contract; the message says which.
pub type ContractError = anyhow::Error;

/// The key (and time) a call is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    /// The key of the element or timer being processed: every state and timer call
    /// acts on it.
    pub key: KeyId,
    /// The element's or timer's timestamp: the default timestamp of emitted records.
    pub timestamp: Timestamp,
}

/// The host services. Boxed so that moving them in and out of a wasm store costs one
/// pointer swap per call.
pub struct HostServices(Box<Services>);

/// What a UDF call reaches: the keyed state table, the declared states, the timer
/// service, the declared outputs and what the current call emitted, the key the call is
/// scoped to and the watermark. The contract's imports are its methods; the engine's own
/// crates reach the parts directly, everything above through the accessors.
pub struct Services {
    pub(crate) keys: KeyTable,
    pub(crate) states: StateRegistry,
    pub(crate) timers: TimerService,
    pub(crate) outputs: Vec<String>,
    /// Outputs can be declared only while the UDF initialises (the operator and the wasm
    /// runtime set it around `init`).
    pub(crate) declaring: bool,
    pub(crate) emitted: Emitted,
    pub(crate) scope: Option<Scope>,
    pub(crate) watermark: Timestamp,
    /// The processing time the operator read before the current batch (the time the
    /// batch runs at, and expired state was removed by).
    pub(crate) processing_time: Timestamp,
    /// How to take back what the current call changed, should it fail.
    journal: Vec<Undo>,
    /// The reason the current call gave for rejecting its element or timer (the
    /// `dead-letters.reject` import), if it did.
    pub(crate) rejected: Option<String>,
}

/// One change a call made to state or timers, and what was there before.
#[derive(Debug)]
enum Undo {
    /// The state held `previous` (or nothing) before the call replaced or cleared it.
    Slot {
        key: KeyId,
        state: StateId,
        previous: Option<Slot>,
    },
    /// The key held these slots before the call cleared them all.
    AllSlots {
        key: KeyId,
        previous: Vec<(StateId, Slot)>,
    },
    /// The call appended an item to a list.
    ListAppended { key: KeyId, state: StateId },
    /// The map's `entry` held `previous` (or nothing) before the call put or removed it.
    MapEntry {
        key: KeyId,
        state: StateId,
        entry: Vec<u8>,
        previous: Option<Vec<u8>>,
    },
    /// The call registered a timer that was not pending (`registered`), or deleted one
    /// that was.
    Timer {
        key: KeyId,
        domain: TimeDomain,
        at: Timestamp,
        registered: bool,
    },
}

impl Default for HostServices {
    fn default() -> Self {
        Self::new(wall_clock_ms())
    }
}

impl Deref for HostServices {
    type Target = Services;
    fn deref(&self) -> &Services {
        &self.0
    }
}

impl DerefMut for HostServices {
    fn deref_mut(&mut self) -> &mut Services {
        &mut self.0
    }
}

impl HostServices {
    /// Fresh services; the processing-time wheel starts at `now`.
    pub fn new(now: Timestamp) -> Self {
        Self(Box::new(Services {
            keys: KeyTable::new(),
            states: StateRegistry::default(),
            timers: TimerService::new(now),
            outputs: Vec::new(),
            declaring: false,
            emitted: Emitted::default(),
            scope: None,
            watermark: MIN_WATERMARK,
            processing_time: now,
            journal: Vec::new(),
            rejected: None,
        }))
    }
}

impl Services {
    // ---- the parts, for the crates above (checkpoints, status) ----------------------

    /// The keyed state table.
    pub fn keys(&self) -> &KeyTable {
        &self.keys
    }

    /// The keyed state table, to save or restore it (checkpoints).
    pub fn keys_mut(&mut self) -> &mut KeyTable {
        &mut self.keys
    }

    /// The states the UDF declared.
    pub fn states(&self) -> &StateRegistry {
        &self.states
    }

    /// The pending timers of every key.
    pub fn timers(&self) -> &TimerService {
        &self.timers
    }

    /// The outputs the UDF declared, in id order.
    pub fn outputs(&self) -> &[String] {
        &self.outputs
    }

    /// What the current (or last) call emitted, not yet handed to the sinks.
    pub fn emitted(&self) -> &Emitted {
        &self.emitted
    }

    /// Drops what the last call emitted (the operator does after a failed call).
    pub fn clear_emitted(&mut self) {
        self.emitted.clear();
    }

    /// Lets the UDF declare outputs (only while it initialises).
    pub fn allow_declarations(&mut self, allowed: bool) {
        self.declaring = allowed;
    }

    // ---- scope, set by the operator ------------------------------------------------

    /// Scopes the following calls to `key`, and starts a new journal of what they change.
    pub fn enter(&mut self, key: KeyId, timestamp: Timestamp) {
        self.scope = Some(Scope { key, timestamp });
        self.journal.clear();
    }

    /// Takes back every change to state and timers made since [`enter`](Self::enter),
    /// newest first, so that nothing of a failed call survives. The operator calls this
    /// when a call fails, before [`leave`](Self::leave).
    pub fn undo_call(&mut self) {
        while let Some(undo) = self.journal.pop() {
            match undo {
                Undo::Slot {
                    key,
                    state,
                    previous,
                } => {
                    let entry = self.keys.entry_mut(key);
                    match previous {
                        Some(slot) => entry.set_slot(state, slot),
                        None => entry.clear(state),
                    }
                }
                Undo::AllSlots { key, previous } => {
                    let entry = self.keys.entry_mut(key);
                    for (state, slot) in previous {
                        entry.set_slot(state, slot);
                    }
                }
                Undo::ListAppended { key, state } => {
                    let entry = self.keys.entry_mut(key);
                    let now_empty = match entry.slot_mut(state) {
                        Some(Slot::List(items)) => {
                            items.pop();
                            items.is_empty()
                        }
                        _ => false,
                    };
                    if now_empty {
                        entry.clear(state);
                    }
                }
                Undo::MapEntry {
                    key,
                    state,
                    entry: map_key,
                    previous,
                } => {
                    let entry = self.keys.entry_mut(key);
                    let now_empty = match entry.slot_or_insert(state, || Slot::Map(ByteMap::new()))
                    {
                        Slot::Map(map) => {
                            match previous {
                                Some(value) => map.insert(map_key, value),
                                None => map.remove(&map_key),
                            };
                            map.is_empty()
                        }
                        _ => false,
                    };
                    if now_empty {
                        entry.clear(state);
                    }
                }
                Undo::Timer {
                    key,
                    domain,
                    at,
                    registered,
                } => {
                    self.timer_for(key, domain, at, !registered);
                }
            }
        }
    }

    /// Journals that the current call replaced or cleared `state`, which held `previous`.
    fn replaced(&mut self, state: StateId, previous: Option<Slot>) {
        if let Some(scope) = self.scope {
            self.journal.push(Undo::Slot {
                key: scope.key,
                state,
                previous,
            });
        }
    }

    /// Ends the scope and releases the key if it holds nothing any more.
    pub fn leave(&mut self) {
        if let Some(scope) = self.scope.take() {
            self.keys.release_if_unused(scope.key);
        }
    }

    fn scope(&self) -> Result<Scope, ContractError> {
        self.scope.ok_or_else(|| {
            anyhow::anyhow!("keyed state and timers can only be used while processing an element or a timer, not in init")
        })
    }

    /// The current key's entry, to change: the key counts as changed for the next
    /// checkpoint.
    fn entry(&mut self) -> Result<&mut KeyEntry, ContractError> {
        let scope = self.scope()?;
        Ok(self.keys.entry_mut(scope.key))
    }

    /// The current key's entry, to read: a read is not a change, so an incremental
    /// checkpoint does not write a key that was only read.
    fn entry_to_read(&self) -> Result<&KeyEntry, ContractError> {
        let scope = self.scope()?;
        Ok(self.keys.entry(scope.key))
    }

    // ---- state ---------------------------------------------------------------------
    //
    // Every call below but `declare_state` acts on the key of the current scope: outside
    // a scope it is a `ContractError`, and so is using a state never declared or as
    // another kind than it was declared with.

    /// The `state.declare` and `state.declare-with-ttl` imports: declares the state
    /// `name` of `kind` with time-to-live `ttl` (or none), or returns its id if it is
    /// declared already; an error for an empty name, a name declared with another kind,
    /// or a time-to-live of 0. The last declaration sets the time-to-live: when a state
    /// gains one, its entries are stamped now; when it loses one, their stamps go.
    /// Needs no scope.
    pub fn declare_state(
        &mut self,
        name: &str,
        kind: StateKind,
        ttl: Option<StateTtl>,
    ) -> Result<StateId, String> {
        let (id, change) = self.states.declare(name, kind, ttl)?;
        if change != StampChange::Unchanged {
            // Every entry's stamps change: dormant keys (none once a state has a
            // time-to-live) come back to memory first.
            self.keys
                .wake_all(&mut self.timers)
                .map_err(|e| format!("{e:#}"))?;
            let stamp = ttl.map(|ttl| self.clock(ttl.domain));
            let keys: Vec<KeyId> = self.keys.iter().map(|(key, _)| key).collect();
            for key in keys {
                let entry = self.keys.entry_mut(key);
                if let Some(slot) = entry.slot_mut(id) {
                    ttl::change_stamps(slot, change, stamp.unwrap_or_default());
                }
                self.schedule_expiry(key);
            }
        }
        Ok(id)
    }

    /// Checks that `state` is declared with `kind`.
    fn check(&self, state: StateId, kind: StateKind) -> Result<(), ContractError> {
        match self.states.get(state) {
            Some((_, declared)) if declared == kind => Ok(()),
            Some((name, declared)) => {
                anyhow::bail!(
                    "state {name:?} is a {declared:?} state and cannot be used as a {kind:?} state"
                )
            }
            None => anyhow::bail!("state id {state} was never declared"),
        }
    }

    /// The `state.value-get` import: the current key's value of value state `state`,
    /// if it has one.
    pub fn value_get(&mut self, state: StateId) -> Result<Option<&[u8]>, ContractError> {
        self.check(state, StateKind::Value)?;
        if let Some(ttl) = self.refreshed_on_read(state) {
            self.refresh(state, ttl, None);
        }
        let stamped = self.states.ttl(state).is_some();
        Ok(match self.entry_to_read()?.slot(state) {
            Some(Slot::Value(bytes)) if stamped => Some(unstamped(bytes)),
            Some(Slot::Value(bytes)) => Some(bytes.as_slice()),
            _ => None,
        })
    }

    /// The `state.value-set` import: replaces the current key's value of value state
    /// `state`.
    pub fn value_set(&mut self, state: StateId, value: Vec<u8>) -> Result<(), ContractError> {
        self.check(state, StateKind::Value)?;
        self.scope()?;
        let value = self.stored(state, value);
        let entry = self.entry()?;
        let previous = entry.take_slot(state);
        entry.set_slot(state, Slot::Value(value));
        self.replaced(state, previous);
        Ok(())
    }

    /// The `state.list-get` import: the current key's items of list state `state`,
    /// oldest first (none if it has none).
    pub fn list_get(&mut self, state: StateId) -> Result<Vec<&[u8]>, ContractError> {
        self.check(state, StateKind::List)?;
        if let Some(ttl) = self.refreshed_on_read(state) {
            self.refresh(state, ttl, None);
        }
        let stamped = self.states.ttl(state).is_some();
        Ok(match self.entry_to_read()?.slot(state) {
            Some(Slot::List(items)) if stamped => items.iter().map(|i| unstamped(i)).collect(),
            Some(Slot::List(items)) => items.iter().map(Vec::as_slice).collect(),
            _ => Vec::new(),
        })
    }

    /// The `state.list-append` import: appends `item` to the current key's list state
    /// `state`.
    pub fn list_append(&mut self, state: StateId, item: Vec<u8>) -> Result<(), ContractError> {
        self.check(state, StateKind::List)?;
        self.scope()?;
        let item = self.stored(state, item);
        if let Slot::List(items) = self
            .entry()?
            .slot_or_insert(state, || Slot::List(Vec::new()))
        {
            items.push(item);
        }
        let key = self.scope()?.key;
        self.journal.push(Undo::ListAppended { key, state });
        Ok(())
    }

    /// The `state.list-set` import: replaces the current key's items of list state
    /// `state`; an empty `items` clears the state.
    pub fn list_set(&mut self, state: StateId, items: Vec<Vec<u8>>) -> Result<(), ContractError> {
        self.check(state, StateKind::List)?;
        self.scope()?;
        let items: Vec<Vec<u8>> = items
            .into_iter()
            .map(|item| self.stored(state, item))
            .collect();
        let entry = self.entry()?;
        let previous = entry.take_slot(state);
        if !items.is_empty() {
            entry.set_slot(state, Slot::List(items));
        }
        self.replaced(state, previous);
        Ok(())
    }

    /// The `state.map-get` import: the value under `key` in the current key's map
    /// state `state`, if any.
    pub fn map_get(&mut self, state: StateId, key: &[u8]) -> Result<Option<&[u8]>, ContractError> {
        self.check(state, StateKind::Map)?;
        if let Some(ttl) = self.refreshed_on_read(state) {
            self.refresh(state, ttl, Some(key));
        }
        let stamped = self.states.ttl(state).is_some();
        Ok(match self.entry_to_read()?.slot(state) {
            Some(Slot::Map(map)) if stamped => map.get(key).map(|v| unstamped(v)),
            Some(Slot::Map(map)) => map.get(key).map(Vec::as_slice),
            _ => None,
        })
    }

    /// The `state.map-put` import: inserts or replaces the value under `key` in the
    /// current key's map state `state`.
    pub fn map_put(
        &mut self,
        state: StateId,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), ContractError> {
        self.check(state, StateKind::Map)?;
        self.scope()?;
        let value = self.stored(state, value);
        if let Slot::Map(map) = self
            .entry()?
            .slot_or_insert(state, || Slot::Map(ByteMap::new()))
        {
            let previous = map.insert(key.clone(), value);
            let scope = self.scope()?.key;
            self.journal.push(Undo::MapEntry {
                key: scope,
                state,
                entry: key,
                previous,
            });
        }
        Ok(())
    }

    /// The `state.map-remove` import: removes `key` from the current key's map state
    /// `state` (a missing key is a no-op); a map left empty is cleared.
    pub fn map_remove(&mut self, state: StateId, key: &[u8]) -> Result<(), ContractError> {
        self.check(state, StateKind::Map)?;
        let entry = self.entry()?;
        let mut removed = None;
        if let Some(Slot::Map(map)) = entry.slot_mut(state) {
            removed = map.remove(key);
            if map.is_empty() {
                entry.clear(state);
            }
        }
        if let Some(previous) = removed {
            let scope = self.scope()?.key;
            self.journal.push(Undo::MapEntry {
                key: scope,
                state,
                entry: key.to_vec(),
                previous: Some(previous),
            });
        }
        Ok(())
    }

    /// The `state.map-entries` import: the current key's entries of map state `state`,
    /// in byte order of their keys (none if it holds none).
    pub fn map_entries(&mut self, state: StateId) -> Result<Vec<MapEntry<'_>>, ContractError> {
        self.check(state, StateKind::Map)?;
        if let Some(ttl) = self.refreshed_on_read(state) {
            self.refresh(state, ttl, None);
        }
        let stamped = self.states.ttl(state).is_some();
        Ok(match self.entry_to_read()?.slot(state) {
            Some(Slot::Map(map)) => map
                .iter()
                .map(|(k, v)| {
                    let v = if stamped { unstamped(v) } else { v.as_slice() };
                    (k.as_slice(), v)
                })
                .collect(),
            _ => Vec::new(),
        })
    }

    /// The `state.clear` import: clears the current key's state `state`, whatever its
    /// kind; an error only if `state` was never declared.
    pub fn clear(&mut self, state: StateId) -> Result<(), ContractError> {
        anyhow::ensure!(
            self.states.get(state).is_some(),
            "state id {state} was never declared"
        );
        let previous = self.entry()?.take_slot(state);
        if previous.is_some() {
            self.replaced(state, previous);
        }
        Ok(())
    }

    /// The `state.clear-all` import: clears every state of the current key; its timers
    /// stay.
    pub fn clear_all(&mut self) -> Result<(), ContractError> {
        let previous = self.entry()?.take_all_slots();
        if !previous.is_empty() {
            let key = self.scope()?.key;
            self.journal.push(Undo::AllSlots { key, previous });
        }
        Ok(())
    }

    // ---- timers --------------------------------------------------------------------

    /// The `timers.register` import: registers a timer of the current key in `domain`
    /// at `at`; registering one that is pending already is a no-op. An error outside a
    /// scope.
    pub fn register_timer(
        &mut self,
        domain: TimeDomain,
        at: Timestamp,
    ) -> Result<(), ContractError> {
        let key = self.scope()?.key;
        if self.timer_for(key, domain, at, true) {
            self.journal.push(Undo::Timer {
                key,
                domain,
                at,
                registered: true,
            });
        }
        Ok(())
    }

    /// The `timers.delete` import: deletes the current key's timer in `domain` at `at`;
    /// deleting one that is not pending is a no-op. An error outside a scope.
    pub fn delete_timer(&mut self, domain: TimeDomain, at: Timestamp) -> Result<(), ContractError> {
        let key = self.scope()?.key;
        if self.timer_for(key, domain, at, false) {
            self.journal.push(Undo::Timer {
                key,
                domain,
                at,
                registered: false,
            });
        }
        Ok(())
    }

    /// Registers (or deletes) a timer of `key`, keeping the key's list of timers; whether
    /// anything changed (the timer was not pending, or was).
    pub fn timer_for(
        &mut self,
        key: KeyId,
        domain: TimeDomain,
        at: Timestamp,
        register: bool,
    ) -> bool {
        let tie = self.keys.entry(key).tie_order();
        if register {
            if self.timers.register(domain, key, tie, at) {
                self.keys.timer_added(key, domain, at);
                return true;
            }
        } else if self.timers.delete(domain, key, tie, at) {
            self.keys.timer_removed(key, domain, at);
            return true;
        }
        false
    }

    /// The `timers.current-watermark` import: the pipeline's watermark as the operator
    /// last set it ([`MIN_WATERMARK`] before the first advance). Needs no scope.
    pub fn current_watermark(&self) -> Timestamp {
        self.watermark
    }

    /// The `timers.current-processing-time` import: the wall clock, in milliseconds
    /// since the Unix epoch, read at each call. Needs no scope.
    pub fn current_processing_time(&self) -> Timestamp {
        wall_clock_ms()
    }

    // ---- outputs -------------------------------------------------------------------

    /// The `output.declare` import: the id of output `name`. A name declared already
    /// returns its id at any time; a new one is accepted only while the UDF initialises
    /// (see [`allow_declarations`](Self::allow_declarations)) and must not be empty.
    pub fn declare_output(&mut self, name: &str) -> Result<OutputId, String> {
        if let Some(pos) = self.outputs.iter().position(|o| o == name) {
            return Ok(pos as OutputId);
        }
        if !self.declaring {
            return Err(format!("output {name:?} must be declared in init"));
        }
        if name.is_empty() {
            return Err("an output needs a non-empty name".into());
        }
        self.outputs.push(name.to_string());
        Ok((self.outputs.len() - 1) as OutputId)
    }

    /// The `output.emit` import: queues a record for `output` (see
    /// [`emitted`](Self::emitted)), with `key` if given and `timestamp`, or by default
    /// the timestamp of the element or timer being processed. An error outside a scope,
    /// for an output never declared, or ([`EmitLimitExceeded`]) once the call has
    /// emitted more than [`Emitted::limit`] bytes.
    pub fn emit(
        &mut self,
        output: OutputId,
        value: Vec<u8>,
        key: Option<Vec<u8>>,
        timestamp: Option<Timestamp>,
    ) -> Result<(), ContractError> {
        anyhow::ensure!(
            (output as usize) < self.outputs.len(),
            "output id {output} was never declared"
        );
        let scope = self.scope()?;
        let timestamp = timestamp.unwrap_or(scope.timestamp);
        self.emitted.push(output, key.as_deref(), &value, timestamp);
        if self.emitted.over_limit() {
            return Err(EmitLimitExceeded {
                limit_bytes: self.emitted.limit(),
            }
            .into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
