//! A keyed section in parts: how records become parts of about [`PART_BYTES`], and
//! where the parts encoded on the run's thread wait for the checkpoint writer (in
//! memory, and beyond [`HELD_BYTES`] in a scratch file beside the `disk` backend's
//! store).

use super::PART_BYTES;
use anyhow::Context as _;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use weir_core::codec::Writer;
use weir_core::state::KeyTable;

/// The bytes of parts a section encoded on the run's thread keeps in memory; the parts
/// after them go to a scratch file when the key table's store gives one. A full
/// checkpoint encodes every key in memory: up to the `disk` backend's whole cache, which
/// held twice (the keys, and their encoded copy waiting to be written) took a
/// 512 MiB-cache run over 1 GiB of RSS.
pub const HELD_BYTES: usize = 8 << 20;

/// A section being encoded: records go to a writer, which becomes a part (handed to
/// `done`) once it holds [`PART_BYTES`].
pub(super) struct Parts<'a> {
    current: Writer,
    done: &'a mut dyn FnMut(Vec<u8>) -> anyhow::Result<()>,
}

impl<'a> Parts<'a> {
    pub(super) fn new(done: &'a mut dyn FnMut(Vec<u8>) -> anyhow::Result<()>) -> Self {
        Self {
            current: Writer::default(),
            done,
        }
    }

    /// Where the next record goes.
    pub(super) fn writer(&mut self) -> &mut Writer {
        &mut self.current
    }

    /// Called after each record: ends the part if it is full.
    pub(super) fn end_record(&mut self) -> anyhow::Result<()> {
        if self.current.len() >= PART_BYTES {
            (self.done)(std::mem::take(&mut self.current).into_inner())?;
        }
        Ok(())
    }

    /// Hands over the last part, if it holds anything.
    pub(super) fn finish(self) -> anyhow::Result<()> {
        match self.current.is_empty() {
            true => Ok(()),
            false => (self.done)(self.current.into_inner()),
        }
    }
}

/// The parts of a section encoded on the run's thread: the first [`HELD_BYTES`] in
/// memory, the rest set aside in a scratch file when there is one.
pub(super) struct EncodedParts {
    /// The parts in memory, in order.
    pub(super) held: Vec<Vec<u8>>,
    /// The parts after them, if any were set aside.
    pub(super) set_aside: Option<SetAside>,
}

/// Encodes on the calling thread what `records` writes, in parts, setting aside parts
/// beyond [`HELD_BYTES`] in a scratch file of `keys`' store. Fails if the scratch file
/// cannot be made or written (a full disk), naming it.
pub(super) fn in_parts(
    keys: &KeyTable,
    records: impl FnOnce(&mut Parts<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<EncodedParts> {
    in_parts_holding(HELD_BYTES, || keys.scratch_file(), records)
}

/// [`in_parts`], holding `held_bytes` in memory, and beyond them setting parts aside in
/// the file `scratch` makes, if it makes one (asked once).
fn in_parts_holding(
    held_bytes: usize,
    scratch: impl FnOnce() -> Option<anyhow::Result<(File, PathBuf)>>,
    records: impl FnOnce(&mut Parts<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<EncodedParts> {
    let mut held = Vec::new();
    let mut held_so_far = 0;
    let mut set_aside: Option<SetAside> = None;
    let mut scratch = Some(scratch);
    let mut keep = |part: Vec<u8>| {
        if held_so_far + part.len() > held_bytes {
            if let Some(scratch) = scratch.take() {
                set_aside = match scratch() {
                    Some(file) => {
                        let (file, path) = file?;
                        Some(SetAside {
                            file: BufWriter::new(file),
                            path,
                            parts: 0,
                        })
                    }
                    None => None,
                };
            }
        }
        match &mut set_aside {
            Some(aside) => aside.push(&part),
            None => {
                held_so_far += part.len();
                held.push(part);
                Ok(())
            }
        }
    };
    let mut out = Parts::new(&mut keep);
    records(&mut out)?;
    out.finish()?;
    Ok(EncodedParts { held, set_aside })
}

/// Parts of a section in a scratch file (unlinked: it goes when this is dropped), each
/// its length (8 bytes, little-endian) and its bytes.
pub struct SetAside {
    file: BufWriter<File>,
    /// The name the file had, for messages.
    path: PathBuf,
    parts: usize,
}

impl SetAside {
    fn push(&mut self, part: &[u8]) -> anyhow::Result<()> {
        self.file
            .write_all(&(part.len() as u64).to_le_bytes())
            .and_then(|()| self.file.write_all(part))
            .with_context(|| self.describe("cannot write"))?;
        self.parts += 1;
        Ok(())
    }

    fn describe(&self, what: &str) -> String {
        format!(
            "{what} a checkpoint's keys set aside in {}",
            self.path.display()
        )
    }

    /// Hands `part` each part, in order. Called on the checkpoint writer's thread.
    pub fn write_parts(
        self,
        part: &mut dyn FnMut(&[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let describe = self.describe("cannot read");
        let mut file = self
            .file
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| describe.clone())?;
        file.seek(SeekFrom::Start(0))
            .with_context(|| describe.clone())?;
        let mut input = BufReader::new(file);
        let mut bytes = Vec::new();
        for _ in 0..self.parts {
            let mut len = [0; 8];
            input
                .read_exact(&mut len)
                .with_context(|| describe.clone())?;
            bytes.resize(u64::from_le_bytes(len) as usize, 0);
            input
                .read_exact(&mut bytes)
                .with_context(|| describe.clone())?;
            part(&bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parts of 1 KiB records (`count` of them), encoded holding `held` bytes in memory.
    fn encode(held: usize, count: u32, scratch: bool) -> EncodedParts {
        let file = || {
            scratch.then(|| {
                let file = tempfile::tempfile()?;
                Ok((file, PathBuf::from("scratch")))
            })
        };
        in_parts_holding(held, file, |out| {
            for i in 0..count {
                out.writer().u32(i);
                out.writer().bytes(&[i as u8; 1_020]);
                out.end_record()?;
            }
            Ok(())
        })
        .unwrap()
    }

    fn all_parts(encoded: EncodedParts) -> Vec<Vec<u8>> {
        let mut parts = encoded.held;
        if let Some(aside) = encoded.set_aside {
            aside
                .write_parts(&mut |part| {
                    parts.push(part.to_vec());
                    Ok(())
                })
                .unwrap();
        }
        parts
    }

    #[test]
    fn parts_beyond_the_held_bytes_wait_in_the_scratch_file_and_come_back_in_order() {
        let whole = all_parts(encode(usize::MAX, 5_000, false));
        assert_eq!(whole.len(), 5, "about 5 MB in parts of 1 MiB");
        let encoded = encode(2 * PART_BYTES + 10_000, 5_000, true);
        assert_eq!(encoded.held.len(), 2);
        assert_eq!(encoded.set_aside.as_ref().map(|a| a.parts), Some(3));
        assert_eq!(all_parts(encoded), whole);
    }

    #[test]
    fn without_a_scratch_file_every_part_is_held() {
        let encoded = encode(0, 3_000, false);
        assert!(encoded.set_aside.is_none());
        assert_eq!(encoded.held.len(), 3);
        let small = encode(PART_BYTES * 4, 100, true);
        assert!(small.set_aside.is_none(), "nothing to set aside");
        assert_eq!(small.held.len(), 1);
    }
}
