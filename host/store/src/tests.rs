//! The store against a model of the same operations in memory: maps of slots and sets of
//! timers, as the memory backend keeps them.

use crate::{DiskStore, Entries, StoreSnapshot};
use std::collections::{BTreeMap, BTreeSet};
use weir_core::key::tie_order;
use weir_core::key::Key;
use weir_core::state::SavedKey;
use weir_core::state::{ByteMap, Slot, StateId, Wake};
use weir_core::time::timers::{FiringPlace, TimeDomain};
use weir_core::time::Timestamp;

/// A small deterministic generator (xorshift64*), so a failure repeats.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Every key's slots and timers, by key.
type Keys = BTreeMap<Vec<u8>, (Vec<(StateId, Slot)>, Vec<(TimeDomain, Timestamp)>)>;

/// What the store should hold: per key, its slots by state id, and its timers.
#[derive(Default)]
struct Model {
    slots: BTreeMap<Vec<u8>, BTreeMap<StateId, Slot>>,
    timers: BTreeMap<Vec<u8>, BTreeSet<(TimeDomain, Timestamp)>>,
}

impl Model {
    fn slot(&mut self, key: &[u8], state: StateId, init: impl FnOnce() -> Slot) -> &mut Slot {
        self.slots
            .entry(key.to_vec())
            .or_default()
            .entry(state)
            .or_insert_with(init)
    }

    /// Drops empty slots and keys, as the store holds no row for them.
    fn tidy(&mut self) {
        for slots in self.slots.values_mut() {
            slots.retain(|_, slot| match slot {
                Slot::Value(_) => true,
                Slot::List(items) => !items.is_empty(),
                Slot::Map(map) => !map.is_empty(),
            });
        }
        self.slots.retain(|_, slots| !slots.is_empty());
        self.timers.retain(|_, timers| !timers.is_empty());
    }

    fn keys(&mut self) -> Keys {
        self.tidy();
        let mut out = BTreeMap::new();
        for (key, slots) in &self.slots {
            let slots = slots.iter().map(|(s, slot)| (*s, slot.clone())).collect();
            out.insert(key.clone(), (slots, Vec::new()));
        }
        for (key, timers) in &self.timers {
            out.entry(key.clone())
                .or_insert_with(|| (Vec::new(), Vec::new()))
                .1 = timers.iter().copied().collect();
        }
        out
    }
}

fn walk(snapshot: &StoreSnapshot) -> Keys {
    let mut out = BTreeMap::new();
    for stored in snapshot.keys() {
        let stored = stored.unwrap();
        let before = out.insert(stored.key.to_vec(), (stored.slots, stored.timers));
        assert!(before.is_none(), "each key once");
    }
    out
}

const VALUE_STATE: StateId = 0;
const LIST_STATE: StateId = 1;
const MAP_STATE: StateId = 2;

