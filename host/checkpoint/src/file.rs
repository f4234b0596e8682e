//! One checkpoint file: a header, a JSON section anyone can read, the sinks' saved
//! state, the keyed-state section in parts, and a CRC-32 of all of it.
//!
//! ```text
//! "WEIRCKP2"  u64 meta length, meta (JSON)  u64 sinks length, sinks
//!             (u64 part length, part)*  u64 0  u32 crc32
//! ```
//!
//! The keyed section comes in parts, each a whole number of keys' records, so that a
//! checkpoint is written and read a part at a time: neither the writer nor a restore
//! holds the whole section of a large state in memory. Files of the first format
//! (`"WEIRCKP1"`: the keyed section as one `u64`-length-prefixed block, then the CRC)
//! still read, as one part.
//!
//! A file that is cut short, has a bad checksum or does not parse is refused as a whole:
//! [`read`] checks the checksum only at the end, so a run first reads a file through
//! (handing its parts to nothing) before it applies any of it, and a checkpoint is
//! loaded either entirely or not at all.

use crate::meta::Meta;
use anyhow::Context as _;
use std::io::{Read, Write};
use weir_core::codec::{Reader, Writer};
use weir_core::output::SinkState;

const MAGIC: &[u8; 8] = b"WEIRCKP2";
const MAGIC_V1: &[u8; 8] = b"WEIRCKP1";

/// A checkpoint as the run hands it over: what it describes, and the parts of its keyed
/// section encoded on the run's thread.
#[derive(Debug, Clone)]
pub struct CheckpointFile {
    /// The JSON section: epoch and parent, pipeline and UDF, positions, watermarks and
    /// counters.
    pub meta: Meta,
    /// One per output, in output order.
    pub sinks: Vec<SinkState>,
    /// Keyed state, in parts of whole keys' records: the whole of it, or the changes
    /// since the parent checkpoint (a checkpoint written with [`KeyedLater`] has more
    /// parts after these).
    pub keyed: Vec<Vec<u8>>,
}

/// The parts of a keyed section that are made on the checkpoint writer's thread, after
/// [`CheckpointFile::keyed`] (keys read from a snapshot of the state store): it hands
/// each part, a whole number of keys' records, to the function it is given, in order.
pub type KeyedLater =
    Box<dyn FnOnce(&mut dyn FnMut(&[u8]) -> anyhow::Result<()>) -> anyhow::Result<()> + Send>;

/// What a run reads of a checkpoint whole: its meta and sinks sections. The keyed
/// section is read a part at a time ([`read`]).
#[derive(Debug, Clone)]
pub struct CheckpointHead {
    /// As [`CheckpointFile::meta`].
    pub meta: Meta,
    /// As [`CheckpointFile::sinks`].
    pub sinks: Vec<SinkState>,
}

