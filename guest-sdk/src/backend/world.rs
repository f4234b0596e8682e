//! The in-memory host: keyed state, timers, clocks, outputs and logs, with the host's
//! rules (key scoping, timer uniqueness, init-only output declaration).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::host_calls::LogLevel;
use crate::host_calls::StateKind;
use crate::time::TimeDomain;
use crate::ttl::StateTtl;
use weir_core::key::{tie_order, KeyId};
use weir_core::state::ttl::{self, stamped, unstamped};
use weir_core::state::{StampChange, StateTtl as HostTtl, TtlRefresh};
use weir_core::time::timers::{TimeDomain as HostDomain, TimerService};

/// A record the UDF emitted, as the host received it.
#[derive(Clone, Debug, PartialEq)]
pub struct Emitted {
    /// The record's key, if the UDF gave one.
    pub key: Option<Vec<u8>>,
    /// The record, parsed from the JSON the UDF emitted.
    pub value: serde_json::Value,
    /// The record's timestamp: the one the UDF gave, else the element's or timer's.
    pub timestamp: i64,
}

impl Emitted {
    /// An expected record without a key, for comparing with [`TestHost::outputs`](crate::testing::TestHost::outputs).
    pub fn new(value: serde_json::Value, timestamp: i64) -> Self {
        Emitted {
            key: None,
            value,
            timestamp,
        }
    }

    /// Sets the expected key.
    pub fn with_key(mut self, key: impl AsRef<[u8]>) -> Self {
        self.key = Some(key.as_ref().to_vec());
        self
    }
}

/// A line the UDF logged.
#[derive(Clone, Debug, PartialEq)]
pub struct LogLine {
    /// Its level.
    pub level: LogLevel,
    /// The current key when it was logged (`None` in `init`).
    pub key: Option<Vec<u8>>,
    /// The message.
    pub message: String,
}

/// What the host is doing, which decides which calls are legal.
pub(crate) enum Phase {
    /// Between calls (or inside the test itself).
    Idle,
    /// Inside `init`: declarations allowed, no key.
    Init,
    /// Inside `process_element` / `on_timer` for `key`; `timestamp` is the element's or
    /// timer's, the default timestamp of emitted records.
    Keyed { key: Vec<u8>, timestamp: i64 },
}

/// One state of one key, as the engine keeps it: the entries of a state with a
/// time-to-live carry their stamps (`weir_core::state::ttl`).
type StateData = weir_core::state::Slot;

/// A declared state: its name, kind and time-to-live (the last declaration's).
type Declared = (String, StateKind, Option<HostTtl>);

pub(crate) struct World {
    pub(crate) phase: Phase,
    pub(crate) watermark: i64,
    /// While an event-time timer fires: its time, the clock event-time entries expire by
    /// (an entry is visible to every timer before its expiry, however far the watermark
    /// jumped). `None`: they expire by the watermark.
    pub(crate) event_clock: Option<i64>,
    pub(crate) processing_time: i64,
    states: Vec<Declared>,
    /// Only keys with at least one non-empty state are present.
    data: HashMap<Vec<u8>, HashMap<u32, StateData>>,
    outputs: Vec<String>,
    emitted: Vec<Vec<Emitted>>,
    /// Records of the running call, by output id.
    pending: Vec<(u32, Emitted)>,
    /// The engine's own timer service, so timers fire in exactly the engine's order
    /// (`docs/pipeline.md`, "Timers"): by timestamp, then the keys' tie order.
    timers: TimerService,
    /// Key ids for the timer service, and each id's key.
    key_ids: HashMap<Vec<u8>, KeyId>,
    key_bytes: Vec<Vec<u8>>,
    /// The pending timers by key id, for `pending_timers`.
    pending_timers: BTreeSet<(HostDomain, i64, KeyId)>,
    pub(crate) logs: Vec<LogLine>,
}

/// The state and timers before a call, to take a rejected call back.
pub(crate) struct Saved {
    data: HashMap<Vec<u8>, HashMap<u32, StateData>>,
    timers: TimerService,
    pending_timers: BTreeSet<(HostDomain, i64, KeyId)>,
}

