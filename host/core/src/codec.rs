//! A small binary encoding for checkpoint sections: fixed-width little-endian integers
//! and length-prefixed byte strings. State is bytes already (the guest's encoding), so
//! this only frames it; a truncated or garbled section is an error, never a panic.

/// Appends values to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(u32::try_from(v.len()).expect("a state value over 4 GiB"));
        self.buf.extend_from_slice(v);
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

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
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    /// The next `n` bytes, unframed.
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

    pub fn u8(&mut self) -> anyhow::Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into()?))
    }

    pub fn u64(&mut self) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into()?))
    }

    pub fn i64(&mut self) -> anyhow::Result<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into()?))
    }

    pub fn bytes(&mut self) -> anyhow::Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

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
