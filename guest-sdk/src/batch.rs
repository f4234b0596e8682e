//! The batched path (`weir:udf/batch`): many elements and timers per component call.
//!
//! The host sends a run of entries with the state of every key they touch (layout in
//! the `weir-wire` crate). While the batch runs, an [`Overlay`] is installed and every
//! backend call (state, timers, outputs, logs) acts on it instead of crossing the
//! component boundary. The UDF's own code is the same per-element and per-timer code;
//! only where its calls go changes. At the end the overlay becomes the effects buffer.
//!
//! On the cached path (`weir:udf/cached-batch`) the state of the batch's keys outlives
//! the batch: the overlay takes each key's slots out of the [`Cache`] (or from the
//! buffer, when the host sends them), and puts them back when the batch succeeds, with
//! the values the UDF kept decoded (`ValueState::modify`) still decoded. The host's copy
//! is kept current by the batch's writes: whole values, or the operations applied to
//! lists and maps. A failed batch leaves its keys out of the cache; the host then starts
//! a new epoch, and the guest drops the rest.
//!
//! Timer semantics stay the host's: a timer the batch registers that becomes due inside
//! the batch ends the batch right there, so the host fires it in order; a timer entry
//! still ahead in the batch that the UDF deletes is skipped, and registering it again
//! is a no-op, exactly as if the host held it.

use crate::host_calls::{CachedValue, ValueView};
use crate::{Context, Element, LogLevel, ProcessFunction, StateTtl, TimeDomain, Timer};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;
use std::rc::Rc;
use weir_wire::{Reader, SlotRef, WireError, Writer};

thread_local! {
    static OVERLAY: RefCell<Option<Overlay>> = const { RefCell::new(None) };
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
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

/// The state of the keys of earlier cached batches of one epoch, by the host's number
/// for each key.
#[derive(Default)]
struct Cache {
    epoch: u64,
    keys: HashMap<u32, Vec<Slot>, BuildHasherDefault<EntryHasher>>,
}

/// Runs `f` on the installed overlay, or returns `None` outside a batch.
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(&mut Overlay) -> R) -> Option<R> {
    OVERLAY.with_borrow_mut(|overlay| overlay.as_mut().map(f))
}

