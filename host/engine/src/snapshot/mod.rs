//! The keyed-state section: keys with their slots and pending timers.
//!
//! A full section lists every live key; an incremental one lists the keys released since
//! the parent checkpoint (to remove) and then the keys changed since (whole, replacing
//! what the parent had). Restoring applies a full section and then each increment in
//! order. Keys travel as bytes and states by their index in the checkpoint's list of
//! declared states, so key ids and state ids are free to differ after a restart.
//!
//! The entries of a state with a time-to-live carry their stamps (see
//! `weir_core::state::ttl`); expired ones are removed before a checkpoint is taken. A
//! restore into a UDF that declares such a state with or without a time-to-live where
//! the checkpoint had the other adds or drops the stamps ([`RestoreTo`]).

mod parts;

pub use parts::{SetAside, HELD_BYTES};

use crate::runtime::HostServices;
use parts::{in_parts, EncodedParts, Parts};
use weir_core::codec::{Reader, Writer};
use weir_core::state::ttl;
use weir_core::state::{Key, KeyId, KeyTable, SavedKey, Slot, SlotSnapshot, StampChange, StateId};
use weir_core::time::timers::TimeDomain;
use weir_core::time::Timestamp;

const REMOVED: u8 = 0;
const PUT: u8 = 1;

/// The size past which a section's part ends (after the key's record that crosses it):
/// a checkpoint file is written and restored a part at a time.
pub const PART_BYTES: usize = 1 << 20;

/// Every live key: a base for later increments, as one block. Fails only if the `disk`
/// backend's store cannot be read. Reads the whole store on the calling thread: the run
/// takes [`begin_full`] instead.
pub fn encode_full(keys: &KeyTable) -> anyhow::Result<Vec<u8>> {
    begin_full(keys)?.encode()
}

/// A checkpoint's keyed section in two parts, one after the other: what the run
/// encodes when the checkpoint is taken (the keys in memory), and, with the `disk`
/// backend, the keys read later from a snapshot of the store taken at the same moment
/// (on the checkpoint writer's thread). So the run pauses for the keys in memory (the
/// cache), not for the store: a full checkpoint's dormant keys, or the keys an
/// increment has that changed and went dormant since. Both come in parts of about
/// [`PART_BYTES`], each a whole number of keys' records, which [`apply`] takes one at a
/// time. Of the parts encoded on the run's thread, those beyond [`HELD_BYTES`] wait in
/// a scratch file beside the store ([`SetAside`]).
pub struct KeyedSection {
    /// The parts encoded on the run's thread and held in memory.
    pub in_memory: Vec<Vec<u8>>,
    /// The parts the checkpoint writer hands on after them; `None` when there are none
    /// (always with the memory backend).
    pub later: Option<LaterParts>,
}

impl KeyedSection {
    /// A section of `encoded` parts, then the keys `in_store` lists.
    fn new(encoded: EncodedParts, in_store: Option<StoreKeys>) -> Self {
        let later = (encoded.set_aside.is_some() || in_store.is_some()).then(|| LaterParts {
            set_aside: encoded.set_aside,
            in_store,
        });
        Self {
            in_memory: encoded.held,
            later,
        }
    }

    /// The whole section as one block, read on the calling thread.
    pub fn encode(self) -> anyhow::Result<Vec<u8>> {
        let mut out = self.in_memory.concat();
        if let Some(later) = self.later {
            later.write_parts(&mut |part| {
                out.extend_from_slice(part);
                Ok(())
            })?;
        }
        Ok(out)
    }
}

/// The parts of a [`KeyedSection`] after those in memory: the ones set aside in a
/// scratch file, then the keys read from the store.
pub struct LaterParts {
    set_aside: Option<SetAside>,
    in_store: Option<StoreKeys>,
}

