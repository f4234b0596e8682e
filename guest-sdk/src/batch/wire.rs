//! A batch's buffer in (its keys, their state and its entries) and its effects out, in
//! the layout of the `weir-wire` crate.

use crate::overlay::{Change, Contents, Op, Overlay, Slot};
use weir_wire::{Reader, SlotRef, WireError, Writer};

pub(super) struct KeyState<'b> {
    /// The host's number for the key (cached path only).
    pub(super) id: u32,
    pub(super) key: &'b [u8],
    /// `None`: the host says the cache's copy is current.
    pub(super) slots: Option<Vec<Slot>>,
    /// Whether the cache keeps the key after the batch (cached path).
    pub(super) keep: bool,
}

/// One decoded entry.
pub(super) enum Entry<'b> {
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

pub(super) struct Batch<'b> {
    /// The cache epoch the host vouches for (cached batches only).
    pub(super) epoch: Option<u64>,
    pub(super) processing_time: i64,
    pub(super) keys: Vec<KeyState<'b>>,
    pub(super) entries: Vec<Entry<'b>>,
}

/// Which of the two batch exports a buffer came through.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// `weir:udf/batch`: every key's state comes whole; nothing is kept.
    Plain,
    /// `weir:udf/cached-batch`: keys' state is kept between batches.
    Cached,
}

pub(super) fn decode_slots(r: &mut Reader<'_>, buf: &[u8]) -> Result<Vec<Slot>, WireError> {
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

pub(super) fn decode(buf: &[u8], path: Path) -> Result<Batch<'_>, WireError> {
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

/// The effects buffer. Every changed slot is written, whole or (cached path) as its
/// operations; a slot's change is cleared once written, so what the cache keeps is clean.
pub(super) fn encode(
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