/// One state of one key, as the batch sees it.
enum Contents {
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
enum Change {
    Clean,
    /// Written whole (for a state with a time-to-live: only a value state, at `stamp`).
    Replaced,
    /// Changed only by these list and map operations (cached path, or any state with a
    /// time-to-live), in order, each with the time of the call that did it.
    Ops(Vec<(Op, i64)>),
}

enum Op {
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
const MAX_OPS: usize = 32;

struct Slot {
    state: u32,
    contents: Contents,
    change: Change,
    /// A value state with a time-to-live: the time of the call that last wrote (or,
    /// refreshed on read, read) it.
    stamp: i64,
}

impl Slot {
    fn new(state: u32, contents: Contents) -> Self {
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

struct KeyState<'b> {
    /// The host's number for the key (cached path only).
    id: u32,
    key: &'b [u8],
    /// `None`: the host says the cache's copy is current.
    slots: Option<Vec<Slot>>,
    /// Whether the cache keeps the key after the batch (cached path).
    keep: bool,
}

/// The guest-side view of host state and the effects of the batch so far.
pub(crate) struct Overlay {
    /// Slots per batch key index (the key bytes stay in the batch buffer).
    slots: Vec<Vec<Slot>>,
    current: usize,
    timestamp: i64,
    watermark: i64,
    processing_time: i64,
    /// The batch buffer, which `Contents::Stored` values point into.
    buf: Rc<Vec<u8>>,
    /// Whether a failed `modify` may have changed a kept value in place: the batch must
    /// fail, to be run again one call at a time.
    tainted: bool,
    /// Timer entries not processed yet: (key, domain, time) -> entry index.
    pending: HashMap<(u32, u8, i64), usize, BuildHasherDefault<EntryHasher>>,
    /// How many of those each key has, so most timer calls skip the map.
    pending_per_key: Vec<u32>,
    skipped: Vec<bool>,
    /// The earliest event-time timer this batch registered, if it registered one.
    earliest_registered: Option<i64>,
    /// The time-to-live of each state, by id (see [`declared`]).
    ttls: Vec<Option<StateTtl>>,
    timer_ops: Writer,
    timer_op_count: u32,
    emits: Writer,
    emit_count: u32,
    logs: Writer,
    log_count: u32,
}

fn domain_code(d: TimeDomain) -> u8 {
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

/// One decoded entry.
enum Entry<'b> {
    Element {
        key: u32,
        input: u32,
        timestamp: i64,
        watermark: i64,
        watermark_after: i64,
        value: &'b [u8],
    },
    Timer {
        key: u32,
        domain: u8,
        timestamp: i64,
        watermark: i64,
    },
}

struct Batch<'b> {
    /// The cache epoch the host vouches for (cached batches only).
    epoch: Option<u64>,
    processing_time: i64,
    keys: Vec<KeyState<'b>>,
    entries: Vec<Entry<'b>>,
}

/// Which of the two batch exports a buffer came through.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// `weir:udf/batch`: every key's state comes whole; nothing is kept.
    Plain,
    /// `weir:udf/cached-batch`: keys' state is kept between batches.
    Cached,
}

fn decode_slots(r: &mut Reader<'_>, buf: &[u8]) -> Result<Vec<Slot>, WireError> {
    let n_slots = r.count(5)?;
    let mut slots = Vec::with_capacity(n_slots);
    for _ in 0..n_slots {
        let state = r.u32()?;
        let contents = match r.slot()? {
            SlotRef::Value(v) => {
                let start = v.as_ptr() as usize - buf.as_ptr() as usize;
                Contents::Stored(start..start + v.len())
            }
            SlotRef::List(items) => Contents::List(items.into_iter().map(<[u8]>::to_vec).collect()),
            SlotRef::Map(entries) => Contents::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .collect(),
            ),
        };
        slots.push(Slot::new(state, contents));
    }
    Ok(slots)
}

fn decode(buf: &[u8], path: Path) -> Result<Batch<'_>, WireError> {
    let mut r = Reader::new(buf);
    let epoch = match path {
        Path::Plain => None,
        Path::Cached => Some(r.u64()?),
    };
    let processing_time = r.i64()?;
    let n_keys = r.count(5)?;
    let mut keys = Vec::with_capacity(n_keys);
    for _ in 0..n_keys {
        let id = match path {
            Path::Plain => 0,
            Path::Cached => r.u32()?,
        };
        let key = r.bytes()?;
        let (slots, keep) = match path {
            Path::Plain => (Some(decode_slots(&mut r, buf)?), false),
            Path::Cached => match r.u8()? {
                weir_wire::KEY_CACHED => (None, true),
                weir_wire::KEY_SENT => (Some(decode_slots(&mut r, buf)?), true),
                weir_wire::KEY_SENT_ONCE => (Some(decode_slots(&mut r, buf)?), false),
                _ => return Err(WireError("unknown key tag")),
            },
        };
        keys.push(KeyState {
            id,
            key,
            slots,
            keep,
        });
    }
    let n_entries = r.count(21)?;
    let mut entries = Vec::with_capacity(n_entries);
    for _ in 0..n_entries {
        let entry = match r.u8()? {
            weir_wire::ELEMENT => Entry::Element {
                key: r.u32()?,
                input: r.u32()?,
                timestamp: r.i64()?,
                watermark: r.i64()?,
                watermark_after: r.i64()?,
                value: r.bytes()?,
            },
            weir_wire::TIMER => Entry::Timer {
                key: r.u32()?,
                domain: r.u8()?,
                timestamp: r.i64()?,
                watermark: r.i64()?,
            },
            _ => return Err(WireError("unknown entry tag")),
        };
        let key = match entry {
            Entry::Element { key, .. } | Entry::Timer { key, .. } => key,
        };
        if key as usize >= keys.len() {
            return Err(WireError("entry names a key outside the batch"));
        }
        entries.push(entry);
    }
    Ok(Batch {
        epoch,
        processing_time,
        keys,
        entries,
    })
}