impl World {
    /// The state and timers as they are, for [`restore`](Self::restore).
    pub(crate) fn save(&self) -> Saved {
        Saved {
            data: self.data.clone(),
            timers: self.timers.clone(),
            pending_timers: self.pending_timers.clone(),
        }
    }

    /// Takes state and timers back to `saved`, as the host takes back a rejected call.
    pub(crate) fn restore(&mut self, saved: Saved) {
        self.data = saved.data;
        self.timers = saved.timers;
        self.pending_timers = saved.pending_timers;
    }

    pub(crate) fn new(processing_time: i64) -> Self {
        World {
            phase: Phase::Idle,
            watermark: i64::MIN,
            event_clock: None,
            processing_time,
            states: Vec::new(),
            data: HashMap::new(),
            outputs: Vec::new(),
            emitted: Vec::new(),
            pending: Vec::new(),
            timers: TimerService::new(processing_time),
            key_ids: HashMap::new(),
            key_bytes: Vec::new(),
            pending_timers: BTreeSet::new(),
            logs: Vec::new(),
        }
    }

    fn key(&self, call: &str) -> &[u8] {
        match &self.phase {
            Phase::Keyed { key, .. } => key,
            Phase::Init => panic!(
                "weir host: `{call}` called from init; keyed state and timers are scoped to the \
                 current key and only usable in process_element and on_timer (the host traps)"
            ),
            Phase::Idle => panic!(
                "weir host: `{call}` called outside process_element/on_timer; keyed state and \
                 timers need a current key (the host traps)"
            ),
        }
    }

    fn check_state(&self, state: u32, kind: StateKind, call: &str) {
        match self.states.get(state as usize) {
            Some((_, k, _)) if *k == kind => {}
            Some((name, k, _)) => panic!(
                "weir host: `{call}` on state `{name}`, which is a {} state (the host traps)",
                k.as_str()
            ),
            None => panic!("weir host: `{call}` on undeclared state id {state} (the host traps)"),
        }
    }

    /// The current key's slot of `state`, checked for kind.
    fn slot(&self, state: u32, kind: StateKind, call: &str) -> Option<&StateData> {
        self.check_state(state, kind, call);
        self.data.get(self.key(call))?.get(&state)
    }

    fn set_slot(&mut self, state: u32, kind: StateKind, call: &str, value: Option<StateData>) {
        self.check_state(state, kind, call);
        let key = self.key(call).to_vec();
        match value {
            Some(v) => {
                self.data.entry(key).or_default().insert(state, v);
            }
            None => self.remove_slot(&key, state),
        }
    }

    fn remove_slot(&mut self, key: &[u8], state: u32) {
        if let Some(slots) = self.data.get_mut(key) {
            slots.remove(&state);
            if slots.is_empty() {
                self.data.remove(key);
            }
        }
    }

    pub(crate) fn declare_state(
        &mut self,
        name: &str,
        kind: StateKind,
        ttl: Option<StateTtl>,
    ) -> Result<u32, String> {
        if name.is_empty() {
            return Err("a state needs a non-empty name".into());
        }
        let ttl = ttl.map(|ttl| HostTtl {
            millis: ttl.ttl().as_millis(),
            domain: host_domain(ttl.domain()),
            refresh: match ttl.is_refreshed_on_read() {
                true => TtlRefresh::OnReadAndWrite,
                false => TtlRefresh::OnWrite,
            },
        });
        if ttl.is_some_and(|ttl| ttl.millis <= 0) {
            return Err(format!(
                "state `{name}`: a time-to-live must be longer than 0 ms"
            ));
        }
        if let Some(id) = self.states.iter().position(|(n, ..)| n == name) {
            let (_, declared, before) = self.states[id];
            if declared != kind {
                return Err(format!(
                    "state `{name}` is a {} state, declared again as a {} state",
                    declared.as_str(),
                    kind.as_str()
                ));
            }
            // The last declaration sets the time-to-live, as in the host.
            let change = StampChange::between(before.map(|t| t.domain), ttl.map(|t| t.domain));
            let now = ttl.map_or(0, |ttl| self.call_time(ttl.domain));
            for slots in self.data.values_mut() {
                if let Some(slot) = slots.get_mut(&(id as u32)) {
                    ttl::change_stamps(slot, change, now);
                }
            }
            self.states[id].2 = ttl;
            return Ok(id as u32);
        }
        self.states.push((name.to_owned(), kind, ttl));
        Ok((self.states.len() - 1) as u32)
    }

