//! Record keys: their bytes, their small ids inside one run, and the fixed order in which
//! keys take turns when their timers are due at the same time.

use smallvec::SmallVec;

/// A record key: inline up to 24 bytes, on the heap beyond.
pub type Key = SmallVec<[u8; 24]>;

/// A key's index in the [`KeyTable`](crate::state::KeyTable); stable for as long as the
/// key has state or timers. Ids are not stable across runs: never order by them.
pub type KeyId = u32;

/// The key's place among keys whose timers are due at the same time: the 64-bit FNV-1a
/// hash of its bytes. Fixed, so the same key hashes the same in every run and every build,
/// and a run restored from a checkpoint fires same-time timers in the same order as the
/// run that wrote it (see [`timers`](crate::time::timers)).
pub fn tie_order(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The number of key groups: the unit in which keys are spread over a pipeline's shards
/// and in which a checkpoint's keyed state is redistributed when it is restored at
/// another parallelism (Flink's maximum parallelism). Fixed, so that a key's group is
/// the same in every run and every build.
pub const KEY_GROUPS: u16 = 128;

/// The number of record numbering slots in a shard: one per key group, then one per
/// shard (`KEY_GROUPS + shard`) for the records a shard emits without a key or keyed by
/// a key of another shard's group, which only that shard numbers. At most 256, since a
/// grouped sequence number ([`crate::output::Sequence`]) keeps the slot in 8 bits.
pub const NUMBERING_SLOTS: u16 = 2 * KEY_GROUPS;

/// The key group of a key: its FNV-1a hash ([`tie_order`]), mixed by MurmurHash3's
/// 64-bit finaliser so that every bit of the hash reaches the low bits, modulo
/// [`KEY_GROUPS`].
pub fn key_group(key: &[u8]) -> u16 {
    let mut h = tie_order(key);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    (h % u64::from(KEY_GROUPS)) as u16
}

/// The shard that owns key group `group` when `parallelism` shards run: contiguous
/// ranges of groups, as Flink assigns them (`group * parallelism / groups`), so every
/// shard owns `groups / parallelism` groups, give or take one.
pub fn shard_of_group(group: u16, parallelism: usize) -> usize {
    usize::from(group) * parallelism / usize::from(KEY_GROUPS)
}

/// The shard that owns `key` when `parallelism` shards run.
pub fn shard_of(key: &[u8], parallelism: usize) -> usize {
    if parallelism == 1 {
        return 0;
    }
    shard_of_group(key_group(key), parallelism)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_groups_are_fixed_and_spread_keys_evenly() {
        // Fixed values: a checkpoint's keys land in the same groups in every build.
        let groups: Vec<u16> = [&b"ad-1"[..], b"ad-2", b"user-42"]
            .iter()
            .map(|k| key_group(k))
            .collect();
        assert_eq!(groups, FIXED_GROUPS);
        let mut per_group = vec![0u32; usize::from(KEY_GROUPS)];
        for i in 0..128_000 {
            per_group[usize::from(key_group(format!("ad-{i}").as_bytes()))] += 1;
        }
        let (least, most) = (
            *per_group.iter().min().unwrap(),
            *per_group.iter().max().unwrap(),
        );
        assert!(least > 850 && most < 1150, "{least}..{most} keys per group");
    }

    #[test]
    fn shards_own_contiguous_ranges_of_groups() {
        for parallelism in [1, 2, 3, 4, 7, 128] {
            let owners: Vec<usize> = (0..KEY_GROUPS)
                .map(|g| shard_of_group(g, parallelism))
                .collect();
            assert!(owners.windows(2).all(|w| w[0] <= w[1]));
            assert_eq!(owners[0], 0);
            assert_eq!(*owners.last().unwrap(), parallelism - 1);
            for shard in 0..parallelism {
                let owned = owners.iter().filter(|&&o| o == shard).count();
                let even = usize::from(KEY_GROUPS) / parallelism;
                assert!(owned == even || owned == even + 1, "{parallelism}: {owned}");
            }
        }
        assert_eq!(shard_of(b"anything", 1), 0);
    }

    /// The groups of `ad-1`, `ad-2` and `user-42`, as first computed.
    const FIXED_GROUPS: [u16; 3] = [75, 71, 13];

    #[test]
    fn tie_order_is_fnv1a_64() {
        // Published FNV-1a 64-bit test vectors.
        assert_eq!(tie_order(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(tie_order(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(tie_order(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
