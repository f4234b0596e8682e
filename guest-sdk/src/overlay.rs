//! The batch overlay ([`Overlay`]): the guest-side view of a batch's keys' state and of
//! the effects the batch has had so far, which every backend call acts on while a batch
//! runs (see the `batch` module).

use crate::host_calls::LogLevel;
use crate::host_calls::{CachedValue, ValueView};
use crate::time::TimeDomain;
use crate::ttl::StateTtl;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;
use std::rc::Rc;
use weir_wire::Writer;

thread_local! {
    static OVERLAY: RefCell<Option<Overlay>> = const { RefCell::new(None) };
    /// The time-to-live of each declared state, by id, as the UDF declared it.
    static TTLS: RefCell<Vec<Option<StateTtl>>> = const { RefCell::new(Vec::new()) };
}

/// Records the time-to-live `state` was declared with, so that batches stamp its writes
/// and report its reads. The backend calls this on every declaration.
pub(crate) fn declared(state: u32, ttl: Option<StateTtl>) {
    TTLS.with_borrow_mut(|ttls| {
        let index = state as usize;
        if ttls.len() <= index {
            ttls.resize(index + 1, None);
        }
        ttls[index] = ttl;
    });
}

/// The time-to-live of each state declared so far, by id, for a batch's overlay.
pub(crate) fn declared_ttls() -> Vec<Option<StateTtl>> {
    TTLS.with_borrow(Clone::clone)
}

/// Runs `f` on the installed overlay, or returns `None` outside a batch.
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(&mut Overlay) -> R) -> Option<R> {
    OVERLAY.with_borrow_mut(|overlay| overlay.as_mut().map(f))
}

/// Installs `overlay` for the batch about to run: every backend call acts on it.
pub(crate) fn install(overlay: Overlay) {
    OVERLAY.with_borrow_mut(|o| *o = Some(overlay));
}

/// Takes the installed overlay out once its batch ran.
pub(crate) fn take() -> Option<Overlay> {
    OVERLAY.with_borrow_mut(Option::take)
}

/// One state of one key, as the batch sees it.
pub(crate) enum Contents {
    Absent,
    /// A value still in the batch buffer, not copied unless it is read as owned.
    Stored(Range<usize>),
    Value(Vec<u8>),
    /// A value kept decoded (by `ValueState::modify`); `None` while the UDF has it.
    Decoded(Option<Box<dyn CachedValue>>),
    List(Vec<Vec<u8>>),
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

/// How a slot changed in this batch, which decides what its write to the host is.
pub(crate) enum Change {
    Clean,
    /// Written whole (for a state with a time-to-live: only a value state, at `stamp`).
    Replaced,
    /// Changed only by these list and map operations (cached path, or any state with a
    /// time-to-live), in order, each with the time of the call that did it.
    Ops(Vec<(Op, i64)>),
}

pub(crate) enum Op {
    Append(Vec<u8>),
    Put(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    /// Cleared (a state with a time-to-live; items appended after are stamped anew).
    Clear,
    /// Read whole (a time-to-live refreshed on read).
    Read,
    /// One map entry read (a time-to-live refreshed on read).
    ReadKey(Vec<u8>),
}

/// Past this many operations a slot is written whole.
pub(crate) const MAX_OPS: usize = 32;

pub(crate) struct Slot {
    pub(crate) state: u32,
    pub(crate) contents: Contents,
    pub(crate) change: Change,
    /// A value state with a time-to-live: the time of the call that last wrote (or,
    /// refreshed on read, read) it.
    pub(crate) stamp: i64,
}

impl Slot {
    pub(crate) fn new(state: u32, contents: Contents) -> Self {
        Slot {
            state,
            contents,
            change: Change::Clean,
            stamp: i64::MIN,
        }
    }

    fn replaced(&mut self, contents: Contents) {
        self.contents = contents;
        self.change = Change::Replaced;
    }