#[test]
fn every_operation_matches_the_model_and_a_snapshot_sees_its_moment() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(&dir.path().join("store"), 1 << 20).unwrap();
    let mut model = Model::default();
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    let mut halfway = None;
    for step in 0..20_000u64 {
        // Keys of 1 to 40 bytes, some sharing prefixes, so that prefix-freedom matters.
        let key = format!("k{}", dice.roll(50))
            .repeat(1 + dice.roll(3) as usize)
            .into_bytes();
        let map_key = format!("m{}", dice.roll(20)).into_bytes();
        let bytes = step.to_le_bytes().to_vec();
        match dice.roll(13) {
            0 => {
                store.value_set(&key, VALUE_STATE, &bytes).unwrap();
                *model.slot(&key, VALUE_STATE, || Slot::Value(vec![])) = Slot::Value(bytes);
            }
            1 | 2 => {
                store.list_append(&key, LIST_STATE, &bytes).unwrap();
                match model.slot(&key, LIST_STATE, || Slot::List(vec![])) {
                    Slot::List(items) => items.push(bytes),
                    _ => unreachable!(),
                }
            }
            3 => {
                let items = vec![bytes.clone(); dice.roll(3) as usize];
                store.list_set(&key, LIST_STATE, &items).unwrap();
                *model.slot(&key, LIST_STATE, || Slot::List(vec![])) = Slot::List(items);
            }
            4 | 5 => {
                store.map_put(&key, MAP_STATE, &map_key, &bytes).unwrap();
                match model.slot(&key, MAP_STATE, || Slot::Map(ByteMap::new())) {
                    Slot::Map(map) => map.insert(map_key, bytes),
                    _ => unreachable!(),
                };
            }
            6 => {
                store.map_remove(&key, MAP_STATE, &map_key).unwrap();
                if let Slot::Map(map) = model.slot(&key, MAP_STATE, || Slot::Map(ByteMap::new())) {
                    map.remove(&map_key);
                }
            }
            7 => {
                let state = dice.roll(3) as StateId;
                store.clear(&key, state).unwrap();
                if let Some(slots) = model.slots.get_mut(&key) {
                    slots.remove(&state);
                }
            }
            8 => {
                store.clear_all(&key).unwrap();
                model.slots.remove(&key);
            }
            9 | 10 => {
                let domain =
                    [TimeDomain::EventTime, TimeDomain::ProcessingTime][dice.roll(2) as usize];
                let at = dice.roll(1_000) as Timestamp - 500;
                store.add_timer(&key, domain, at).unwrap();
                model
                    .timers
                    .entry(key.clone())
                    .or_default()
                    .insert((domain, at));
            }
            11 => {
                let pending = model
                    .timers
                    .get(&key)
                    .and_then(|t| t.iter().next().copied());
                if let Some((domain, at)) = pending {
                    store.remove_timer(&key, domain, at).unwrap();
                    model.timers.get_mut(&key).unwrap().remove(&(domain, at));
                }
            }
            _ => {
                let slot = Slot::Map([(map_key, bytes)].into_iter().collect());
                store.set_slot(&key, MAP_STATE, &slot).unwrap();
                *model.slot(&key, MAP_STATE, || Slot::Map(ByteMap::new())) = slot;
            }
        }
        // Every read of this key agrees with the model.
        model.tidy();
        let slots = model.slots.get(&key).cloned().unwrap_or_default();
        assert_eq!(
            store.value_get(&key, VALUE_STATE).unwrap(),
            match slots.get(&VALUE_STATE) {
                Some(Slot::Value(v)) => Some(v.clone()),
                _ => None,
            }
        );
        assert_eq!(
            store.list_get(&key, LIST_STATE).unwrap(),
            match slots.get(&LIST_STATE) {
                Some(Slot::List(items)) => items.clone(),
                _ => vec![],
            }
        );
        let map: Entries = match slots.get(&MAP_STATE) {
            Some(Slot::Map(map)) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            _ => vec![],
        };
        assert_eq!(store.map_entries(&key, MAP_STATE).unwrap(), map);
        let first = map.first().map(|(k, _)| k.clone()).unwrap_or_default();
        assert_eq!(
            store.map_get(&key, MAP_STATE, &first).unwrap(),
            map.first().map(|(_, v)| v.clone())
        );
        assert_eq!(
            store.slots(&key).unwrap(),
            slots.into_iter().collect::<Vec<_>>()
        );
        let timers: Vec<_> = model
            .timers
            .get(&key)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        assert_eq!(store.timers(&key).unwrap(), timers);
        if step == 10_000 {
            halfway = Some((store.snapshot(), model.keys()));
        }
    }
    let (snapshot, then) = halfway.unwrap();
    assert_eq!(
        walk(&snapshot),
        then,
        "the snapshot sees the store as it was"
    );
    assert_eq!(walk(&store.snapshot()), model.keys());
}

