//! How keyed state and timers are laid out as the store's keys.
//!
//! Every row of one record key starts with the key's *prefix*: its key group (2 bytes,
//! big-endian), its length (2 bytes, big-endian) and its bytes. The prefix is
//! prefix-free (no key's prefix starts another's), so all rows of a key are one
//! contiguous range in every keyspace, and keys come in the same order in each: a walk
//! over two keyspaces can merge them key by key. Key groups first means a restore at
//! another parallelism reads a shard's groups as ranges (Flink's layout).
//!
//! - `state` rows: prefix, state id (4 bytes BE), then by kind: a value has nothing more;
//!   a list item its position (8 bytes BE), so items come in the order they were
//!   appended; a map entry its map key's bytes, so entries come in byte order.
//! - `timers_by_key` rows: prefix, domain (1 byte), time (8 bytes, sign bit flipped,
//!   BE, so that times sort as numbers); the key's timers in time order.
//! - `timers_by_time` rows: the listing (1 byte, `weir_core::state::Wake::index`: a
//!   timer of either clock, or an expiry of state entries on either clock), time, the
//!   key's tie order (8 bytes BE, see `weir_core::key::tie_order`), then the prefix: the
//!   due timers of a clock first, in the order they fire, so that keys due at one time
//!   wake a bounded number at a time; likewise the keys whose entries expire.
//! - `spilled` rows: the prefix, then in the value every slot of the key, and the
//!   timers and expiry of a key that left memory whole ([`encode_saved`]): how the key
//!   table spills a key. A dormant key's earliest timers and its expiry are also in
//!   `timers_by_time`, so that due ones wake their keys in time order; the first of
//!   those listings ([`SavedKey::listings`]) carries the key's saved row as its value,
//!   and its `spilled` row only says which listing that is ([`SpilledRow`]). So keys
//!   that wake in firing order (the end of input makes every timer due) are read in one
//!   walk over `timers_by_time`, not one point read each.

use weir_core::codec::{Reader, Writer};
use weir_core::key::{key_group, tie_order};
use weir_core::state::StateId;
use weir_core::state::{SavedKey, Slot, Wake};
use weir_core::time::timers::{FiringPlace, TimeDomain};
use weir_core::time::Timestamp;

/// The longest record key the store takes: its rows' keys must stay under the store's
/// limit of 65,536 bytes with a state id and a map key or a timer after it.
pub const MAX_KEY_BYTES: usize = 16 * 1024;

/// The longest map key (of one map state entry) the store takes.
pub const MAX_MAP_KEY_BYTES: usize = 32 * 1024;

/// What the key table saved of a key as one saved row (the value of its `spilled` row or
/// of its first listing, see [`SpilledRow`]): the count of its slots, then per slot its
/// state id and the slot as checkpoints write it ([`Slot::encode`]); then the count of
/// its timers (none unless the key is dormant), each its domain byte and time; then its
/// expiry the same way.
pub fn encode_saved(saved: &SavedKey) -> Vec<u8> {
    let mut w = Writer::default();
    w.u32(saved.slots.len() as u32);
    for (state, slot) in &saved.slots {
        w.u32(*state);
        slot.encode(&mut w);
    }
    for times in [&saved.timers, &saved.expiry] {
        w.u32(times.len() as u32);
        for &(domain, at) in times {
            w.u8(domain_byte(domain));
            w.i64(at);
        }
    }
    w.into_inner()
}

/// The key [`encode_saved`] wrote.
pub fn decode_saved(bytes: &[u8]) -> anyhow::Result<SavedKey> {
    let mut r = Reader::new(bytes);
    let count = r.u32()?;
    let mut saved = SavedKey::default();
    for _ in 0..count.min(1 << 20) {
        let state = r.u32()?;
        saved.slots.push((state, Slot::decode(&mut r)?));
    }
    for times in [&mut saved.timers, &mut saved.expiry] {
        for _ in 0..r.u32()? {
            let domain = domain_of(r.u8()?).ok_or_else(|| anyhow::anyhow!("a bad clock"))?;
            times.push((domain, r.i64()?));
        }
    }
    r.finish()?;
    Ok(saved)
}

/// What a `spilled` row's value says ([`read_spilled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpilledRow<'a> {
    /// The key's saved row ([`encode_saved`]): a key listed under no time.
    Here(&'a [u8]),
    /// The key's saved row is the value of its `timers_by_time` row under this listing.
    WithListing(Wake, Timestamp),
}

