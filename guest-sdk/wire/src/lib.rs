//! The byte layout of Weir's batched calls (`weir:udf/batch`), shared by the host and
//! the Rust SDK.
//!
//! A call across the component boundary costs far more than the work most UDFs do per
//! element (lifting, lowering and an allocation in the guest for every import). The
//! batch interface moves a run of elements and timers, with the state of every key they
//! touch, into the guest in one buffer, and brings back the state writes, timer requests,
//! emitted records and log lines in another. UDF authors still write one call per
//! element and per timer; only the SDK and the host see this format.
//!
//! All integers are little-endian; `bytes` is a `u32` length and the bytes.
//!
//! ```text
//! batch   := processing_time:i64  n_keys:u32 key*  n_entries:u32 entry*
//! key     := bytes  n_slots:u32 (state:u32 slot)*
//! slot    := 0 bytes                      value state
//!          | 1 n:u32 bytes*               list state
//!          | 2 n:u32 (bytes bytes)*       map state
//! entry   := 0 key:u32 input:u32 ts:i64 watermark:i64 watermark_after:i64 bytes   element
//!          | 1 key:u32 domain:u8 ts:i64 watermark:i64                             timer
//!
//! effects := consumed:u32 skipped:u32  n:u32 write*  n:u32 timer_op*  n:u32 emit*  n:u32 log*
//! write   := key:u32 state:u32 op:u8 ...
//!            op 0                         clears the state
//!            op 1 slot                    replaces it
//!            op 2 bytes                   appends an item to a list     (cached only)
//!            op 3 bytes bytes             puts a map entry              (cached only)
//!            op 4 bytes                   removes a map entry           (cached only)
//!            op 5                         the state was read whole      (time-to-live only)
//!            op 6 bytes                   a map entry was read          (time-to-live only)
//!            op | 0x80 at:i64 ...         the same, done by a call at time `at`
//! timer_op:= key:u32 domain:u8 op:u8 ts:i64          op 0 registers, 1 deletes
//! emit    := output:u32 ts:i64 (0 | 1 bytes) bytes   optional key, then value
//! log     := key:u32 level:u8 bytes
//! ```
//!
//! The cached batch (`weir:udf/cached-batch`) differs in its header and its keys:
//!
//! ```text
//! cached  := epoch:u64 processing_time:i64  n_keys:u32 ckey*  n_entries:u32 entry*
//! ckey    := id:u32 bytes (0 | (1 | 2) n_slots:u32 (state:u32 slot)*)
//! ```
//!
//! `id` is the host's number for the key while it is live (the guest files its copies
//! under it, so finding one costs no hashing of key bytes; a number the host gives to
//! another key later comes with tag 1 or 2). A key with tag 0 comes without its state:
//! the guest's copy, from an earlier batch of the same `epoch`, is current. With tag 1 the
//! state comes whole and the guest keeps its copy after the batch; with tag 2 it comes
//! whole and the guest drops it after the batch (the host keeps a key from the second
//! batch that touches it on, so that keys touched once cost the guest nothing). A key
//! without state is never tag 0. When `epoch` differs from the one of the guest's copies, the guest drops
//! them all first; the host starts a new epoch whenever it cannot vouch for them (a new
//! instance, a failed batch, or enough state sent that the guest's memory needs it back).
//! A tag-0 key the guest holds no copy of is an error. Writes may be operations (2, 3, 4)
//! instead of whole slots; either way the host's copy is current after every batch.
//!
//! Writes to a state declared with a time-to-live carry the time of the call that did
//! them (`op | 0x80`, then `at`): the stamp the host keeps with what they wrote, from
//! which the entries' time-to-live runs. For such states the SDK writes lists and maps
//! as operations on both paths, so that each item keeps its own stamp, and reports the
//! reads (5, 6) of states whose time-to-live reads refresh; the host ignores both for
//! other states. The state the host sends never holds an expired entry: it removes them
//! before each batch, and cuts a batch where the watermark would pass an expiry.
//!
//! `watermark` is the watermark while the entry is processed; `watermark_after` is the
//! watermark once an element has been processed. Timer entries are still pending in the
//! host while the batch runs; the host removes the consumed ones before it applies the
//! effects, so a timer the UDF deletes or registers again behaves as with single calls.
//! `skipped` counts consumed timer entries that did not fire because the UDF deleted
//! them first. The guest stops early (returning how
//! many entries it `consumed`) when a timer it registered becomes due inside the batch,
//! so that the host fires it in order; the host sends the rest again.

#![forbid(unsafe_code)]

/// A malformed buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub &'static str);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed batch buffer: {}", self.0)
    }
}

impl std::error::Error for WireError {}

pub type Result<T> = std::result::Result<T, WireError>;

/// Timer domain codes.
pub const EVENT_TIME: u8 = 0;
pub const PROCESSING_TIME: u8 = 1;

