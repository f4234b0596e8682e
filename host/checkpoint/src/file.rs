//! One checkpoint file: a header, a JSON section anyone can read, the sinks' saved
//! state, the keyed-state changes, and a CRC-32 of all of it.
//!
//! ```text
//! "WEIRCKP1"  u64 meta length, meta (JSON)  u64 sinks length, sinks  u64 keyed length, keyed  u32 crc32
//! ```
//!
//! A file that is cut short, has a bad checksum or does not parse is refused as a whole,
//! so a checkpoint is loaded either entirely or not at all.

use super::Meta;
use anyhow::Context as _;
use weir_core::codec::{Reader, Writer};
use weir_core::output::SinkState;

const MAGIC: &[u8; 8] = b"WEIRCKP1";

/// A checkpoint as written: what it describes, and its keyed-state section.
#[derive(Debug)]
pub struct CheckpointFile {
    /// The JSON section: epoch and parent, pipeline and UDF, positions, watermarks and
    /// counters.
    pub meta: Meta,
    /// One per output, in output order.
    pub sinks: Vec<SinkState>,
    /// Keyed state: the whole of it, or the changes since the parent checkpoint.
    pub keyed: Vec<u8>,
}

impl CheckpointFile {
    /// The file's bytes: header, the three sections with their lengths, and the CRC-32
    /// of everything before it (see the module docs).
    pub fn encode(&self) -> anyhow::Result<Vec<u8>> {
        let meta = serde_json::to_vec_pretty(&self.meta)?;
        let mut sinks = Writer::default();
        sinks.u32(self.sinks.len() as u32);
        for sink in &self.sinks {
            match sink.length {
                Some(length) => {
                    sinks.u8(1);
                    sinks.u64(length);
                }
                None => sinks.u8(0),
            }
            sinks.bytes(&sink.data);
        }
        let sinks = sinks.into_inner();
        let mut out = Vec::with_capacity(8 + 28 + meta.len() + sinks.len() + self.keyed.len());
        out.extend_from_slice(MAGIC);
        for section in [&meta[..], &sinks, &self.keyed] {
            out.extend_from_slice(&(section.len() as u64).to_le_bytes());
            out.extend_from_slice(section);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Reads a file's bytes back. Fails, saying why, if they do not start with the
    /// header, fail the checksum, are cut short or do not parse; nothing is returned
    /// from a file that is not whole.
    pub fn decode(data: &[u8]) -> anyhow::Result<Self> {
        anyhow::ensure!(
            data.len() >= MAGIC.len() + 4 && &data[..MAGIC.len()] == MAGIC,
            "not a weir checkpoint (or cut short)"
        );
        let (body, crc) = data.split_at(data.len() - 4);
        let expected = u32::from_le_bytes(crc.try_into()?);
        let actual = crc32fast::hash(body);
        anyhow::ensure!(
            actual == expected,
            "checksum mismatch (stored {expected:08x}, computed {actual:08x}): the file is damaged"
        );
        let mut reader = Reader::new(&body[MAGIC.len()..]);
        let mut section = || -> anyhow::Result<&[u8]> {
            let n = reader.u64()? as usize;
            reader.raw(n)
        };
        let meta = section()?;
        let sinks = section()?;
        let keyed = section()?;
        let meta: Meta = serde_json::from_slice(meta).context("meta section")?;
        let mut r = Reader::new(sinks);
        let count = r.u32()?;
        let mut states = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let length = match r.u8()? {
                0 => None,
                _ => Some(r.u64()?),
            };
            states.push(SinkState {
                length,
                data: r.bytes()?.to_vec(),
            });
        }
        r.finish().context("sinks section")?;
        Ok(Self {
            meta,
            sinks: states,
            keyed: keyed.to_vec(),
        })
    }
}