    /// Records an operation done at `at`. Without a time-to-live, past [`MAX_OPS`] the
    /// slot is written whole instead; with one, every operation is kept, so that each
    /// item and entry is stamped with its own time.
    fn op(&mut self, op: Op, at: i64, ttl: bool) {
        match &mut self.change {
            Change::Clean => self.change = Change::Ops(vec![(op, at)]),
            Change::Ops(ops) if ttl || ops.len() < MAX_OPS => ops.push((op, at)),
            Change::Ops(_) => self.change = Change::Replaced,
            Change::Replaced => {}
        }
    }
}

/// The guest-side view of host state and the effects of the batch so far.
pub(crate) struct Overlay {
    /// Slots per batch key index (the key bytes stay in the batch buffer).
    pub(crate) slots: Vec<Vec<Slot>>,
    pub(crate) current: usize,
    pub(crate) timestamp: i64,
    pub(crate) watermark: i64,
    pub(crate) processing_time: i64,
    /// The batch buffer, which `Contents::Stored` values point into.
    pub(crate) buf: Rc<Vec<u8>>,
    /// Whether a failed `modify` may have changed a kept value in place: the batch must
    /// fail, to be run again one call at a time.
    pub(crate) tainted: bool,
    /// Timer entries not processed yet: (key, domain, time) -> entry index.
    pub(crate) pending: HashMap<(u32, u8, i64), usize, BuildHasherDefault<EntryHasher>>,
    /// How many of those each key has, so most timer calls skip the map.
    pub(crate) pending_per_key: Vec<u32>,
    pub(crate) skipped: Vec<bool>,
    /// The earliest event-time timer this batch registered, if it registered one.
    pub(crate) earliest_registered: Option<i64>,
    /// The time-to-live of each state, by id (see [`declared`]).
    pub(crate) ttls: Vec<Option<StateTtl>>,
    pub(crate) timer_ops: Writer,
    pub(crate) timer_op_count: u32,
    pub(crate) emits: Writer,
    pub(crate) emit_count: u32,
    pub(crate) logs: Writer,
    pub(crate) log_count: u32,
}

pub(crate) fn domain_code(d: TimeDomain) -> u8 {
    match d {
        TimeDomain::EventTime => weir_wire::EVENT_TIME,
        TimeDomain::ProcessingTime => weir_wire::PROCESSING_TIME,
    }
}

impl Overlay {
    fn slot(&mut self, state: u32) -> Option<&mut Slot> {
        self.slots[self.current]
            .iter_mut()
            .find(|s| s.state == state)
    }

    fn slot_or_absent(&mut self, state: u32) -> &mut Slot {
        let slots = &mut self.slots[self.current];
        let pos = match slots.iter().position(|s| s.state == state) {
            Some(pos) => pos,
            None => {
                slots.push(Slot::new(state, Contents::Absent));
                slots.len() - 1
            }
        };
        &mut slots[pos]
    }

    /// The time-to-live of `state`, if it has one.
    fn ttl(&self, state: u32) -> Option<StateTtl> {
        self.ttls.get(state as usize).copied().flatten()
    }

    /// The current call's time on the clock of `ttl`, as the host stamps entries: the
    /// element's or timer's timestamp or the watermark, whichever is later; or the
    /// batch's processing time.
    fn call_time(&self, ttl: &StateTtl) -> i64 {
        match ttl.domain() {
            TimeDomain::EventTime => self.timestamp.max(self.watermark),
            TimeDomain::ProcessingTime => self.processing_time,
        }
    }

    /// Records an operation on the current key's `state`, with the call's time if the
    /// state has a time-to-live.
    fn op(&mut self, state: u32, op: Op) {
        let ttl = self.ttl(state);
        let at = ttl.map_or(0, |ttl| self.call_time(&ttl));
        self.slot_or_absent(state).op(op, at, ttl.is_some());
    }

    /// A read of the current key's `state` (only its entry `map_key`, if given), which
    /// the host hears of if it refreshes the state's time-to-live.
    fn read(&mut self, state: u32, map_key: Option<&[u8]>) {
        let Some(ttl) = self.ttl(state).filter(StateTtl::is_refreshed_on_read) else {
            return;
        };
        let at = self.call_time(&ttl);
        let Some(slot) = self.slot(state) else { return };
        if matches!(slot.contents, Contents::Absent) {
            return;
        }
        match (&slot.change, map_key) {
            // A value written whole is stamped once, at its last write or read.
            (Change::Replaced, _) => slot.stamp = at,
            (_, Some(key)) => slot.op(Op::ReadKey(key.to_vec()), at, true),
            (_, None) => {
                slot.stamp = at;
                slot.op(Op::Read, at, true);
            }
        }
    }

    /// Replaces the current key's `state` whole. For a list or map with a time-to-live
    /// this is a clear and the items appended again, each stamped now.
    fn set(&mut self, state: u32, contents: Contents) {
        let Some(ttl) = self.ttl(state) else {
            self.slot_or_absent(state).replaced(contents);
            return;
        };
        let at = self.call_time(&ttl);
        let slot = self.slot_or_absent(state);
        match contents {
            Contents::List(items) => {
                slot.op(Op::Clear, at, true);
                for item in &items {
                    slot.op(Op::Append(item.clone()), at, true);
                }
                slot.contents = Contents::List(items);
            }
            Contents::Absent if !matches!(slot.change, Change::Replaced) => {
                slot.op(Op::Clear, at, true);
                slot.contents = Contents::Absent;
            }
            contents => {
                slot.stamp = at;
                slot.replaced(contents);
            }
        }
    }