/// Entry tags.
pub const ELEMENT: u8 = 0;
pub const TIMER: u8 = 1;

/// State write operations.
pub const WRITE_CLEAR: u8 = 0;
pub const WRITE_SET: u8 = 1;
pub const WRITE_LIST_APPEND: u8 = 2;
pub const WRITE_MAP_PUT: u8 = 3;
pub const WRITE_MAP_REMOVE: u8 = 4;
/// The state was read whole (a value get, a list get, a map iteration).
pub const WRITE_READ: u8 = 5;
/// One map entry was read.
pub const WRITE_MAP_READ: u8 = 6;
/// Flag on a write's op: the time of the call that did it follows (`at:i64`).
pub const WRITE_AT: u8 = 0x80;

/// Key tags of the cached batch.
pub const KEY_CACHED: u8 = 0;
pub const KEY_SENT: u8 = 1;
pub const KEY_SENT_ONCE: u8 = 2;

/// Timer operation codes.
pub const REGISTER: u8 = 0;
pub const DELETE: u8 = 1;

/// The contents of one state of one key, borrowed from a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotRef<'a> {
    Value(&'a [u8]),
    List(Vec<&'a [u8]>),
    Map(Vec<(&'a [u8], &'a [u8])>),
}

/// Appends values to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(n: usize) -> Self {
        Self {
            buf: Vec::with_capacity(n),
        }
    }

    #[inline]
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    #[inline]
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    #[inline]
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    #[inline]
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    #[inline]
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
    }

    /// Reserves a `u32` to be filled in later (a count not known yet); returns its offset.
    pub fn placeholder(&mut self) -> usize {
        let at = self.buf.len();
        self.u32(0);
        at
    }

    pub fn patch_u32(&mut self, at: usize, v: u32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Writes a slot: `kind` 0 value, 1 list, 2 map.
    pub fn value_slot(&mut self, value: &[u8]) {
        self.u8(0);
        self.bytes(value);
    }

    pub fn list_slot<'a>(&mut self, items: impl ExactSizeIterator<Item = &'a [u8]>) {
        self.u8(1);
        self.u32(items.len() as u32);
        for item in items {
            self.bytes(item);
        }
    }

    pub fn map_slot<'a>(&mut self, entries: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>) {
        self.u8(2);
        self.u32(entries.len() as u32);
        for (k, v) in entries {
            self.bytes(k);
            self.bytes(v);
        }
    }
}

/// Reads values from a buffer, failing on truncation.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(WireError("truncated"));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    #[inline]
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    #[inline]
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    #[inline]
    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    #[inline]
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// A count of items that each take at least `min_size` bytes, checked against what
    /// is left so a corrupt count cannot make the reader allocate without bound.
    pub fn count(&mut self, min_size: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size) > self.buf.len() {
            return Err(WireError("count larger than the buffer"));
        }
        Ok(n)
    }

    pub fn slot(&mut self) -> Result<SlotRef<'a>> {
        match self.u8()? {
            0 => Ok(SlotRef::Value(self.bytes()?)),
            1 => {
                let n = self.count(4)?;
                (0..n)
                    .map(|_| self.bytes())
                    .collect::<Result<_>>()
                    .map(SlotRef::List)
            }
            2 => {
                let n = self.count(8)?;
                (0..n)
                    .map(|_| Ok((self.bytes()?, self.bytes()?)))
                    .collect::<Result<_>>()
                    .map(SlotRef::Map)
            }
            _ => Err(WireError("unknown slot kind")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut w = Writer::new();
        w.i64(-5);
        let at = w.placeholder();
        w.bytes(b"key");
        w.value_slot(b"v");
        w.list_slot([&b"a"[..], b"bc"].into_iter());
        w.map_slot([(&b"k"[..], &b"v"[..])].into_iter());
        w.patch_u32(at, 7);
        let mut r = Reader::new(&w.buf);
        assert_eq!(r.i64().unwrap(), -5);
        assert_eq!(r.u32().unwrap(), 7);
        assert_eq!(r.bytes().unwrap(), b"key");
        assert_eq!(r.slot().unwrap(), SlotRef::Value(b"v"));
        assert_eq!(r.slot().unwrap(), SlotRef::List(vec![b"a", b"bc"]));
        assert_eq!(r.slot().unwrap(), SlotRef::Map(vec![(b"k", b"v")]));
        assert!(r.is_empty());
    }

    #[test]
    fn truncated_and_corrupt_buffers_are_errors() {
        assert_eq!(Reader::new(&[1, 2]).u32(), Err(WireError("truncated")));
        let mut w = Writer::new();
        w.u32(1_000_000);
        assert!(Reader::new(&w.buf).count(4).is_err());
        assert!(Reader::new(&[9]).slot().is_err());
    }
}