    fn ttl(&self, state: u32) -> Option<HostTtl> {
        self.states.get(state as usize).and_then(|(.., ttl)| *ttl)
    }

    /// The time of the current call on `domain`'s clock, as the host stamps entries: the
    /// element's or timer's timestamp or the watermark, whichever is later; or the
    /// processing time.
    fn call_time(&self, domain: HostDomain) -> i64 {
        match domain {
            HostDomain::EventTime => match &self.phase {
                Phase::Keyed { timestamp, .. } => (*timestamp).max(self.watermark),
                _ => self.watermark,
            },
            HostDomain::ProcessingTime => self.processing_time,
        }
    }

    /// `bytes` as stored for `state`: stamped with the call's time if it has a
    /// time-to-live.
    fn stored(&self, state: u32, bytes: &[u8]) -> Vec<u8> {
        match self.ttl(state) {
            Some(ttl) => stamped(self.call_time(ttl.domain), bytes),
            None => bytes.to_vec(),
        }
    }

    /// The UDF's bytes of a stored entry of `state`.
    fn loaded(&self, state: u32, entry: &[u8]) -> Vec<u8> {
        match self.ttl(state) {
            Some(_) => unstamped(entry).to_vec(),
            None => entry.to_vec(),
        }
    }

    /// A read of the current key's `state` (only its entry `map_key`, if given):
    /// restamps what it reads if reads refresh the state's time-to-live.
    fn read(&mut self, state: u32, map_key: Option<&[u8]>, call: &str) {
        let Some(ttl) = self.ttl(state).filter(HostTtl::refreshed_on_read) else {
            return;
        };
        let now = self.call_time(ttl.domain);
        let key = self.key(call).to_vec();
        let Some(slot) = self.data.get_mut(&key).and_then(|s| s.get_mut(&state)) else {
            return;
        };
        ttl::restamp_read(slot, map_key, now);
    }

    /// Removes every entry that has expired by the watermark or the processing time, as
    /// the host does between calls; a key left with no state goes.
    pub(crate) fn expire(&mut self) {
        let ttls: Vec<(u32, HostTtl)> = (0..self.states.len() as u32)
            .filter_map(|id| self.ttl(id).map(|ttl| (id, ttl)))
            .collect();
        if ttls.is_empty() {
            return;
        }
        let (watermark, now) = (
            self.event_clock.unwrap_or(self.watermark),
            self.processing_time,
        );
        self.data.retain(|_, slots| {
            for &(id, ttl) in &ttls {
                let clock = match ttl.domain {
                    HostDomain::EventTime => watermark,
                    HostDomain::ProcessingTime => now,
                };
                if let Some(slot) = slots.get_mut(&id) {
                    if ttl::purge(slot, &ttl, clock).empty {
                        slots.remove(&id);
                    }
                }
            }
            !slots.is_empty()
        });
    }

    pub(crate) fn value_get(&mut self, state: u32) -> Option<Vec<u8>> {
        self.check_state(state, StateKind::Value, "state.value-get");
        self.read(state, None, "state.value-get");
        match self.slot(state, StateKind::Value, "state.value-get")? {
            StateData::Value(v) => Some(self.loaded(state, v)),
            _ => unreachable!(),
        }
    }

    pub(crate) fn value_set(&mut self, state: u32, value: &[u8]) {
        self.check_state(state, StateKind::Value, "state.value-set");
        let v = Some(StateData::Value(self.stored(state, value)));
        self.set_slot(state, StateKind::Value, "state.value-set", v);
    }

    pub(crate) fn list_get(&mut self, state: u32) -> Vec<Vec<u8>> {
        self.check_state(state, StateKind::List, "state.list-get");
        self.read(state, None, "state.list-get");
        match self.slot(state, StateKind::List, "state.list-get") {
            Some(StateData::List(items)) => items.iter().map(|i| self.loaded(state, i)).collect(),
            _ => Vec::new(),
        }
    }