impl CheckpointFile {
    /// The file's bytes (see the module docs), in memory.
    #[cfg(test)]
    pub(crate) fn encode(&self) -> anyhow::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.clone().write_to(&mut out, None)?;
        Ok(out)
    }

    /// The size of the file [`write_to`](Self::write_to) writes without `later` parts.
    pub fn encoded_len(&self) -> anyhow::Result<u64> {
        let (meta, sinks) = self.head_sections()?;
        let parts: u64 = self
            .keyed
            .iter()
            .filter(|part| !part.is_empty())
            .map(|part| 8 + part.len() as u64)
            .sum();
        Ok(MAGIC.len() as u64 + 16 + (meta.len() + sinks.len()) as u64 + parts + 8 + 4)
    }

    /// Writes the file to `out`, its keyed section's parts as they come: this file's,
    /// each freed once written (the keys in memory of a full checkpoint may be a cache's
    /// worth, and `later`'s parts take long to read), then those `later` makes. Returns
    /// the bytes written. Fails if `out` or `later` fails; what was written then is not a
    /// checkpoint (it has no checksum).
    pub fn write_to(
        mut self,
        out: &mut dyn Write,
        later: Option<KeyedLater>,
    ) -> anyhow::Result<u64> {
        let (meta, sinks) = self.head_sections()?;
        let mut out = Hashing::new(out);
        out.write_all(MAGIC)?;
        for section in [&meta, &sinks] {
            out.write_all(&(section.len() as u64).to_le_bytes())?;
            out.write_all(section)?;
        }
        let mut part = |part: &[u8]| -> anyhow::Result<()> {
            if !part.is_empty() {
                out.write_all(&(part.len() as u64).to_le_bytes())?;
                out.write_all(part)?;
            }
            Ok(())
        };
        for keyed in std::mem::take(&mut self.keyed) {
            part(&keyed)?;
        }
        if let Some(later) = later {
            later(&mut part)?;
        }
        out.write_all(&0u64.to_le_bytes())?;
        let crc = out.crc.clone().finalize();
        out.inner.write_all(&crc.to_le_bytes())?;
        Ok(out.written + 4)
    }

    /// Reads a whole file's bytes back, its keyed parts kept. Fails as [`read`] does.
    #[cfg(test)]
    pub(crate) fn decode(data: &[u8]) -> anyhow::Result<Self> {
        let mut keyed = Vec::new();
        let (head, _) = read(&mut &data[..], &mut |part| {
            keyed.push(part.to_vec());
            Ok(())
        })?;
        Ok(Self {
            meta: head.meta,
            sinks: head.sinks,
            keyed,
        })
    }

    fn head_sections(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
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
        Ok((meta, sinks.into_inner()))
    }
}

/// Reads a checkpoint from `input` to its end: returns its head and its size in bytes,
/// and hands each part of its keyed section to `keyed` as it is read (one part at a time
/// in memory). Fails, saying why, if the bytes do not start with the header, are cut
/// short, do not parse, go on past the checksum or fail it; the parts handed over before
/// that are not to be trusted, so read a file through once before applying its parts.
pub fn read(
    input: &mut dyn Read,
    keyed: &mut dyn FnMut(&[u8]) -> anyhow::Result<()>,
) -> anyhow::Result<(CheckpointHead, u64)> {
    let mut input = Hashing::new(input);
    let mut magic = [0u8; 8];
    read_exactly(&mut input, &mut magic).context("not a weir checkpoint (or cut short)")?;
    let first_format = match &magic {
        MAGIC => false,
        MAGIC_V1 => true,
        _ => anyhow::bail!("not a weir checkpoint"),
    };
    let meta = read_block(&mut input).context("meta section")?;
    let sinks = read_block(&mut input).context("sinks section")?;
    let meta: Meta = serde_json::from_slice(&meta).context("meta section")?;
    let sinks = decode_sinks(&sinks).context("sinks section")?;
    if first_format {
        keyed(&read_block(&mut input).context("keyed section")?)?;
    } else {
        let mut part = Vec::new();
        loop {
            let length = read_u64(&mut input).context("keyed section")?;
            if length == 0 {
                break;
            }
            read_n(&mut input, length, &mut part).context("keyed section")?;
            keyed(&part)?;
        }
    }
    let actual = input.crc.clone().finalize();
    let mut crc = [0u8; 4];
    read_exactly(&mut input.inner, &mut crc).context("cut short before its checksum")?;
    let expected = u32::from_le_bytes(crc);
    anyhow::ensure!(
        actual == expected,
        "checksum mismatch (stored {expected:08x}, computed {actual:08x}): the file is damaged"
    );
    anyhow::ensure!(
        input.inner.read(&mut [0u8; 1])? == 0,
        "bytes after the checksum: the file is damaged"
    );
    Ok((CheckpointHead { meta, sinks }, input.written + 4))
}

fn decode_sinks(data: &[u8]) -> anyhow::Result<Vec<SinkState>> {
    let mut r = Reader::new(data);
    let count = r.u32()?;
    let mut states = Vec::with_capacity(count.min(1 << 16) as usize);
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
    r.finish()?;
    Ok(states)
}

