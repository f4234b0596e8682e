//! A small binary encoding for checkpoint sections: fixed-width little-endian integers
//! and length-prefixed byte strings. State is bytes already (the guest's encoding), so
//! this only frames it; a truncated or garbled section is an error, never a panic.

/// Appends values to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// Appends one byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Appends `v` as 4 little-endian bytes.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends `v` as 8 little-endian bytes.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends `v` as 8 little-endian bytes (two's complement).
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends a byte string: its length as a `u32`, then the bytes.
    ///
    /// # Panics
    ///
    /// If `v` is 4 GiB or longer, which a `u32` length cannot frame.
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(u32::try_from(v.len()).expect("a state value over 4 GiB"));
        self.buf.extend_from_slice(v);
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing has been written yet.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes written, in order.
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads values back, failing cleanly at the end of the input.
#[derive(Debug)]
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    /// The next `n` bytes, unframed (no length prefix), borrowed from the input; an
    /// error if fewer are left.
    pub fn raw(&mut self, n: usize) -> anyhow::Result<&'a [u8]> {
        self.take(n)
    }

    fn take(&mut self, n: usize) -> anyhow::Result<&'a [u8]> {
        anyhow::ensure!(
            self.data.len() >= n,
            "truncated: wanted {n} more bytes, {} left",
            self.data.len()
        );
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }

    /// The next byte; an error if none is left.
    pub fn u8(&mut self) -> anyhow::Result<u8> {
        Ok(self.take(1)?[0])
    }

    /// The next 4 bytes as a little-endian `u32`; an error if fewer are left.
    pub fn u32(&mut self) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into()?))
    }

    /// The next 8 bytes as a little-endian `u64`; an error if fewer are left.
    pub fn u64(&mut self) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into()?))
    }

    /// The next 8 bytes as a little-endian `i64`; an error if fewer are left.
    pub fn i64(&mut self) -> anyhow::Result<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into()?))
    }

    /// The next byte string as [`Writer::bytes`] framed it (a `u32` length, then that
    /// many bytes), borrowed from the input; an error if it is cut short.
    pub fn bytes(&mut self) -> anyhow::Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// Whether everything has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Fails if anything is left over: a section must be read whole.
    pub fn finish(self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.data.is_empty(),
            "{} unexpected bytes at the end",
            self.data.len()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut w = Writer::default();
        w.u8(7);
        w.u32(70_000);
        w.i64(-5);
        w.bytes(b"key");
        let data = w.into_inner();
        let mut r = Reader::new(&data);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u32().unwrap(), 70_000);
        assert_eq!(r.i64().unwrap(), -5);
        assert_eq!(r.bytes().unwrap(), b"key");
        r.finish().unwrap();
        let mut short = Reader::new(&data[..data.len() - 1]);
        short.u8().unwrap();
        short.u32().unwrap();
        short.i64().unwrap();
        assert!(short.bytes().is_err());
    }
}