impl LaterParts {
    /// Hands `part` each part, in order. Called on the checkpoint writer's thread. Fails
    /// if the scratch file or the store cannot be read, or `part` fails.
    pub fn write_parts(
        self,
        part: &mut dyn FnMut(&[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        if let Some(set_aside) = self.set_aside {
            set_aside.write_parts(part)?;
        }
        match self.in_store {
            Some(in_store) => in_store.write_parts(part),
            None => Ok(()),
        }
    }
}

/// The keys of a section that are read from a snapshot of the store
/// ([`KeyedSection::later`]): every one it holds (a full checkpoint), or those listed
/// (an increment's).
struct StoreKeys {
    snapshot: Box<dyn SlotSnapshot>,
    listed: Option<Vec<Key>>,
}

impl StoreKeys {
    /// Reads the keys from the snapshot, handing `part` the rest of the section a part at
    /// a time (see [`KeyedSection`]). Called on the checkpoint writer's thread. Fails if
    /// the store cannot be read or `part` fails.
    fn write_parts(&self, part: &mut dyn FnMut(&[u8]) -> anyhow::Result<()>) -> anyhow::Result<()> {
        let mut done = |done: Vec<u8>| part(&done);
        let mut out = Parts::new(&mut done);
        match &self.listed {
            None => self.snapshot.for_each(&mut |key, saved| {
                put_saved(out.writer(), key, &saved);
                out.end_record()
            })?,
            Some(keys) => {
                for key in keys {
                    if let Some(saved) = self.snapshot.get(key)? {
                        put_saved(out.writer(), key, &saved);
                        out.end_record()?;
                    }
                }
            }
        }
        out.finish()
    }
}

/// Starts a full checkpoint of `keys` (see [`KeyedSection`]): every live key. Called on
/// the run's thread between runs of records; never reads the store. Fails only if the
/// parts beyond [`HELD_BYTES`] cannot be set aside.
pub fn begin_full(keys: &KeyTable) -> anyhow::Result<KeyedSection> {
    let encoded = in_parts(keys, |out| {
        for (id, _) in keys.iter() {
            put(out.writer(), keys, id);
            out.end_record()?;
        }
        Ok(())
    })?;
    let in_store = keys.store_snapshot().map(|snapshot| StoreKeys {
        snapshot,
        listed: None,
    });
    Ok(KeyedSection::new(encoded, in_store))
}

/// Starts an increment (see [`KeyedSection`]): the keys released and changed since the
/// last call ([`KeyTable::take_changes`]), those that went dormant since they changed
/// included (read from the store later). Called on the run's thread between runs of
/// records; never reads the store.
pub fn begin_changes(keys: &mut KeyTable) -> anyhow::Result<KeyedSection> {
    let (released, changed) = keys.take_changes();
    let dormant = keys.take_dormant_changes();
    let mut in_store = Vec::new();
    let encoded = in_parts(keys, |out| {
        for key in &released {
            out.writer().u8(REMOVED);
            out.writer().bytes(key);
            out.end_record()?;
        }
        let mut written = std::collections::HashSet::new();
        for id in changed {
            written.insert(id);
            put(out.writer(), keys, id);
            out.end_record()?;
        }
        // A key that went dormant and woke again is in memory, and written as it is now
        // (once); one still dormant is read from the store's snapshot; one released since
        // is gone (the snapshot has none of it), its removal written above.
        for key in dormant {
            match keys.find(&key) {
                Some(id) => {
                    if written.insert(id) {
                        put(out.writer(), keys, id);
                        out.end_record()?;
                    }
                }
                None => in_store.push(key),
            }
        }
        Ok(())
    })?;
    let in_store = match in_store.is_empty() {
        true => None,
        false => keys.store_snapshot().map(|snapshot| StoreKeys {
            snapshot,
            listed: Some(in_store),
        }),
    };
    Ok(KeyedSection::new(encoded, in_store))
}

/// Writes key `id` as it is in memory.
fn put(out: &mut Writer, keys: &KeyTable, id: KeyId) {
    let entry = keys.entry(id);
    put_key(
        out,
        entry.key(),
        entry.slots().collect(),
        keys.timers(id).collect(),
    );
}

/// Writes a dormant key as the store holds it.
fn put_saved(out: &mut Writer, key: &[u8], saved: &SavedKey) {
    let slots = saved
        .slots
        .iter()
        .map(|(state, slot)| (*state, slot))
        .collect();
    put_key(out, key, slots, saved.timers.clone());
}

/// Writes one key's record: its bytes, slots and timers.
fn put_key(
    out: &mut Writer,
    key: &[u8],
    slots: Vec<(StateId, &Slot)>,
    mut timers: Vec<(TimeDomain, Timestamp)>,
) {
    out.u8(PUT);
    out.bytes(key);
    out.u32(slots.len() as u32);
    for (state, slot) in slots {
        out.u32(state);
        slot.encode(out);
    }
    // In time order, so the same state always encodes to the same bytes.
    timers.sort_unstable();
    out.u32(timers.len() as u32);
    for (domain, at) in timers {
        out.u8(match domain {
            TimeDomain::EventTime => 0,
            TimeDomain::ProcessingTime => 1,
        });
        out.i64(at);
    }
}

/// Where a checkpointed state goes on restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreTo {
    /// The id the running UDF declared the state with.
    pub id: StateId,
    /// Whether its entries gain stamps (stamped now: the state has a time-to-live the
    /// checkpoint's had not) or lose them.
    pub stamps: StampChange,
}

impl From<StateId> for RestoreTo {
    fn from(id: StateId) -> Self {
        RestoreTo {
            id,
            stamps: StampChange::Unchanged,
        }
    }
}

/// Applies a section to `host`. `states[i]` says where the checkpoint's state `i` goes
/// (`None`: the UDF no longer declares it, so its slots are dropped). Each key is listed
/// for the expiry of its entries as it is applied.
pub fn apply(
    host: &mut HostServices,
    section: &[u8],
    states: &[Option<RestoreTo>],
) -> anyhow::Result<()> {
    apply_where(host, section, states, |_| true)
}

/// Applies the keys of a section for which `keep` says yes, and reads past the others:
/// a shard restoring a checkpoint takes only the keys of its key groups, whatever the
/// parallelism the checkpoint was taken at. Otherwise as [`apply`].
pub fn apply_where(
    host: &mut HostServices,
    section: &[u8],
    states: &[Option<RestoreTo>],
    keep: impl Fn(&[u8]) -> bool,
) -> anyhow::Result<()> {
    apply_records(host, section, states, keep, false)
}

/// [`apply_where`] for the full checkpoint a restored chain starts with, applied into a
/// table that holds no key yet: with the `disk` backend each key goes straight into the
/// store as a dormant key ([`KeyTable::restore_dormant`]) and never enters memory, which
/// is most of what restoring a large state costs otherwise (interning, timers in and out
/// of the timer service, evictions).
pub fn apply_base_where(
    host: &mut HostServices,
    section: &[u8],
    states: &[Option<RestoreTo>],
    keep: impl Fn(&[u8]) -> bool,
) -> anyhow::Result<()> {
    apply_records(host, section, states, keep, true)
}

fn apply_records(
    host: &mut HostServices,
    section: &[u8],
    states: &[Option<RestoreTo>],
    keep: impl Fn(&[u8]) -> bool,
    base: bool,
) -> anyhow::Result<()> {
    let straight_to_store = base && host.keys.spills();
    let mut r = Reader::new(section);
    let mut restored = 0;
    while !r.is_empty() {
        let tag = r.u8()?;
        let key = r.bytes()?;
        if !keep(key) {
            skip_record(&mut r, tag)?;
            continue;
        }
        let contents = match tag {
            REMOVED => None,
            PUT => Some(read_contents(&mut r, host, states)?),
            other => anyhow::bail!("unknown keyed record tag {other}"),
        };
        if straight_to_store {
            if let Some((slots, mut timers)) = contents {
                if slots.is_empty() && timers.is_empty() {
                    continue;
                }
                timers.sort_unstable();
                timers.dedup();
                let expiry = host
                    .first_expiry(slots.iter().map(|(state, slot)| (*state, slot)))
                    .into_iter()
                    .flatten()
                    .collect();
                let saved = SavedKey {
                    slots,
                    timers,
                    expiry,
                };
                host.keys.restore_dormant(key, &saved)?;
            }
            continue;
        }
        let id = host.intern(key)?;
        clear_key(host, id);
        if let Some((slots, timers)) = contents {
            for (state, slot) in slots {
                host.keys.entry_mut(id).set_slot(state, slot);
            }
            for (domain, at) in timers {
                host.timer_for(id, domain, at, true);
            }
        }
        if host.states.any_ttl() {
            // Before it may leave memory: a dormant key takes its expiry with it.
            host.schedule_expiry(id);
        }
        host.keys.release_if_unused(id);
        // The `disk` backend keeps what exceeds its budget in its store as it goes.
        restored += 1;
        if restored % EVICT_EVERY == 0 {
            host.evict()?;
        }
    }
    host.evict()
}

/// A key's record after its tag and key: its slots, each where `states` says it goes
/// (with its stamps changed as it says; a state the UDF no longer declares is dropped),
/// and its timers.
#[allow(clippy::type_complexity)]
fn read_contents(
    r: &mut Reader<'_>,
    host: &HostServices,
    states: &[Option<RestoreTo>],
) -> anyhow::Result<(Vec<(StateId, Slot)>, Vec<(TimeDomain, Timestamp)>)> {
    let count = r.u32()?;
    let mut slots = Vec::with_capacity(count.min(64) as usize);
    for _ in 0..count {
        let state = r.u32()? as usize;
        let mut slot = Slot::decode(r)?;
        let target = states.get(state).copied().ok_or_else(|| {
            anyhow::anyhow!("a slot names state #{state}, which the checkpoint does not declare")
        })?;
        if let Some(target) = target {
            let ttl = host.states.ttl(target.id);
            let now = ttl.map_or(0, |ttl| host.clock(ttl.domain));
            ttl::change_stamps(&mut slot, target.stamps, now);
            slots.push((target.id, slot));
        }
    }
    let count = r.u32()?;
    let mut timers = Vec::with_capacity(count.min(64) as usize);
    for _ in 0..count {
        let domain = match r.u8()? {
            0 => TimeDomain::EventTime,
            1 => TimeDomain::ProcessingTime,
            other => anyhow::bail!("unknown timer domain {other}"),
        };
        timers.push((domain, r.i64()?));
    }
    Ok((slots, timers))
}

/// Keys a restore applies between two evictions (the `disk` backend).
const EVICT_EVERY: usize = 1024;

/// Reads past the rest of a key's record (after its tag and key).
fn skip_record(r: &mut Reader<'_>, tag: u8) -> anyhow::Result<()> {
    match tag {
        REMOVED => Ok(()),
        PUT => {
            for _ in 0..r.u32()? {
                r.u32()?;
                Slot::decode(r)?;
            }
            for _ in 0..r.u32()? {
                r.u8()?;
                r.i64()?;
            }
            Ok(())
        }
        other => anyhow::bail!("unknown keyed record tag {other}"),
    }
}

/// Removes a key's slots and timers (an increment replaces a key whole).
fn clear_key(host: &mut HostServices, id: KeyId) {
    let timers: Vec<_> = host.keys.timers(id).collect();
    for (domain, at) in timers {
        host.timer_for(id, domain, at, false);
    }
    host.keys.entry_mut(id).clear_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::state::ByteMap;
    use weir_core::time::timers::TimeDomain::*;

    type Timers<'a> = &'a [(TimeDomain, i64)];
    type Dumped = (Vec<u8>, Vec<(StateId, Slot)>, Vec<(TimeDomain, i64)>);

    fn host_with(keys: &[(&[u8], Slot, Timers<'_>)]) -> HostServices {
        let mut host = HostServices::new(0);
        for (key, slot, timers) in keys {
            let id = host.keys.intern(key);
            host.keys.entry_mut(id).set_slot(0, slot.clone());
            for &(domain, at) in *timers {
                host.timer_for(id, domain, at, true);
            }
        }
        host
    }

    fn dump(host: &HostServices) -> Vec<Dumped> {
        let mut all: Vec<_> = host
            .keys
            .iter()
            .map(|(id, e)| {
                let mut timers: Vec<_> = host.keys.timers(id).collect();
                timers.sort();
                let slots = e.slots().map(|(id, s)| (id, s.clone())).collect();
                (e.key().to_vec(), slots, timers)
            })
            .collect();
        all.sort();
        all
    }

    #[test]
    fn full_then_increments_restore_the_same_keys_and_timers() {
        let mut host = host_with(&[
            (b"a", Slot::Value(b"1".to_vec()), &[(EventTime, 10)]),
            (
                b"b",
                Slot::List(vec![b"x".to_vec()]),
                &[(ProcessingTime, 20)],
            ),
        ]);
        host.keys.track_changes();
        let full = encode_full(&host.keys).unwrap();

        // Change a, drop b (state and timer), add c with a map.
        let a = host.keys.find(b"a").unwrap();
        host.keys
            .entry_mut(a)
            .set_slot(0, Slot::Value(b"2".to_vec()));
        host.timer_for(a, EventTime, 10, false);
        host.timer_for(a, EventTime, 30, true);
        let b = host.keys.find(b"b").unwrap();
        host.keys.entry_mut(b).clear_all();
        host.timer_for(b, ProcessingTime, 20, false);
        host.keys.release_if_unused(b);
        let c = host.keys.intern(b"c");
        let mut map = ByteMap::new();
        map.insert(b"k".to_vec(), b"v".to_vec());
        host.keys.entry_mut(c).set_slot(0, Slot::Map(map));
        let delta = begin_changes(&mut host.keys).unwrap().encode().unwrap();

        let mut restored = HostServices::new(0);
        apply(&mut restored, &full, &[Some(0.into())]).unwrap();
        apply(&mut restored, &delta, &[Some(0.into())]).unwrap();
        assert_eq!(dump(&restored), dump(&host));
        assert_eq!(restored.timers.pending(EventTime), 1);
        assert_eq!(restored.timers.pending(ProcessingTime), 0);
        assert_eq!(
            restored.timers.pop_event_due(100),
            Some((30, restored.keys.find(b"a").unwrap()))
        );
    }

    #[test]
    fn a_section_splits_by_key_and_the_parts_add_up_to_the_whole() {
        let host = host_with(&[
            (b"a", Slot::Value(b"1".to_vec()), &[(EventTime, 10)]),
            (b"b", Slot::List(vec![b"x".to_vec()]), &[]),
            (b"c", Slot::Value(b"3".to_vec()), &[(ProcessingTime, 5)]),
        ]);
        let full = encode_full(&host.keys).unwrap();
        let mut left = HostServices::new(0);
        apply_where(&mut left, &full, &[Some(0.into())], |k| k != b"b").unwrap();
        let mut right = HostServices::new(0);
        apply_where(&mut right, &full, &[Some(0.into())], |k| k == b"b").unwrap();
        let mut parts = dump(&left);
        parts.extend(dump(&right));
        parts.sort();
        assert_eq!(parts, dump(&host));
        assert_eq!(dump(&right).len(), 1);
    }

    #[test]
    fn a_large_section_comes_in_parts_of_whole_keys_that_restore_one_at_a_time() {
        let keys: Vec<(Vec<u8>, Slot, Timers<'_>)> = (0..3_000u32)
            .map(|i| {
                let value = vec![i as u8; 1_000];
                let timers: Timers<'_> = if i % 2 == 0 { &[(EventTime, 7)] } else { &[] };
                (i.to_be_bytes().to_vec(), Slot::Value(value), timers)
            })
            .collect();
        let refs: Vec<(&[u8], Slot, Timers<'_>)> = keys
            .iter()
            .map(|(k, s, t)| (k.as_slice(), s.clone(), *t))
            .collect();
        let host = host_with(&refs);
        let parts = begin_full(&host.keys).unwrap().in_memory;
        assert_eq!(parts.len(), 3, "about 3 MB in parts of 1 MiB");
        for part in &parts[..parts.len() - 1] {
            assert!(part.len() >= PART_BYTES && part.len() < PART_BYTES + 1_100);
        }
        let mut restored = HostServices::new(0);
        for part in &parts {
            apply(&mut restored, part, &[Some(0.into())]).unwrap();
        }
        assert_eq!(dump(&restored), dump(&host));
        assert_eq!(restored.timers.pending(EventTime), 1_500);
    }

    #[test]
    fn a_state_the_udf_no_longer_declares_is_dropped() {
        let host = host_with(&[(b"a", Slot::Value(b"1".to_vec()), &[])]);
        let full = encode_full(&host.keys).unwrap();
        let mut restored = HostServices::new(0);
        apply(&mut restored, &full, &[None]).unwrap();
        assert!(restored.keys.is_empty());
        assert!(apply(&mut restored, &full[..full.len() - 1], &[Some(0.into())]).is_err());
    }
}
