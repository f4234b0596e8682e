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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tie_order_is_fnv1a_64() {
        // Published FNV-1a 64-bit test vectors.
        assert_eq!(tie_order(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(tie_order(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(tie_order(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
