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
mod wire;

pub(crate) use wire::Path;

use crate::context::{Context, Element, Timer};
// The trait stays at the crate root: guest backtraces name it `weir_sdk::ProcessFunction`.
use crate::overlay::{self, with, Contents, EntryHasher, Overlay, Slot};
use crate::time::TimeDomain;
use crate::ProcessFunction;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use weir_wire::{WireError, Writer};
use wire::{decode, encode, Batch, Entry, KeyState};

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// The state of the keys of earlier cached batches of one epoch, by the host's number
/// for each key.
#[derive(Default)]
struct Cache {
    epoch: u64,
    keys: HashMap<u32, Vec<Slot>, BuildHasherDefault<EntryHasher>>,
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
        ttls: overlay::declared_ttls(),
        timer_ops: Writer::with_capacity(entries.len() * 14),
        timer_op_count: 0,
        emits: Writer::with_capacity(entries.len() * 64),
        emit_count: 0,
        logs: Writer::new(),
        log_count: 0,
    };
    overlay::install(overlay);
    let result = run_entries(udf, inputs, &key_bytes, &entries);
    let mut overlay = overlay::take().expect("installed above");
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