#[test]
fn due_timers_come_earliest_first_per_clock() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(&dir.path().join("store"), 1 << 20).unwrap();
    assert_eq!(store.next_timer(TimeDomain::EventTime).unwrap(), None);
    for (key, at) in [
        (&b"b"[..], 30),
        (b"a", 10),
        (b"c", -5),
        (b"a", 30),
        (b"d", 31),
    ] {
        store.add_timer(key, TimeDomain::EventTime, at).unwrap();
    }
    store
        .add_timer(b"p", TimeDomain::ProcessingTime, 1)
        .unwrap();
    assert_eq!(store.next_timer(TimeDomain::EventTime).unwrap(), Some(-5));
    let from_start = FiringPlace::start_of(Timestamp::MIN);
    let due = store
        .due_timers(
            Wake::Timer(TimeDomain::EventTime),
            from_start,
            FiringPlace::end_of(30),
            100,
        )
        .unwrap();
    let times: Vec<Timestamp> = due.iter().map(|(place, _)| place.at).collect();
    assert_eq!(times, [-5, 10, 30, 30], "up to 30, none of the other clock");
    // Keys due at one time come in the order their timers fire: by tie order.
    let at_30: Vec<&[u8]> = due[2..].iter().map(|(_, k)| k.as_slice()).collect();
    let mut by_tie = [&b"a"[..], b"b"];
    by_tie.sort_by_key(|key| tie_order(key));
    assert_eq!(at_30, by_tie);
    for (place, key) in &due {
        assert_eq!(place.tie, tie_order(key));
    }
    let first_three = store
        .due_timers(
            Wake::Timer(TimeDomain::EventTime),
            from_start,
            FiringPlace::end_of(30),
            3,
        )
        .unwrap();
    assert_eq!(first_three, due[..3]);
    // From the place after the third, inside time 30: the fourth alone.
    let rest = store
        .due_timers(
            Wake::Timer(TimeDomain::EventTime),
            due[2].0.next().unwrap(),
            FiringPlace::end_of(30),
            9,
        )
        .unwrap();
    assert_eq!(rest, due[3..]);
    store.remove_timer(b"c", TimeDomain::EventTime, -5).unwrap();
    assert_eq!(store.next_timer(TimeDomain::EventTime).unwrap(), Some(10));
    assert_eq!(
        store
            .due_timers(
                Wake::Timer(TimeDomain::ProcessingTime),
                from_start,
                FiringPlace::end_of(i64::MAX),
                10
            )
            .unwrap(),
        [(
            FiringPlace {
                at: 1,
                tie: tie_order(b"p")
            },
            Key::from_slice(b"p")
        )]
    );
}

#[test]
fn one_entry_of_a_key_with_100_000_map_entries_is_read_and_written_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(&dir.path().join("store"), 1 << 20).unwrap();
    for i in 0..100_000u32 {
        store
            .map_put(b"hot", MAP_STATE, &i.to_be_bytes(), b"v")
            .unwrap();
    }
    store
        .map_put(b"hot", MAP_STATE, &77u32.to_be_bytes(), b"w")
        .unwrap();
    store
        .map_remove(b"hot", MAP_STATE, &78u32.to_be_bytes())
        .unwrap();
    assert_eq!(
        store
            .map_get(b"hot", MAP_STATE, &77u32.to_be_bytes())
            .unwrap()
            .as_deref(),
        Some(&b"w"[..])
    );
    assert_eq!(
        store
            .map_get(b"hot", MAP_STATE, &78u32.to_be_bytes())
            .unwrap(),
        None
    );
    let entries = store.map_entries(b"hot", MAP_STATE).unwrap();
    assert_eq!(entries.len(), 99_999);
    assert!(entries.windows(2).all(|w| w[0].0 < w[1].0), "in byte order");
}

#[test]
fn the_store_is_emptied_when_opened_and_deleted_when_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = DiskStore::open(&path, 1 << 20).unwrap();
    store.value_set(b"k", VALUE_STATE, b"v").unwrap();
    assert!(path.exists());
    drop(store);
    assert!(!path.exists(), "a working copy: gone with its run");
    std::fs::create_dir_all(path.join("left-over")).unwrap();
    let store = DiskStore::open(&path, 1 << 20).unwrap();
    assert_eq!(store.value_get(b"k", VALUE_STATE).unwrap(), None);
    assert!(!path.join("left-over").exists());
    let err = format!(
        "{:#}",
        store.value_get(&vec![7; 20_000], VALUE_STATE).unwrap_err()
    );
    assert!(err.contains("over the disk state backend's limit"), "{err}");
}