    /// The stored items of the current key's list `state`.
    fn stored_items(&self, state: u32, call: &str) -> Vec<Vec<u8>> {
        match self.slot(state, StateKind::List, call) {
            Some(StateData::List(items)) => items.clone(),
            _ => Vec::new(),
        }
    }

    pub(crate) fn list_append(&mut self, state: u32, item: &[u8]) {
        let mut items = self.stored_items(state, "state.list-append");
        items.push(self.stored(state, item));
        self.set_slot(
            state,
            StateKind::List,
            "state.list-append",
            Some(StateData::List(items)),
        );
    }

    pub(crate) fn list_set(&mut self, state: u32, items: &[Vec<u8>]) {
        self.check_state(state, StateKind::List, "state.list-set");
        let items: Vec<_> = items.iter().map(|i| self.stored(state, i)).collect();
        let v = (!items.is_empty()).then_some(StateData::List(items));
        self.set_slot(state, StateKind::List, "state.list-set", v);
    }

    /// The stored entries of the current key's map `state`.
    fn map(&self, state: u32, call: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
        match self.slot(state, StateKind::Map, call) {
            Some(StateData::Map(m)) => m.clone(),
            _ => BTreeMap::new(),
        }
    }

    pub(crate) fn map_get(&mut self, state: u32, key: &[u8]) -> Option<Vec<u8>> {
        self.check_state(state, StateKind::Map, "state.map-get");
        self.read(state, Some(key), "state.map-get");
        match self.slot(state, StateKind::Map, "state.map-get")? {
            StateData::Map(m) => m.get(key).map(|v| self.loaded(state, v)),
            _ => unreachable!(),
        }
    }

    pub(crate) fn map_put(&mut self, state: u32, key: &[u8], value: &[u8]) {
        let mut m = self.map(state, "state.map-put");
        m.insert(key.to_vec(), self.stored(state, value));
        self.set_slot(
            state,
            StateKind::Map,
            "state.map-put",
            Some(StateData::Map(m)),
        );
    }

    pub(crate) fn map_remove(&mut self, state: u32, key: &[u8]) {
        let mut m = self.map(state, "state.map-remove");
        m.remove(key);
        let v = (!m.is_empty()).then_some(StateData::Map(m));
        self.set_slot(state, StateKind::Map, "state.map-remove", v);
    }

    pub(crate) fn map_entries(&mut self, state: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.check_state(state, StateKind::Map, "state.map-entries");
        self.read(state, None, "state.map-entries");
        self.map(state, "state.map-entries")
            .into_iter()
            .map(|(k, v)| {
                let v = self.loaded(state, &v);
                (k, v)
            })
            .collect()
    }

    pub(crate) fn clear(&mut self, state: u32) {
        match self.states.get(state as usize) {
            Some(_) => {
                let key = self.key("state.clear").to_vec();
                self.remove_slot(&key, state);
            }
            None => {
                panic!("weir host: `state.clear` on undeclared state id {state} (the host traps)")
            }
        }
    }

    pub(crate) fn clear_all(&mut self) {
        let key = self.key("state.clear-all").to_vec();
        self.data.remove(&key);
    }

    /// The id the timer service knows `key` by (ids are never reused here).
    fn key_id(&mut self, key: &[u8]) -> KeyId {
        if let Some(&id) = self.key_ids.get(key) {
            return id;
        }
        let id = KeyId::try_from(self.key_bytes.len()).expect("fewer than 2^32 keys");
        self.key_bytes.push(key.to_vec());
        self.key_ids.insert(key.to_vec(), id);
        id
    }

    pub(crate) fn register_timer(&mut self, domain: TimeDomain, at: i64) {
        let key = self.key("timers.register").to_vec();
        let (id, domain) = (self.key_id(&key), host_domain(domain));
        if self.timers.register(domain, id, tie_order(&key), at) {
            self.pending_timers.insert((domain, at, id));
        }
    }