/// The tag of a `spilled` value holding the saved row.
const SAVED_HERE: u8 = 0;
/// The tag of a `spilled` value naming the listing that holds it.
const SAVED_WITH_LISTING: u8 = 1;

/// A `spilled` row's value holding `saved_row` ([`SpilledRow::Here`]).
pub fn spilled_here(saved_row: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + saved_row.len());
    out.push(SAVED_HERE);
    out.extend_from_slice(saved_row);
    out
}

/// A `spilled` row's value naming the listing whose row holds the saved row
/// ([`SpilledRow::WithListing`]).
pub fn spilled_with_listing(wake: Wake, at: Timestamp) -> Vec<u8> {
    let mut out = Vec::with_capacity(10);
    out.extend_from_slice(&[SAVED_WITH_LISTING, wake.index()]);
    out.extend_from_slice(&time_bytes(at));
    out
}

/// What a `spilled` row's value says; `None` for a damaged one.
pub fn read_spilled(value: &[u8]) -> Option<SpilledRow<'_>> {
    match *value.first()? {
        SAVED_HERE => Some(SpilledRow::Here(&value[1..])),
        SAVED_WITH_LISTING if value.len() == 10 => Some(SpilledRow::WithListing(
            Wake::from_index(value[1])?,
            time_of(&value[2..])?,
        )),
        _ => None,
    }
}

/// The kind tag of a `state` row, after the state id.
pub const VALUE: u8 = 0;
/// A list item's row.
pub const LIST_ITEM: u8 = 1;
/// A map entry's row.
pub const MAP_ENTRY: u8 = 2;

/// The prefix of every row of record key `key` (see the module docs). Fails for a key
/// over [`MAX_KEY_BYTES`].
pub fn key_prefix(key: &[u8]) -> anyhow::Result<Vec<u8>> {
    anyhow::ensure!(
        key.len() <= MAX_KEY_BYTES,
        "a record key of {} bytes is over the disk state backend's limit of {MAX_KEY_BYTES}",
        key.len()
    );
    let mut out = Vec::with_capacity(4 + key.len() + 16);
    out.extend_from_slice(&key_group(key).to_be_bytes());
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(key);
    Ok(out)
}

/// The record key of a row that starts with a key prefix, and the rest of the row's key.
pub fn split_prefix(row: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u16::from_be_bytes(row.get(2..4)?.try_into().ok()?) as usize;
    let key = row.get(4..4 + len)?;
    Some((key, &row[4 + len..]))
}

/// The length of the key prefix a row starts with.
pub fn prefix_len(row: &[u8]) -> Option<usize> {
    split_prefix(row).map(|(key, _)| 4 + key.len())
}

/// The prefix of every `state` row of `state` of the key whose prefix is `prefix`, with
/// its kind tag.
pub fn state_prefix(prefix: &[u8], state: StateId, tag: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 5 + 8);
    out.extend_from_slice(prefix);
    out.extend_from_slice(&state.to_be_bytes());
    out.push(tag);
    out
}

/// A `state` row's state id and kind tag, and what follows them, from the part after
/// the key prefix.
pub fn split_state(rest: &[u8]) -> Option<(StateId, u8, &[u8])> {
    let state = StateId::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    Some((state, *rest.get(4)?, &rest[5..]))
}

/// A time as 8 bytes that sort as the numbers do.
pub fn time_bytes(at: Timestamp) -> [u8; 8] {
    ((at as u64) ^ (1 << 63)).to_be_bytes()
}

/// The time [`time_bytes`] wrote.
pub fn time_of(bytes: &[u8]) -> Option<Timestamp> {
    let raw = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    Some((raw ^ (1 << 63)) as Timestamp)
}

/// A clock's byte in timer rows.
pub fn domain_byte(domain: TimeDomain) -> u8 {
    match domain {
        TimeDomain::EventTime => 0,
        TimeDomain::ProcessingTime => 1,
    }
}

/// The clock of a timer row's domain byte.
pub fn domain_of(byte: u8) -> Option<TimeDomain> {
    match byte {
        0 => Some(TimeDomain::EventTime),
        1 => Some(TimeDomain::ProcessingTime),
        _ => None,
    }
}

