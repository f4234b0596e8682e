//! The host side of the batched call: encoding entries with the state of their keys,
//! and applying the effects the guest returns (layout in the `weir-wire` crate).
//!
//! On the cached path (`weir:udf/cached-batch`) a key's state is sent only when the
//! guest's copy is not current: [`KeyEntry::cached_in`](weir_core::state::KeyEntry::cached_in)
//! holds the cache epoch in which the guest last saw it, and every change to the state
//! outside a batch clears it.

use crate::runtime::{BatchEntry, HostServices, OutputId};
use std::collections::{BTreeMap, HashMap};
use weir_core::state::ttl::{self, stamped, unstamped};
use weir_core::state::{KeyId, Slot, StateKind, StateTtl};
use weir_core::time::timers::TimeDomain;
use weir_wire::{Reader, SlotRef, WireError, Writer};

/// The batch's keys, in the order their index is used in the buffer.
#[derive(Default)]
pub struct BatchKeys {
    ids: Vec<KeyId>,
    index: HashMap<KeyId, u32>,
    /// Per key (cached path): whether the guest keeps its copy after the batch.
    kept: Vec<bool>,
}

impl BatchKeys {
    fn index_of(&mut self, key: KeyId) -> u32 {
        *self.index.entry(key).or_insert_with(|| {
            self.ids.push(key);
            self.ids.len() as u32 - 1
        })
    }
}

/// Guest memory a cached key costs beyond its state's bytes (its cache entry, slots and
/// decoded value), counted against `state_cache`.
const GUEST_BYTES_PER_KEY: usize = 256;

/// An encoded batch: the buffer, its keys, and how many bytes of state it carries.
pub struct Encoded {
    pub buffer: Vec<u8>,
    pub keys: BatchKeys,
    /// Bytes of state (and key) sent; on the cached path the guest now keeps them.
    pub state_bytes: usize,
}

/// Encodes `entries` with the state of every key they touch; on the cached path (an
/// `epoch`), a key the guest holds a current copy of in that epoch goes without it.
pub fn encode(
    host: &HostServices,
    entries: &[BatchEntry<'_>],
    processing_time: i64,
    epoch: Option<u32>,
) -> Encoded {
    let mut keys = BatchKeys::default();
    let mut body = Writer::with_capacity(entries.len() * 96);
    for entry in entries {
        match *entry {
            BatchEntry::Element {
                element,
                key,
                watermark,
                watermark_after,
            } => {
                let index = keys.index_of(key);
                body.u8(weir_wire::ELEMENT);
                body.u32(index);
                body.u32(element.input);
                body.i64(element.timestamp);
                body.i64(watermark);
                body.i64(watermark_after);
                body.bytes(element.value);
            }
            BatchEntry::Timer {
                domain,
                timestamp,
                key,
                watermark,
            } => {
                let index = keys.index_of(key);
                body.u8(weir_wire::TIMER);
                body.u32(index);
                body.u8(domain_code(domain));
                body.i64(timestamp);
                body.i64(watermark);
            }
        }
    }
    let mut w = Writer::with_capacity(body.buf.len() + keys.ids.len() * 128 + 24);
    if let Some(epoch) = epoch {
        w.u64(u64::from(epoch));
    }
    w.i64(processing_time);
    w.u32(keys.ids.len() as u32);
    let mut state_bytes = 0;
    for &id in &keys.ids {
        let entry = host.keys.entry(id);
        if epoch.is_some() {
            w.u32(id);
        }
        w.bytes(entry.key());
        // A key's copy is kept from the second batch that touches it in an epoch on, so
        // that keys seen once (an order opened and closed, a one-off click) cost the
        // guest nothing; a key without state is sent empty rather than kept.
        let mut keep = false;
        if let Some(epoch) = epoch {
            let (seen_in, kept) = entry.cached_in();
            if seen_in == epoch && kept && entry.has_state() {
                w.u8(weir_wire::KEY_CACHED);
                keys.kept.push(true);
                continue;
            }
            keep = seen_in == epoch;
            w.u8(if keep {
                weir_wire::KEY_SENT
            } else {
                weir_wire::KEY_SENT_ONCE
            });
        }
        let start = w.buf.len();
        let count = w.placeholder();
        let mut n = 0;
        for (state, slot) in entry.slots() {
            w.u32(state);
            // A state with a time-to-live keeps a stamp in front of each entry: the guest
            // gets its own bytes.
            let stamped = host.states.ttl(state).is_some();
            fn cut(bytes: &[u8], stamped: bool) -> &[u8] {
                if stamped {
                    unstamped(bytes)
                } else {
                    bytes
                }
            }
            match slot {
                Slot::Value(v) => w.value_slot(cut(v, stamped)),
                Slot::List(items) => w.list_slot(items.iter().map(|i| cut(i, stamped))),
                Slot::Map(map) => {
                    w.map_slot(map.iter().map(|(k, v)| (k.as_slice(), cut(v, stamped))))
                }
            }
            n += 1;
        }
        w.patch_u32(count, n);
        keys.kept.push(keep || epoch.is_none());
        if keep {
            // What the guest spends on a key's copy beyond its bytes: its entry in the
            // cache, a slot per state, a decoded value's box (measured: ~250 bytes for a
            // one-value key of the order timeout).
            state_bytes += w.buf.len() - start + GUEST_BYTES_PER_KEY;
        }
    }
    w.u32(entries.len() as u32);
    w.buf.extend_from_slice(&body.buf);
    Encoded {
        buffer: w.buf,
        keys,
        state_bytes,
    }
}

fn domain_code(d: TimeDomain) -> u8 {
    match d {
        TimeDomain::EventTime => weir_wire::EVENT_TIME,
        TimeDomain::ProcessingTime => weir_wire::PROCESSING_TIME,
    }
}

/// An emitted record, borrowed from the effects buffer.
struct EmitRef<'a> {
    output: OutputId,
    timestamp: i64,
    key: Option<&'a [u8]>,
    value: &'a [u8],
}