/// The store as a key table's slot store: a dormant key's row comes back as saved, the
/// key is listed by time under its earliest timer of each clock until it is removed, and
/// a walk sees every key.
#[test]
fn saved_keys_and_their_timers_come_back_by_key_and_by_time() {
    use weir_core::state::SlotStore;
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path(), 1 << 20).unwrap();
    let (ev, pt) = (TimeDomain::EventTime, TimeDomain::ProcessingTime);
    let saved = |n: u8, timers: Vec<(TimeDomain, Timestamp)>| SavedKey {
        slots: vec![(0, Slot::Value(vec![n])), (2, Slot::List(vec![vec![n; 3]]))],
        timers,
        expiry: vec![],
    };
    store
        .save(b"a", &saved(1, vec![(ev, 30), (pt, 5)]))
        .unwrap();
    store
        .save(b"b", &saved(2, vec![(ev, 10), (ev, 30)]))
        .unwrap();
    // c has no timer; its entries expire at 20 on event time.
    let c = SavedKey {
        expiry: vec![(ev, 20)],
        ..saved(3, vec![])
    };
    store.save(b"c", &c).unwrap();
    assert_eq!(store.load(b"c").unwrap(), Some(c.clone()));
    assert_eq!(
        store.load(b"a").unwrap(),
        Some(saved(1, vec![(ev, 30), (pt, 5)]))
    );
    assert_eq!(store.load(b"z").unwrap(), None);
    let due = |up_to, limit| -> Vec<(Timestamp, Vec<u8>)> {
        let from = FiringPlace::start_of(Timestamp::MIN);
        let due = store
            .due(Wake::Timer(ev), from, FiringPlace::end_of(up_to), limit)
            .unwrap();
        due.into_iter()
            .map(|listed| (listed.place.at, listed.key.to_vec()))
            .collect()
    };
    // A key's first listing carries its row (read in the walk), its others do not.
    let (start, end) = (FiringPlace::start_of, FiringPlace::end_of);
    let carried = |wake, key: &[u8]| {
        let due = store
            .due(wake, start(Timestamp::MIN), end(100), 10)
            .unwrap();
        due.into_iter()
            .find(|l| l.key.as_slice() == key)
            .unwrap()
            .saved
    };
    let a = saved(1, vec![(ev, 30), (pt, 5)]);
    assert_eq!(carried(Wake::Timer(ev), b"a"), Some(a.clone()));
    assert_eq!(carried(Wake::Timer(pt), b"a"), None);
    assert_eq!(carried(Wake::Expiry(ev), b"c"), Some(c.clone()));
    // d is listed under no time: its row is in `spilled`.
    let d = saved(4, vec![]);
    store.save(b"d", &d).unwrap();
    assert_eq!(store.load(b"d").unwrap(), Some(d.clone()));
    let snapshot = store.snapshot();
    let mut in_snapshot = Vec::new();
    weir_core::state::SlotSnapshot::for_each(&snapshot, &mut |key, saved| {
        in_snapshot.push((key.to_vec(), saved));
        Ok(())
    })
    .unwrap();
    in_snapshot.sort_by(|x, y| x.0.cmp(&y.0));
    let b = saved(2, vec![(ev, 10), (ev, 30)]);
    let every = [(b"a", &a), (b"b", &b), (b"c", &c), (b"d", &d)];
    let every: Vec<_> = every.map(|(k, s)| (k.to_vec(), s.clone())).into();
    assert_eq!(in_snapshot, every, "each key once, as saved");
    for (key, saved) in &every {
        let got = weir_core::state::SlotSnapshot::get(&snapshot, key).unwrap();
        assert_eq!(got.as_ref(), Some(saved));
    }
    store.remove(b"d", &[]).unwrap();
    assert_eq!(store.load(b"d").unwrap(), None);
    assert_eq!(
        weir_core::state::SlotSnapshot::get(&snapshot, b"d").unwrap(),
        Some(d),
        "the snapshot still sees it"
    );
    drop(snapshot);
    // Each key under its earliest timer of the clock: b at 10 (not 30 too), a at 30.
    assert_eq!(due(100, 10), [(10, b"b".to_vec()), (30, b"a".to_vec())]);
    assert_eq!(due(20, 10), [(10, b"b".to_vec())]);
    assert_eq!(due(100, 1), [(10, b"b".to_vec())], "earliest first");
    store
        .remove(b"b", &saved(2, vec![(ev, 10), (ev, 30)]).listings())
        .unwrap();
    assert_eq!(due(100, 10), [(30, b"a".to_vec())]);
    let timers = Wake::Timer(pt);
    assert_eq!(store.due(timers, start(5), end(5), 10).unwrap().len(), 1);
    assert!(
        store
            .due(timers, start(6), end(100), 10)
            .unwrap()
            .is_empty(),
        "from 6 on"
    );
    // Listed for its expiry apart from the timers.
    let expiring = store.due(Wake::Expiry(ev), start(0), end(100), 10).unwrap();
    assert_eq!(expiring.len(), 1);
    assert_eq!(
        (expiring[0].place.at, expiring[0].key.as_slice()),
        (20, &b"c"[..])
    );
    assert!(store
        .due(Wake::Expiry(pt), start(0), end(100), 10)
        .unwrap()
        .is_empty());
    let mut walked = Vec::new();
    store
        .for_each(&mut |key, saved| {
            walked.push((key.to_vec(), saved.timers.len()));
            Ok(())
        })
        .unwrap();
    walked.sort();
    assert_eq!(walked, [(b"a".to_vec(), 2), (b"c".to_vec(), 0)]);
}