    pub(crate) fn delete_timer(&mut self, domain: TimeDomain, at: i64) {
        let key = self.key("timers.delete").to_vec();
        let (id, domain) = (self.key_id(&key), host_domain(domain));
        if self.timers.delete(domain, id, tie_order(&key), at) {
            self.pending_timers.remove(&(domain, at, id));
        }
    }

    /// Removes and returns the next timer of `domain` due at `upto`, in the engine's
    /// order. Processing-time timers due when the clock is read are taken as one group,
    /// as the engine does: one registered while they fire, even an earlier one, comes
    /// after them.
    pub(crate) fn pop_due_timer(
        &mut self,
        domain: TimeDomain,
        upto: i64,
    ) -> Option<(i64, Vec<u8>)> {
        let domain = host_domain(domain);
        let (at, id) = match domain {
            HostDomain::EventTime => self.timers.pop_event_due(upto)?,
            HostDomain::ProcessingTime if upto == i64::MAX => self.timers.pop_any_processing()?,
            HostDomain::ProcessingTime => self.timers.pop_processing_due(upto)?,
        };
        self.pending_timers.remove(&(domain, at, id));
        Some((at, self.key_bytes[id as usize].clone()))
    }

    /// Every pending timer: event-time ones first, each domain in firing order.
    pub(crate) fn pending_timers(&self) -> Vec<(Vec<u8>, TimeDomain, i64)> {
        let mut timers: Vec<_> = self
            .pending_timers
            .iter()
            .map(|&(domain, at, id)| {
                let key = &self.key_bytes[id as usize];
                (domain, at, tie_order(key), key.clone())
            })
            .collect();
        timers.sort();
        timers
            .into_iter()
            .map(|(domain, at, _, key)| {
                let domain = match domain {
                    HostDomain::EventTime => TimeDomain::EventTime,
                    HostDomain::ProcessingTime => TimeDomain::ProcessingTime,
                };
                (key, domain, at)
            })
            .collect()
    }

    pub(crate) fn has_state(&self, key: &[u8]) -> bool {
        self.data.contains_key(key)
    }

    fn state_id(&self, name: &str) -> Option<u32> {
        self.states
            .iter()
            .position(|(n, ..)| n == name)
            .map(|id| id as u32)
    }

    /// The stored bytes of value state `name` for `key` (without stamps).
    pub(crate) fn value_bytes(&self, key: &[u8], name: &str) -> Option<Vec<u8>> {
        let id = self.state_id(name)?;
        match self.data.get(key)?.get(&id)? {
            StateData::Value(bytes) => Some(self.loaded(id, bytes)),
            _ => None,
        }
    }

    /// Puts bytes into value state `name` for `key`, as another version would have left them.
    pub(crate) fn set_value_bytes(&mut self, key: &[u8], name: &str, bytes: Vec<u8>) {
        self.set_data(key, name, |w, id| StateData::Value(w.stored(id, &bytes)));
    }

    /// The stored items of list state `name` for `key`.
    pub(crate) fn list_bytes(&self, key: &[u8], name: &str) -> Vec<Vec<u8>> {
        let Some(id) = self.state_id(name) else {
            return Vec::new();
        };
        match self.data.get(key).and_then(|d| d.get(&id)) {
            Some(StateData::List(items)) => items.iter().map(|i| self.loaded(id, i)).collect(),
            _ => Vec::new(),
        }
    }