    pub(crate) fn value_get(&mut self, state: u32) -> Option<Vec<u8>> {
        self.value_view(state, |view| match view {
            ValueView::Absent => None,
            ValueView::Bytes(bytes) => Some(bytes.to_vec()),
            // A decoded value always encodes: it was encoded once already, or built by
            // the UDF from a type that encodes (or its own write fails the batch).
            ValueView::Decoded(value) => value.encode().ok(),
        })
    }

    pub(crate) fn value_view<R>(&mut self, state: u32, f: impl FnOnce(ValueView<'_>) -> R) -> R {
        self.read(state, None);
        let slot = self.slots[self.current].iter().find(|s| s.state == state);
        let view = match slot.map(|s| &s.contents) {
            None | Some(Contents::Absent) => ValueView::Absent,
            Some(Contents::Value(v)) => ValueView::Bytes(v),
            Some(Contents::Stored(range)) => ValueView::Bytes(&self.buf[range.clone()]),
            Some(Contents::Decoded(Some(value))) => ValueView::Decoded(value.as_ref()),
            Some(Contents::Decoded(None)) => panic!("state #{state} is being modified"),
            Some(_) => panic!("state #{state} is not a value state"),
        };
        f(view)
    }

    pub(crate) fn value_set_owned(&mut self, state: u32, value: Vec<u8>) {
        self.set(state, Contents::Value(value));
    }

    pub(crate) fn value_set(&mut self, state: u32, value: &[u8]) {
        self.set(state, Contents::Value(value.to_vec()));
    }

    pub(crate) fn value_take(&mut self, state: u32) -> Option<Box<dyn CachedValue>> {
        self.read(state, None);
        match &mut self.slot(state)?.contents {
            Contents::Decoded(value) => value.take(),
            _ => None,
        }
    }

    pub(crate) fn value_keep(&mut self, state: u32, value: Box<dyn CachedValue>) {
        self.set(state, Contents::Decoded(Some(value)));
    }

    pub(crate) fn value_restore(&mut self, state: u32, value: Box<dyn CachedValue>, tainted: bool) {
        self.tainted |= tainted;
        self.slot_or_absent(state).contents = Contents::Decoded(Some(value));
    }

    pub(crate) fn list_get(&mut self, state: u32) -> Vec<Vec<u8>> {
        self.read(state, None);
        match self.slot(state).map(|s| &s.contents) {
            Some(Contents::List(items)) => items.clone(),
            None | Some(Contents::Absent) => Vec::new(),
            _ => panic!("state #{state} is not a list state"),
        }
    }

    pub(crate) fn list_append(&mut self, state: u32, item: &[u8]) {
        let slot = self.slot_or_absent(state);
        match &mut slot.contents {
            Contents::List(items) => items.push(item.to_vec()),
            Contents::Absent => slot.contents = Contents::List(vec![item.to_vec()]),
            _ => panic!("state #{state} is not a list state"),
        }
        self.op(state, Op::Append(item.to_vec()));
    }

    pub(crate) fn list_set(&mut self, state: u32, items: &[Vec<u8>]) {
        let contents = if items.is_empty() {
            Contents::Absent
        } else {
            Contents::List(items.to_vec())
        };
        self.set(state, contents);
    }

    pub(crate) fn map_get(&mut self, state: u32, key: &[u8]) -> Option<Vec<u8>> {
        let found = match &self.slot(state)?.contents {
            Contents::Map(map) => map.contains_key(key),
            _ => false,
        };
        if found {
            self.read(state, Some(key));
        }
        match &self.slot(state)?.contents {
            Contents::Map(map) => map.get(key).cloned(),
            Contents::Absent => None,
            _ => panic!("state #{state} is not a map state"),
        }
    }

    pub(crate) fn map_put(&mut self, state: u32, key: &[u8], value: &[u8]) {
        let slot = self.slot_or_absent(state);
        match &mut slot.contents {
            Contents::Map(map) => {
                map.insert(key.to_vec(), value.to_vec());
            }
            Contents::Absent => {
                slot.contents = Contents::Map(BTreeMap::from([(key.to_vec(), value.to_vec())]))
            }
            _ => panic!("state #{state} is not a map state"),
        }
        self.op(state, Op::Put(key.to_vec(), value.to_vec()));
    }

    pub(crate) fn map_remove(&mut self, state: u32, key: &[u8]) {
        let ttl = self.ttl(state).is_some();
        let Some(slot) = self.slot(state) else { return };
        let now_empty = match &mut slot.contents {
            Contents::Map(map) => {
                if map.remove(key).is_none() {
                    return;
                }
                map.is_empty()
            }
            Contents::Absent => return,
            _ => panic!("state #{state} is not a map state"),
        };
        if now_empty && !ttl {
            slot.replaced(Contents::Absent);
        } else {
            if now_empty {
                slot.contents = Contents::Absent;
            }
            slot.op(Op::Remove(key.to_vec()), 0, ttl);
        }
    }

    pub(crate) fn map_entries(&mut self, state: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.read(state, None);
        match self.slot(state).map(|s| &s.contents) {
            Some(Contents::Map(map)) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            None | Some(Contents::Absent) => Vec::new(),
            _ => panic!("state #{state} is not a map state"),
        }
    }

    pub(crate) fn clear(&mut self, state: u32) {
        self.set(state, Contents::Absent);
    }

    pub(crate) fn clear_all(&mut self) {
        let states: Vec<u32> = self.slots[self.current].iter().map(|s| s.state).collect();
        for state in states {
            self.set(state, Contents::Absent);
        }
    }

    pub(crate) fn register_timer(&mut self, domain: TimeDomain, at: i64) {
        let code = domain_code(domain);
        let key = self.current as u32;
        if self.pending_per_key[self.current] > 0 && self.pending.contains_key(&(key, code, at)) {
            return; // the host holds this timer (it is ahead in the batch): one timer
        }
        if domain == TimeDomain::EventTime {
            self.earliest_registered = Some(self.earliest_registered.map_or(at, |e| e.min(at)));
        }
        self.timer_op(key, code, weir_wire::REGISTER, at);
    }

    pub(crate) fn delete_timer(&mut self, domain: TimeDomain, at: i64) {
        let code = domain_code(domain);
        let key = self.current as u32;
        if self.pending_per_key[self.current] > 0 {
            if let Some(entry) = self.pending.remove(&(key, code, at)) {
                self.skipped[entry] = true;
                self.pending_per_key[self.current] -= 1;
            }
        }
        self.timer_op(key, code, weir_wire::DELETE, at);
    }

    fn timer_op(&mut self, key: u32, code: u8, op: u8, at: i64) {
        self.timer_ops.u32(key);
        self.timer_ops.u8(code);
        self.timer_ops.u8(op);
        self.timer_ops.i64(at);
        self.timer_op_count += 1;
    }

    pub(crate) fn current_watermark(&self) -> i64 {
        self.watermark
    }

    pub(crate) fn current_processing_time(&self) -> i64 {
        self.processing_time
    }

    pub(crate) fn emit(
        &mut self,
        output: u32,
        value: &[u8],
        key: Option<&[u8]>,
        timestamp: Option<i64>,
    ) {
        let copy = |buf: &mut Vec<u8>| {
            buf.extend_from_slice(value);
            Ok::<(), std::convert::Infallible>(())
        };
        let Ok(()) = self.emit_with(output, key, timestamp, copy);
    }

    pub(crate) fn emit_with<E>(
        &mut self,
        output: u32,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let w = &mut self.emits;
        let start = w.buf.len();
        w.u32(output);
        w.i64(timestamp.unwrap_or(self.timestamp));
        match key {
            Some(key) => {
                w.u8(1);
                w.bytes(key);
            }
            None => w.u8(0),
        }
        let length = w.placeholder();
        if let Err(e) = write(&mut w.buf) {
            w.buf.truncate(start);
            return Err(e);
        }
        let written = w.buf.len() - length - 4;
        w.patch_u32(length, written as u32);
        self.emit_count += 1;
        Ok(())
    }

    pub(crate) fn log(&mut self, level: LogLevel, message: &str) {
        self.logs.u32(self.current as u32);
        self.logs.u8(level as u8);
        self.logs.bytes(message.as_bytes());
        self.log_count += 1;
    }
}

/// Hashes the small integers that name pending timer entries and cached keys. They come
/// from the host, not from record data, so a fast non-keyed hash is enough (std's
/// SipHash showed up in profiles).
#[derive(Default)]
pub(crate) struct EntryHasher(u64);

impl Hasher for EntryHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_i64(&mut self, n: i64) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}