fn read_u64(input: &mut dyn Read) -> anyhow::Result<u64> {
    let mut bytes = [0u8; 8];
    read_exactly(input, &mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

/// A `u64`-length-prefixed block.
fn read_block(input: &mut dyn Read) -> anyhow::Result<Vec<u8>> {
    let length = read_u64(input)?;
    let mut block = Vec::new();
    read_n(input, length, &mut block)?;
    Ok(block)
}

/// Reads `n` bytes into `into` (replacing what it held). A damaged length reads to the
/// end of the input and fails, without allocating what it claims.
fn read_n(input: &mut dyn Read, n: u64, into: &mut Vec<u8>) -> anyhow::Result<()> {
    into.clear();
    Read::take(&mut *input, n).read_to_end(into)?;
    anyhow::ensure!(into.len() as u64 == n, "cut short");
    Ok(())
}

fn read_exactly(input: &mut dyn Read, into: &mut [u8]) -> anyhow::Result<()> {
    input.read_exact(into).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => anyhow::anyhow!("cut short"),
        _ => e.into(),
    })
}

/// A reader or writer that keeps the CRC-32 and count of the bytes through it.
struct Hashing<T> {
    inner: T,
    crc: crc32fast::Hasher,
    written: u64,
}

impl<T> Hashing<T> {
    fn new(inner: T) -> Self {
        Self {
            inner,
            crc: crc32fast::Hasher::new(),
            written: 0,
        }
    }
}

impl<T: Write> Write for Hashing<T> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<T: Read> Read for Hashing<T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(keyed: Vec<Vec<u8>>) -> CheckpointFile {
        CheckpointFile {
            meta: crate::tests::meta(1, None),
            sinks: vec![SinkState {
                length: Some(7),
                data: b"sink".to_vec(),
            }],
            keyed,
        }
    }

    #[test]
    fn parts_written_now_and_later_read_back_one_at_a_time_in_order() {
        let file = file(vec![b"first".to_vec(), vec![], b"second".to_vec()]);
        let mut out = Vec::new();
        let later: KeyedLater = Box::new(|part| {
            part(b"third")?;
            part(b"fourth")
        });
        let size = file.clone().write_to(&mut out, Some(later)).unwrap();
        assert_eq!(size, out.len() as u64);
        let mut parts = Vec::new();
        let (head, read_size) = read(&mut &out[..], &mut |part| {
            parts.push(String::from_utf8(part.to_vec()).unwrap());
            Ok(())
        })
        .unwrap();
        assert_eq!(parts, ["first", "second", "third", "fourth"]);
        assert_eq!(head.meta, file.meta);
        assert_eq!(head.sinks, file.sinks);
        assert_eq!(read_size, size);
        assert_eq!(
            file.encode().unwrap().len() as u64,
            file.encoded_len().unwrap()
        );
    }

    #[test]
    fn a_damaged_or_cut_short_file_is_refused_after_its_parts_were_read() {
        let data = file(vec![vec![9; 50], vec![8; 30]]).encode().unwrap();
        for cut in [0, 7, 20, data.len() - 9, data.len() - 1] {
            let err = CheckpointFile::decode(&data[..cut]).unwrap_err();
            assert!(
                format!("{err:#}").contains("cut short"),
                "cut at {cut}: {err:#}"
            );
        }
        let mut damaged = data.clone();
        damaged[data.len() - 20] ^= 1;
        let err = CheckpointFile::decode(&damaged).unwrap_err();
        assert!(format!("{err:#}").contains("checksum mismatch"), "{err:#}");
        let mut longer = data.clone();
        longer.push(0);
        assert!(CheckpointFile::decode(&longer).is_err());
    }

    #[test]
    fn a_file_of_the_first_format_reads_as_one_part() {
        let file = file(vec![]);
        let (meta, sinks) = file.head_sections().unwrap();
        let keyed = b"all keys".to_vec();
        let mut old = MAGIC_V1.to_vec();
        for section in [&meta, &sinks, &keyed] {
            old.extend((section.len() as u64).to_le_bytes());
            old.extend(section);
        }
        old.extend(crc32fast::hash(&old).to_le_bytes());
        let back = CheckpointFile::decode(&old).unwrap();
        assert_eq!(back.keyed, vec![keyed]);
        assert_eq!(back.meta, file.meta);
    }
}