    /// The stored entries of map state `name` for `key`, in key byte order.
    pub(crate) fn map_bytes(&self, key: &[u8], name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some(id) = self.state_id(name) else {
            return Vec::new();
        };
        match self.data.get(key).and_then(|d| d.get(&id)) {
            Some(StateData::Map(map)) => map
                .iter()
                .map(|(k, v)| (k.clone(), self.loaded(id, v)))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Puts stored contents into state `name` for `key`, as another version would have
    /// left them (stamped now if the state has a time-to-live).
    fn set_data(&mut self, key: &[u8], name: &str, data: impl FnOnce(&Self, u32) -> StateData) {
        let id = self.state_id(name).expect("a declared state");
        let data = data(self, id);
        self.data.entry(key.to_vec()).or_default().insert(id, data);
    }

    /// Puts items into list state `name` for `key`, as another version would have left them.
    pub(crate) fn set_list_bytes(&mut self, key: &[u8], name: &str, items: Vec<Vec<u8>>) {
        self.set_data(key, name, |w, id| {
            StateData::List(items.iter().map(|i| w.stored(id, i)).collect())
        });
    }

    /// Puts entries into map state `name` for `key`, as another version would have left them.
    pub(crate) fn set_map_bytes(
        &mut self,
        key: &[u8],
        name: &str,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
    ) {
        self.set_data(key, name, |w, id| {
            StateData::Map(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), w.stored(id, v)))
                    .collect(),
            )
        });
    }

    pub(crate) fn keys_with_state(&self) -> Vec<Vec<u8>> {
        let mut keys: Vec<_> = self.data.keys().cloned().collect();
        keys.sort();
        keys
    }

    pub(crate) fn declare_output(&mut self, name: &str) -> Result<u32, String> {
        // Looking up a declared output is fine anywhere; declaring a new one only in init.
        if let Some(id) = self.outputs.iter().position(|n| n == name) {
            return Ok(id as u32);
        }
        if !matches!(self.phase, Phase::Init) {
            return Err(format!("output `{name}` must be declared in init"));
        }
        if name.is_empty() {
            return Err("an output needs a non-empty name".into());
        }
        self.outputs.push(name.to_owned());
        self.emitted.push(Vec::new());
        Ok((self.outputs.len() - 1) as u32)
    }

    pub(crate) fn emit(
        &mut self,
        output: u32,
        value: &[u8],
        key: Option<&[u8]>,
        timestamp: Option<i64>,
    ) {
        let default_ts = match &self.phase {
            Phase::Keyed { timestamp, .. } => *timestamp,
            _ => panic!(
                "weir host: `output.emit` called outside process_element/on_timer (the host traps)"
            ),
        };
        if output as usize >= self.outputs.len() {
            panic!("weir host: `output.emit` to undeclared output id {output} (the host traps)");
        }
        let value = serde_json::from_slice(value).unwrap_or_else(|e| {
            panic!(
                "weir host: output `{}` got a record that is not JSON ({e}): {}",
                self.outputs[output as usize],
                String::from_utf8_lossy(value)
            )
        });
        self.pending.push((
            output,
            Emitted {
                key: key.map(<[u8]>::to_vec),
                value,
                timestamp: timestamp.unwrap_or(default_ts),
            },
        ));
    }

    /// Ends a call: its records reach the outputs if it succeeded, and are dropped with
    /// it if it failed, as the host does.
    pub(crate) fn end_call(&mut self, succeeded: bool) {
        self.phase = Phase::Idle;
        for (output, record) in self.pending.drain(..) {
            if succeeded {
                self.emitted[output as usize].push(record);
            }
        }
    }

    fn output_id(&self, name: &str) -> usize {
        self.outputs
            .iter()
            .position(|n| n == name)
            .unwrap_or_else(|| {
                panic!(
                    "TestHost: output `{name}` was not declared; declared outputs: {:?}",
                    self.outputs
                )
            })
    }

    pub(crate) fn outputs(&self, name: &str) -> &[Emitted] {
        &self.emitted[self.output_id(name)]
    }

    pub(crate) fn take_outputs(&mut self, name: &str) -> Vec<Emitted> {
        let id = self.output_id(name);
        std::mem::take(&mut self.emitted[id])
    }

    pub(crate) fn log(&mut self, level: LogLevel, message: &str) {
        let key = match &self.phase {
            Phase::Keyed { key, .. } => Some(key.clone()),
            _ => None,
        };
        match &key {
            Some(k) => eprintln!("[{level:?}] key={}: {message}", String::from_utf8_lossy(k)),
            None => eprintln!("[{level:?}] {message}"),
        }
        self.logs.push(LogLine {
            level,
            key,
            message: message.to_owned(),
        });
    }
}

/// The engine's name for a time domain.
fn host_domain(domain: TimeDomain) -> HostDomain {
    match domain {
        TimeDomain::EventTime => HostDomain::EventTime,
        TimeDomain::ProcessingTime => HostDomain::ProcessingTime,
    }
}