/// A `timers_by_key` row: the key's prefix, the domain and the time.
pub fn timer_by_key(prefix: &[u8], domain: TimeDomain, at: Timestamp) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 9);
    out.extend_from_slice(prefix);
    out.push(domain_byte(domain));
    out.extend_from_slice(&time_bytes(at));
    out
}

/// A `timers_by_time` row: the listing, the time, the key's tie order and the key's
/// prefix.
pub fn timer_by_time(prefix: &[u8], wake: Wake, at: Timestamp) -> Vec<u8> {
    let key = split_prefix(prefix).map_or(&[][..], |(key, _)| key);
    let mut out = Vec::with_capacity(prefix.len() + 17);
    out.extend_from_slice(&place_bytes(
        wake,
        FiringPlace {
            at,
            tie: tie_order(key),
        },
    ));
    out.extend_from_slice(prefix);
    out
}

/// The first 17 bytes of `timers_by_time` rows at `place` of listing `wake`.
pub fn place_bytes(wake: Wake, place: FiringPlace) -> [u8; 17] {
    let mut out = [0; 17];
    out[0] = wake.index();
    out[1..9].copy_from_slice(&time_bytes(place.at));
    out[9..].copy_from_slice(&place.tie.to_be_bytes());
    out
}

/// The place in firing order and the record key of a `timers_by_time` row.
pub fn split_timer_by_time(row: &[u8]) -> Option<(FiringPlace, &[u8])> {
    let at = time_of(row.get(1..9)?)?;
    let tie = u64::from_be_bytes(row.get(9..17)?.try_into().ok()?);
    let (key, _) = split_prefix(row.get(17..)?)?;
    Some((FiringPlace { at, tie }, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_sort_as_numbers_and_read_back() {
        let times = [i64::MIN, -5, -1, 0, 1, 7, 1_700_000_000_000, i64::MAX];
        let bytes: Vec<[u8; 8]> = times.iter().map(|&t| time_bytes(t)).collect();
        assert!(bytes.windows(2).all(|w| w[0] < w[1]));
        for (t, b) in times.iter().zip(&bytes) {
            assert_eq!(time_of(b), Some(*t));
        }
    }

    #[test]
    fn a_keys_slots_and_timers_read_back_from_one_row() {
        let slots = vec![
            (0, Slot::Value(b"v".to_vec())),
            (3, Slot::List(vec![b"a".to_vec(), vec![], b"c".to_vec()])),
            (
                1,
                Slot::Map([(b"k".to_vec(), b"x".to_vec())].into_iter().collect()),
            ),
        ];
        let saved = SavedKey {
            slots,
            timers: vec![(TimeDomain::EventTime, -5), (TimeDomain::ProcessingTime, 9)],
            expiry: vec![(TimeDomain::ProcessingTime, 12)],
        };
        let row = encode_saved(&saved);
        assert_eq!(decode_saved(&row).unwrap(), saved);
        assert!(decode_saved(&row[..row.len() - 1]).is_err(), "cut short");
    }

    #[test]
    fn a_spilled_value_says_where_the_saved_row_is() {
        let here = spilled_here(b"row");
        assert_eq!(read_spilled(&here), Some(SpilledRow::Here(b"row")));
        let wake = Wake::Expiry(TimeDomain::ProcessingTime);
        let listed = spilled_with_listing(wake, -7);
        assert_eq!(
            read_spilled(&listed),
            Some(SpilledRow::WithListing(wake, -7))
        );
        assert_eq!(read_spilled(&listed[..9]), None, "cut short");
        assert_eq!(read_spilled(&[]), None);
        assert_eq!(read_spilled(&[9, 0]), None, "an unknown tag");
    }

    #[test]
    fn a_key_prefix_is_no_other_keys_prefix() {
        let a = key_prefix(b"ab").unwrap();
        let b = key_prefix(b"abc").unwrap();
        assert!(!b.starts_with(&a) && !a.starts_with(&b));
        let row = state_prefix(&b, 3, MAP_ENTRY);
        let (key, rest) = split_prefix(&row).unwrap();
        assert_eq!(key, b"abc");
        assert_eq!(split_state(rest), Some((3, MAP_ENTRY, &[][..])));
        assert!(key_prefix(&vec![0; MAX_KEY_BYTES + 1]).is_err());
    }
}