/// The slots of the batch's keys: sent ones from the buffer, the others taken out of
/// the cache (which is emptied first if the host's epoch is not the cache's).
fn take_slots(keys: &[KeyState<'_>], epoch: Option<u64>) -> Result<Vec<Vec<Slot>>, WireError> {
    let Some(epoch) = epoch else {
        return Ok(keys.iter().map(|_| Vec::new()).collect());
    };
    CACHE.with_borrow_mut(|cache| {
        if cache.epoch != epoch {
            cache.keys.clear();
            cache.epoch = epoch;
        }
        keys.iter()
            .map(|k| match k.slots {
                Some(_) => {
                    cache.keys.remove(&k.id);
                    Ok(Vec::new())
                }
                None => cache.keys.remove(&k.id).ok_or(WireError(
                    "the host says a key is cached that the guest does not hold",
                )),
            })
            .collect()
    })
}

/// Runs a batch through `udf`; returns the encoded effects, or the first error.
pub(crate) fn run<T: ProcessFunction>(
    udf: &mut T,
    inputs: &[String],
    buf: Vec<u8>,
    path: Path,
) -> anyhow::Result<Vec<u8>> {
    let buf = Rc::new(buf);
    let Batch {
        epoch,
        processing_time,
        mut keys,
        entries,
    } = decode(&buf, path)?;
    let mut slots = take_slots(&keys, epoch)?;
    for (key, slots) in keys.iter_mut().zip(&mut slots) {
        if let Some(sent) = key.slots.take() {
            *slots = sent;
        }
    }
    let key_count = keys.len();
    let mut pending = HashMap::default();
    let mut pending_per_key = vec![0; key_count];
    for (index, entry) in entries.iter().enumerate() {
        if let Entry::Timer {
            key,
            domain,
            timestamp,
            ..
        } = *entry
        {
            pending.insert((key, domain, timestamp), index);
            pending_per_key[key as usize] += 1;
        }
    }
    let key_bytes: Vec<&[u8]> = keys.iter().map(|k| k.key).collect();
    let kept: Vec<(u32, bool)> = keys.iter().map(|k| (k.id, k.keep)).collect();
    let overlay = Overlay {
        buf: Rc::clone(&buf),
        tainted: false,
        slots,
        current: 0,
        timestamp: 0,
        watermark: i64::MIN,
        processing_time,
        pending,
        pending_per_key,
        skipped: vec![false; entries.len()],
        earliest_registered: None,
        ttls: TTLS.with_borrow(Clone::clone),
        timer_ops: Writer::with_capacity(entries.len() * 14),
        timer_op_count: 0,
        emits: Writer::with_capacity(entries.len() * 64),
        emit_count: 0,
        logs: Writer::new(),
        log_count: 0,
    };
    OVERLAY.with_borrow_mut(|o| *o = Some(overlay));
    let result = run_entries(udf, inputs, &key_bytes, &entries);
    let mut overlay = OVERLAY
        .with_borrow_mut(Option::take)
        .expect("installed above");
    let consumed = result?;
    anyhow::ensure!(
        !overlay.tainted,
        "a failed ValueState::modify may have changed the value it was given"
    );
    let skipped = overlay.skipped[..consumed as usize]
        .iter()
        .filter(|s| **s)
        .count() as u32;
    let effects = encode(consumed, skipped, &mut overlay, path)?;
    if path == Path::Cached {
        let Overlay { slots, buf, .. } = overlay;
        CACHE.with_borrow_mut(|cache| {
            for (&(id, keep), mut slots) in kept.iter().zip(slots) {
                slots.retain(|s| !matches!(s.contents, Contents::Absent));
                // A key without state is never said to be cached: nothing to keep.
                if !keep || slots.is_empty() {
                    continue;
                }
                for slot in &mut slots {
                    if let Contents::Stored(range) = &slot.contents {
                        slot.contents = Contents::Value(buf[range.clone()].to_vec());
                    }
                }
                cache.keys.insert(id, slots);
            }
        });
    }
    Ok(effects)
}

fn run_entries<T: ProcessFunction>(
    udf: &mut T,
    inputs: &[String],
    keys: &[&[u8]],
    entries: &[Entry<'_>],
) -> anyhow::Result<u32> {
    // The watermark the entries so far said the batch is at.
    let mut seen_watermark = i64::MIN;
    for (index, entry) in entries.iter().enumerate() {
        if with(|o| o.skipped[index]).unwrap_or(false) {
            continue;
        }
        let before = match *entry {
            Entry::Element { watermark, .. } | Entry::Timer { watermark, .. } => watermark,
        };
        // The watermark moved on between entries (another shard's elements, which are
        // not in the batch): a timer registered here that this made due fires before
        // this entry. Stop, and let the host fire it and send the rest again.
        if index > 0
            && before > seen_watermark
            && with(|o| o.earliest_registered.is_some_and(|e| e <= before)).unwrap_or(false)
        {
            return Ok(index as u32);
        }
        let due_after = match *entry {
            Entry::Element {
                key,
                input,
                timestamp,
                watermark,
                watermark_after,
                value,
            } => {
                let input_name = inputs.get(input as usize).ok_or_else(|| {
                    anyhow::anyhow!(
                        "element from input #{input}, but only {} are connected",
                        inputs.len()
                    )
                })?;
                with(|o| {
                    o.current = key as usize;
                    o.timestamp = timestamp;
                    o.watermark = watermark;
                });
                let element = Element::new(input_name, input, keys[key as usize], value, timestamp);
                let mut ctx = Context::new(keys[key as usize], timestamp);
                // An error ends the batch, a rejection too: the host runs its entries
                // again one call at a time, where a rejection is the import.
                udf.process_element(&mut ctx, &element)?;
                watermark_after
            }
            Entry::Timer {
                key,
                domain,
                timestamp,
                watermark,
            } => {
                with(|o| {
                    if o.pending.remove(&(key, domain, timestamp)).is_some() {
                        o.pending_per_key[key as usize] -= 1;
                    }
                    o.current = key as usize;
                    o.timestamp = timestamp;
                    o.watermark = watermark;
                });
                let domain = if domain == weir_wire::EVENT_TIME {
                    TimeDomain::EventTime
                } else {
                    TimeDomain::ProcessingTime
                };
                let timer = Timer::new(domain, timestamp, keys[key as usize]);
                let mut ctx = Context::new(keys[key as usize], timestamp);
                udf.on_timer(&mut ctx, &timer)?;
                watermark
            }
        };
        // A timer registered here that is already due must fire before anything after
        // this entry: stop, and let the host fire it and send the rest again.
        // (None registered: nothing to fire, also at the end of input's watermark, the
        // largest there is.)
        if with(|o| o.earliest_registered.is_some_and(|e| e <= due_after)).unwrap_or(false) {
            return Ok(index as u32 + 1);
        }
        seen_watermark = due_after;
    }
    Ok(entries.len() as u32)
}

/// The effects buffer. Every changed slot is written, whole or (cached path) as its
/// operations; a slot's change is cleared once written, so what the cache keeps is clean.
fn encode(
    consumed: u32,
    skipped: u32,
    overlay: &mut Overlay,
    path: Path,
) -> anyhow::Result<Vec<u8>> {
    let mut w = Writer::with_capacity(64 + overlay.emits.buf.len() + overlay.timer_ops.buf.len());
    w.u32(consumed);
    w.u32(skipped);
    let writes = w.placeholder();
    let mut n_writes = 0;
    let buf = &overlay.buf;
    let ttls = &overlay.ttls;
    for (key, slots) in overlay.slots.iter_mut().enumerate() {
        for slot in slots.iter_mut() {
            let ttl = ttls.get(slot.state as usize).copied().flatten().is_some();
            // A write to a state with a time-to-live says when it was done.
            let op = |w: &mut Writer, op: u8, at: i64| {
                if ttl {
                    w.u8(op | weir_wire::WRITE_AT);
                    w.i64(at);
                } else {
                    w.u8(op);
                }
            };
            match std::mem::replace(&mut slot.change, Change::Clean) {
                Change::Clean => continue,
                Change::Ops(ops) if path == Path::Cached || ttl => {
                    for (o, at) in ops {
                        w.u32(key as u32);
                        w.u32(slot.state);
                        match o {
                            Op::Append(item) => {
                                op(&mut w, weir_wire::WRITE_LIST_APPEND, at);
                                w.bytes(&item);
                            }
                            Op::Put(k, v) => {
                                op(&mut w, weir_wire::WRITE_MAP_PUT, at);
                                w.bytes(&k);
                                w.bytes(&v);
                            }
                            Op::Remove(k) => {
                                op(&mut w, weir_wire::WRITE_MAP_REMOVE, at);
                                w.bytes(&k);
                            }
                            Op::Clear => op(&mut w, weir_wire::WRITE_CLEAR, at),
                            Op::Read => op(&mut w, weir_wire::WRITE_READ, at),
                            Op::ReadKey(k) => {
                                op(&mut w, weir_wire::WRITE_MAP_READ, at);
                                w.bytes(&k);
                            }
                        }
                        n_writes += 1;
                    }
                    continue;
                }
                Change::Ops(_) | Change::Replaced => {}
            }
            w.u32(key as u32);
            w.u32(slot.state);
            let at = slot.stamp;
            match &slot.contents {
                Contents::Absent => op(&mut w, weir_wire::WRITE_CLEAR, at),
                Contents::Value(v) => {
                    op(&mut w, weir_wire::WRITE_SET, at);
                    w.value_slot(v);
                }
                Contents::Stored(range) => {
                    op(&mut w, weir_wire::WRITE_SET, at);
                    w.value_slot(&buf[range.clone()]);
                }
                Contents::Decoded(value) => {
                    // Encoded straight into the effects buffer: no copy of a big value.
                    let value = value.as_ref().expect("handed back before the call ended");
                    op(&mut w, weir_wire::WRITE_SET, at);
                    w.u8(0);
                    let length = w.placeholder();
                    w.buf = value.encode_into(std::mem::take(&mut w.buf))?;
                    let written = w.buf.len() - length - 4;
                    w.patch_u32(length, written as u32);
                }
                Contents::List(items) => {
                    op(&mut w, weir_wire::WRITE_SET, at);
                    w.list_slot(items.iter().map(Vec::as_slice));
                }
                Contents::Map(map) => {
                    op(&mut w, weir_wire::WRITE_SET, at);
                    w.map_slot(map.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
                }
            }
            n_writes += 1;
        }
    }
    w.patch_u32(writes, n_writes);
    w.u32(overlay.timer_op_count);
    w.buf.extend_from_slice(&overlay.timer_ops.buf);
    w.u32(overlay.emit_count);
    w.buf.extend_from_slice(&overlay.emits.buf);
    w.u32(overlay.log_count);
    w.buf.extend_from_slice(&overlay.logs.buf);
    Ok(w.buf)
}

/// Hashes the small integers that name pending timer entries and cached keys. They come
/// from the host, not from record data, so a fast non-keyed hash is enough (std's
/// SipHash showed up in profiles).
#[derive(Default)]
struct EntryHasher(u64);

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