/// Keys saved and removed again and again (often under the same listing), across
/// flushes and full compactions of the store: no removed row comes back, by key, by time
/// or in a walk, and every saved one reads as saved. (It fails with fjall's weak
/// tombstones for the removals: a compaction that merges a row's second write with the
/// weak tombstone of its first drops that tombstone, so the first write, already in a
/// deeper level, comes back when the second's tombstone meets the second.)
#[test]
fn keys_saved_and_removed_again_and_again_never_come_back() {
    use weir_core::state::SlotStore;
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path(), 1 << 20).unwrap();
    let mut dice = Dice(0x5eed);
    let mut model: BTreeMap<Vec<u8>, SavedKey> = BTreeMap::new();
    let ev = TimeDomain::EventTime;
    let check = |store: &DiskStore, model: &BTreeMap<Vec<u8>, SavedKey>| {
        for n in 0..200u32 {
            let key = format!("key-{n}").into_bytes();
            assert_eq!(store.load(&key).unwrap().as_ref(), model.get(&key), "{n}");
        }
        let mut walked = BTreeMap::new();
        store
            .for_each(&mut |key, saved| {
                assert!(walked.insert(key.to_vec(), saved).is_none(), "once");
                Ok(())
            })
            .unwrap();
        assert_eq!(&walked, model);
        let (start, end) = (FiringPlace::start_of, FiringPlace::end_of);
        let due = store
            .due(
                Wake::Timer(ev),
                start(Timestamp::MIN),
                end(Timestamp::MAX),
                usize::MAX,
            )
            .unwrap();
        let listed: BTreeSet<Vec<u8>> = due.iter().map(|l| l.key.to_vec()).collect();
        let timed: BTreeSet<Vec<u8>> = model
            .iter()
            .filter(|(_, saved)| !saved.timers.is_empty())
            .map(|(key, _)| key.clone())
            .collect();
        assert_eq!(listed, timed);
        for listed in due {
            assert_eq!(listed.saved.as_ref(), model.get(listed.key.as_slice()));
        }
    };
    for step in 0..3_000u64 {
        let key = format!("key-{}", dice.roll(200)).into_bytes();
        match model.remove(&key) {
            Some(saved) => store.remove(&key, &saved.listings()).unwrap(),
            None => {
                let timers = match dice.roll(3) {
                    0 => vec![],
                    _ => vec![(ev, dice.roll(1_000) as Timestamp)],
                };
                let saved = SavedKey {
                    slots: vec![(0, Slot::Value(step.to_le_bytes().to_vec()))],
                    timers,
                    expiry: vec![],
                };
                store.save(&key, &saved).unwrap();
                model.insert(key, saved);
            }
        }
        if step % 250 == 249 {
            let tree = store.tree();
            for keyspace in [&tree.spilled, &tree.timers_by_time] {
                keyspace.rotate_memtable_and_wait().unwrap();
                if step % 1_000 == 999 {
                    keyspace.major_compact().unwrap();
                }
            }
            check(&store, &model);
        }
    }
    check(&store, &model);
}