/// One state write of a batch, borrowed from the effects buffer.
enum Write<'a> {
    Clear,
    Set(SlotRef<'a>),
    ListAppend(&'a [u8]),
    MapPut(&'a [u8], &'a [u8]),
    MapRemove(&'a [u8]),
    /// The state was read whole (time-to-live refreshed on read).
    Read,
    /// A map entry was read (time-to-live refreshed on read).
    MapRead(&'a [u8]),
}

/// What the guest's effects say, decoded and checked before anything is applied.
pub struct Effects<'a> {
    pub consumed: usize,
    /// Consumed timer entries that did not fire (the UDF deleted them first).
    pub skipped: usize,
    /// Each write with the time of the call that did it, if the guest said.
    writes: Vec<(KeyId, u32, Option<i64>, Write<'a>)>,
    timer_ops: Vec<(KeyId, TimeDomain, bool, i64)>,
    emits: Vec<EmitRef<'a>>,
    /// The bytes of every emitted key and value.
    pub emitted_bytes: usize,
    logs: Vec<(KeyId, u8, String)>,
}

/// Decodes and checks the effects buffer of a batch of `entries` over `keys`.
pub fn decode<'a>(
    host: &HostServices,
    keys: &BatchKeys,
    entries: usize,
    buf: &'a [u8],
) -> Result<Effects<'a>, String> {
    let bad = |e: WireError| e.to_string();
    let mut r = Reader::new(buf);
    let consumed = r.u32().map_err(bad)? as usize;
    if consumed == 0 || consumed > entries {
        return Err(format!(
            "the guest says it consumed {consumed} of {entries} entries"
        ));
    }
    let skipped = r.u32().map_err(bad)? as usize;
    let key = |index: u32| {
        keys.ids
            .get(index as usize)
            .copied()
            .ok_or("effects name a key outside the batch")
    };

    let mut writes = Vec::new();
    for _ in 0..r.count(9).map_err(bad)? {
        let k = key(r.u32().map_err(bad)?)?;
        let state = r.u32().map_err(bad)?;
        let Some((name, kind)) = host.states.get(state) else {
            return Err(format!(
                "effects write state id {state}, which was never declared"
            ));
        };
        let op = r.u8().map_err(bad)?;
        let at = match op & weir_wire::WRITE_AT {
            0 => None,
            _ => Some(r.i64().map_err(bad)?),
        };
        let write = match op & !weir_wire::WRITE_AT {
            weir_wire::WRITE_CLEAR => Write::Clear,
            weir_wire::WRITE_SET => Write::Set(r.slot().map_err(bad)?),
            weir_wire::WRITE_LIST_APPEND => Write::ListAppend(r.bytes().map_err(bad)?),
            weir_wire::WRITE_MAP_PUT => {
                Write::MapPut(r.bytes().map_err(bad)?, r.bytes().map_err(bad)?)
            }
            weir_wire::WRITE_MAP_REMOVE => Write::MapRemove(r.bytes().map_err(bad)?),
            weir_wire::WRITE_READ => Write::Read,
            weir_wire::WRITE_MAP_READ => Write::MapRead(r.bytes().map_err(bad)?),
            _ => return Err("unknown write op".into()),
        };
        let matches = match (&write, kind) {
            (Write::Clear | Write::Read, _) => true,
            (Write::Set(slot), kind) => matches!(
                (slot, kind),
                (SlotRef::Value(_), StateKind::Value)
                    | (SlotRef::List(_), StateKind::List)
                    | (SlotRef::Map(_), StateKind::Map)
            ),
            (Write::ListAppend(_), kind) => kind == StateKind::List,
            (Write::MapPut(..) | Write::MapRemove(_) | Write::MapRead(_), kind) => {
                kind == StateKind::Map
            }
        };
        if !matches {
            return Err(format!(
                "effects write state {name:?} as another kind than its {kind:?}"
            ));
        }
        writes.push((k, state, at, write));
    }

    let mut timer_ops = Vec::new();
    for _ in 0..r.count(14).map_err(bad)? {
        let k = key(r.u32().map_err(bad)?)?;
        let domain = match r.u8().map_err(bad)? {
            weir_wire::EVENT_TIME => TimeDomain::EventTime,
            weir_wire::PROCESSING_TIME => TimeDomain::ProcessingTime,
            _ => return Err("unknown timer domain".into()),
        };
        let register = match r.u8().map_err(bad)? {
            weir_wire::REGISTER => true,
            weir_wire::DELETE => false,
            _ => return Err("unknown timer op".into()),
        };
        timer_ops.push((k, domain, register, r.i64().map_err(bad)?));
    }

    let mut emits = Vec::new();
    let mut emitted_bytes = 0;
    for _ in 0..r.count(17).map_err(bad)? {
        let output = r.u32().map_err(bad)?;
        if output as usize >= host.outputs.len() {
            return Err(format!(
                "effects emit to output id {output}, which was never declared"
            ));
        }
        let timestamp = r.i64().map_err(bad)?;
        let key = match r.u8().map_err(bad)? {
            0 => None,
            _ => Some(r.bytes().map_err(bad)?),
        };
        let value = r.bytes().map_err(bad)?;
        emitted_bytes += value.len() + key.map_or(0, <[u8]>::len);
        emits.push(EmitRef {
            output,
            timestamp,
            key,
            value,
        });
    }

    let mut logs = Vec::new();
    for _ in 0..r.count(9).map_err(bad)? {
        let k = key(r.u32().map_err(bad)?)?;
        let level = r.u8().map_err(bad)?;
        logs.push((
            k,
            level,
            String::from_utf8_lossy(r.bytes().map_err(bad)?).into_owned(),
        ));
    }
    if !r.is_empty() {
        return Err("trailing bytes after the effects".into());
    }
    Ok(Effects {
        consumed,
        skipped,
        writes,
        timer_ops,
        emits,
        emitted_bytes,
        logs,
    })
}

/// Applies checked effects to the host services. The consumed timer entries are
/// removed first, as if they had been popped when they fired, so that a timer the UDF
/// registers again afterwards is a new one. On the cached path every key of the batch
/// is then marked as current in the guest's `epoch`.
pub fn apply(
    host: &mut HostServices,
    effects: Effects,
    entries: &[BatchEntry<'_>],
    keys: &BatchKeys,
    udf: &str,
    epoch: Option<u32>,
    processing_time: i64,
) {
    for entry in &entries[..effects.consumed] {
        if let BatchEntry::Timer {
            domain,
            timestamp,
            key,
            ..
        } = *entry
        {
            host.timer_for(key, domain, timestamp, false);
        }
    }
    // The time of the last entry the guest consumed: the stamp of a write to a state with
    // a time-to-live that comes without its own (an SDK that does not send them).
    let last = |domain| {
        let entry = entries[..effects.consumed].last();
        match (domain, entry) {
            (TimeDomain::ProcessingTime, _) | (_, None) => processing_time,
            (
                _,
                Some(BatchEntry::Element {
                    element, watermark, ..
                }),
            ) => element.timestamp.max(*watermark),
            (_, Some(BatchEntry::Timer { watermark, .. })) => *watermark,
        }
    };
    for (key, state, at, write) in effects.writes {
        let ttl = host.states.ttl(state);
        let stamp = ttl.map(|ttl| at.unwrap_or_else(|| last(ttl.domain)));
        apply_write(host, key, state, ttl.zip(stamp), write);
    }
    if let Some(epoch) = epoch {
        for (&key, &kept) in keys.ids.iter().zip(&keys.kept) {
            host.keys.mark_cached_in(key, epoch, kept);
        }
    }
    for (key, domain, register, at) in effects.timer_ops {
        host.timer_for(key, domain, at, register);
    }
    for e in effects.emits {
        host.emitted.push(e.output, e.key, e.value, e.timestamp);
    }
    for (key, level, message) in effects.logs {
        super::imports::log(udf, host.keys.entry(key).key(), level, &message);
    }
    for &key in &keys.ids {
        host.keys.release_if_unused(key);
    }
}

/// Applies one write of a batch to `key`'s `state`. For a state with a time-to-live
/// (`ttl`, with the stamp of the call that did the write) what it writes is stamped, a
/// read restamps what it read if reads refresh the time-to-live, and the key is listed
/// for the expiry of what it stamped.
fn apply_write(
    host: &mut HostServices,
    key: KeyId,
    state: u32,
    ttl: Option<(StateTtl, i64)>,
    write: Write<'_>,
) {
    let stored = |bytes: &[u8]| match ttl {
        Some((_, stamp)) => stamped(stamp, bytes),
        None => bytes.to_vec(),
    };
    let entry = host.keys.entry_mut(key);
    match write {
        Write::Clear => entry.clear(state),
        // Reuse the value's buffer: most writes replace a value of the same size.
        Write::Set(SlotRef::Value(v)) if ttl.is_none() => match entry.slot_mut(state) {
            Some(Slot::Value(old)) => {
                old.clear();
                old.extend_from_slice(v);
            }
            _ => entry.set_slot(state, Slot::Value(v.to_vec())),
        },
        Write::Set(SlotRef::Value(v)) => entry.set_slot(state, Slot::Value(stored(v))),
        Write::Set(SlotRef::List(items)) => {
            entry.set_slot(state, Slot::List(items.into_iter().map(stored).collect()))
        }
        Write::Set(SlotRef::Map(pairs)) => {
            let map = pairs.into_iter().map(|(k, v)| (k.to_vec(), stored(v)));
            entry.set_slot(state, Slot::Map(map.collect::<BTreeMap<_, _>>()))
        }
        Write::ListAppend(item) => match entry.slot_or_insert(state, || Slot::List(Vec::new())) {
            Slot::List(items) => items.push(stored(item)),
            _ => unreachable!("checked against the state's kind"),
        },
        Write::MapPut(k, v) => match entry.slot_or_insert(state, || Slot::Map(BTreeMap::new())) {
            Slot::Map(map) => {
                map.insert(k.to_vec(), stored(v));
            }
            _ => unreachable!("checked against the state's kind"),
        },
        Write::MapRemove(k) => {
            let now_empty = match entry.slot_mut(state) {
                Some(Slot::Map(map)) => {
                    map.remove(k);
                    map.is_empty()
                }
                _ => false,
            };
            if now_empty {
                entry.clear(state);
            }
        }
        // Reads matter only to a time-to-live refreshed on read.
        Write::Read | Write::MapRead(_) => match ttl {
            Some((ttl, stamp)) if ttl.refreshed_on_read() => {
                let map_key = match write {
                    Write::MapRead(k) => Some(k),
                    _ => None,
                };
                if let Some(slot) = entry.slot_mut(state) {
                    ttl::restamp_read(slot, map_key, stamp);
                }
            }
            _ => return,
        },
    }
    if let Some((ttl, stamp)) = ttl {
        host.keys
            .schedule_expiry(key, ttl.domain, ttl.expiry(stamp));
    }
}