/// Every saved key a walk hands, each once.
fn walked(
    walk: impl FnOnce(&mut dyn FnMut(&[u8], SavedKey) -> anyhow::Result<()>) -> anyhow::Result<()>,
) -> BTreeMap<Vec<u8>, SavedKey> {
    let mut out = BTreeMap::new();
    walk(&mut |key, saved| {
        assert!(out.insert(key.to_vec(), saved).is_none(), "each key once");
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn listings_a_walk_passed_are_spent_and_their_tables_dropped_without_losing_a_live_key() {
    use weir_core::state::{SlotSnapshot, SlotStore};
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(dir.path(), 1 << 20).unwrap();
    let mut dice = Dice(0xd0c5);
    let mut model: BTreeMap<Vec<u8>, SavedKey> = BTreeMap::new();
    let ev = TimeDomain::EventTime;
    let timer = Wake::Timer(ev);
    let (start, end) = (FiringPlace::start_of, FiringPlace::end_of);
    // Time the walks have woken every key through; keys go dormant only after it, as
    // the key table lets them.
    let mut now: Timestamp = 0;
    let check = |store: &DiskStore, model: &BTreeMap<Vec<u8>, SavedKey>| {
        for n in 0..2_000u32 {
            let key = format!("key-{n}").into_bytes();
            assert_eq!(store.load(&key).unwrap().as_ref(), model.get(&key), "{n}");
        }
        assert_eq!(&walked(|each| store.for_each(each)), model);
        for wake in [timer, Wake::Expiry(ev)] {
            let due = store
                .due(wake, start(Timestamp::MIN), end(Timestamp::MAX), usize::MAX)
                .unwrap();
            let listed: BTreeSet<Vec<u8>> = due.iter().map(|l| l.key.to_vec()).collect();
            let expected: BTreeSet<Vec<u8>> = model
                .iter()
                .filter(|(_, saved)| saved.listings().iter().any(|(w, _)| *w == wake))
                .map(|(key, _)| key.clone())
                .collect();
            assert_eq!(listed, expected, "{wake:?}");
        }
    };
    for round in 0..40u64 {
        // Keys go dormant, each with a timer after the walks, some listed for an expiry
        // too; some of them were woken before, by a walk or by a record.
        for step in 0..400u64 {
            let key = format!("key-{}", dice.roll(2_000)).into_bytes();
            if model.contains_key(&key) {
                continue;
            }
            let at = now + 1 + dice.roll(300) as Timestamp;
            let expiry = match dice.roll(4) {
                0 => vec![(ev, at + dice.roll(300) as Timestamp)],
                _ => vec![],
            };
            let saved = SavedKey {
                slots: vec![(
                    0,
                    Slot::Value((round * 1_000 + step).to_le_bytes().to_vec()),
                )],
                timers: vec![(ev, at)],
                expiry,
            };
            store.save(&key, &saved).unwrap();
            model.insert(key, saved);
        }
        // A record wakes a few keys by their bytes.
        for _ in 0..20 {
            let key = format!("key-{}", dice.roll(2_000)).into_bytes();
            if let Some(saved) = store.load(&key).unwrap() {
                store.remove(&key, &saved.listings()).unwrap();
                assert_eq!(model.remove(&key), Some(saved));
            }
        }
        // A walk wakes every key whose timer is due by the new time, with what its
        // listing carried; its listing stays behind, spent.
        now += 100 + dice.roll(100) as Timestamp;
        for listed in store
            .due(timer, start(Timestamp::MIN), end(now), usize::MAX)
            .unwrap()
        {
            let saved = listed.saved.expect("the timer's listing carries the row");
            store.remove_woken(&listed.key, &saved.listings()).unwrap();
            assert_eq!(model.remove(listed.key.as_slice()), Some(saved));
        }
        store.spent_through(timer, end(now));
        let tree = store.tree();
        if round % 5 == 4 {
            for keyspace in [&tree.spilled, &tree.timers_by_time] {
                keyspace.rotate_memtable_and_wait().unwrap();
            }
        }
        if round % 10 == 9 {
            // A snapshot taken now sees the store as it is while walks go on, and no
            // table is dropped under it.
            let snapshot = store.snapshot();
            let seen = model.clone();
            for listed in store
                .due(timer, start(Timestamp::MIN), end(now + 150), usize::MAX)
                .unwrap()
            {
                let saved = listed.saved.expect("carried");
                store.remove_woken(&listed.key, &saved.listings()).unwrap();
                model.remove(listed.key.as_slice());
            }
            now += 150;
            store.spent_through(timer, end(now));
            tree.timers_by_time.rotate_memtable_and_wait().unwrap();
            store.spent.drop_now(&tree.timers_by_time);
            assert_eq!(walked(|each| snapshot.for_each(each)), seen);
            drop(snapshot);
            tree.timers_by_time.major_compact().unwrap();
            store.spent.drop_now(&tree.timers_by_time);
        }
        check(&store, &model);
    }
    assert!(!model.is_empty());
}
