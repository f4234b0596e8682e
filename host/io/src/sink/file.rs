//! Sinks of JSON lines to a file or stdout ([`JsonLinesSink`]), and one that drops
//! every record ([`DiscardSink`]).

use anyhow::Context as _;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use weir_core::output::{OutputRecord, Sink, SinkState};

/// How many bytes of lines a [`JsonLinesSink`] gathers before it writes them out.
const LINE_BUFFER: usize = 1 << 17;

/// One JSON document per line: the value the UDF emitted.
///
/// Lines are gathered in a buffer of [`LINE_BUFFER`] bytes and written out whole. If a
/// write fails (a full disk), the sink knows which lines reached the file: it cuts off
/// the line the failure left half-written, and [`Sink::lost`] says how many of the
/// records it had taken are not in the file.
pub struct JsonLinesSink {
    location: String,
    out: Box<dyn Write + Send>,
    /// The file behind `out`, to make it durable at checkpoints and cut a half-written
    /// line off after a failure (`None` for stdout and pipes).
    file: Option<File>,
    /// Lines not written out yet.
    buffer: Vec<u8>,
    /// Where each line in `buffer` ends.
    ends: Vec<usize>,
    /// Bytes handed to the sink so far, counting what the file held when it was opened.
    written: u64,
    /// Records it had taken that a failed write kept out of the file.
    lost: u64,
}

impl JsonLinesSink {
    /// Creates (or empties) the output file.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        Self::open(path, None)
    }

    /// Opens the output file: emptied, or, when a checkpoint is restored, cut back to
    /// the `length` it had then, so what the run wrote after the checkpoint is written
    /// once more, not twice.
    pub fn open(path: &Path, resume_at: Option<u64>) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create directory {}", dir.display()))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot create output file {}", path.display()))?;
        if !file.metadata()?.is_file() {
            // A device or a pipe (/dev/null, a FIFO): written as a stream, never rewound.
            return Ok(Self::new(path.display().to_string(), Box::new(file)));
        }
        let length = resume_at.unwrap_or(0);
        let actual = file.metadata()?.len();
        anyhow::ensure!(
            actual >= length,
            "output file {} holds {actual} bytes, fewer than the {length} the checkpoint recorded: \
             it was changed outside weir; start over with --fresh",
            path.display()
        );
        file.set_len(length)
            .with_context(|| format!("cannot truncate output file {}", path.display()))?;
        let mut handle = file.try_clone()?;
        std::io::Seek::seek(&mut handle, std::io::SeekFrom::Start(length))?;
        let mut sink = Self::new(path.display().to_string(), Box::new(handle));
        sink.file = Some(file);
        sink.written = length;
        Ok(sink)
    }

    /// Standard output, named `stdout` in messages; it has no length to checkpoint.
    pub fn stdout() -> Self {
        Self::new("stdout".into(), Box::new(std::io::stdout()))
    }

    /// A sink writing to `out`, buffered, named `location` in messages. It has no file
    /// to sync, so its checkpoints record no length and a restored run cannot cut it
    /// back.
    pub fn new(location: String, out: Box<dyn Write + Send>) -> Self {
        Self {
            location,
            out,
            file: None,
            buffer: Vec::with_capacity(LINE_BUFFER),
            ends: Vec::new(),
            written: 0,
            lost: 0,
        }
    }

    /// Writes one JSON document on one line. A document spread over several lines is
    /// compacted; bytes that are not JSON are refused, since the file would not be
    /// JSON lines any more.
    pub fn write_json(&mut self, value: &[u8]) -> anyhow::Result<()> {
        let valid = serde_json::from_slice::<&serde_json::value::RawValue>(value);
        if let Err(e) = valid {
            let shown = String::from_utf8_lossy(&value[..value.len().min(200)]).into_owned();
            anyhow::bail!(
                "a record for {} is not JSON ({e}): {shown:?}",
                self.location
            );
        }
        let compacted;
        let line = if value.contains(&b'\n') {
            let parsed: serde_json::Value = serde_json::from_slice(value)?;
            compacted = serde_json::to_vec(&parsed)?;
            &compacted[..]
        } else {
            value
        };
        if !self.buffer.is_empty() && self.buffer.len() + line.len() >= LINE_BUFFER {
            self.write_out()?;
        }
        self.buffer.extend_from_slice(line);
        self.buffer.push(b'\n');
        self.ends.push(self.buffer.len());
        self.written += line.len() as u64 + 1;
        Ok(())
    }

    /// Writes the buffered lines out. On a failure, counts the lines that did not reach
    /// the file as lost, and cuts a half-written one off the file.
    fn write_out(&mut self) -> anyhow::Result<()> {
        let mut done = 0;
        while done < self.buffer.len() {
            match self.out.write(&self.buffer[done..]) {
                Ok(0) => return Err(self.failed(done, std::io::ErrorKind::WriteZero.into())),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failed(done, e)),
            }
        }
        self.buffer.clear();
        self.ends.clear();
        self.out
            .flush()
            .with_context(|| format!("cannot write to {}", self.location))
    }

    /// After a write of the buffer failed with `error` once `done` of its bytes were
    /// written: what the file holds ends with the last whole line.
    fn failed(&mut self, done: usize, error: std::io::Error) -> anyhow::Error {
        let whole = self.ends.iter().take_while(|&&end| end <= done).count();
        self.lost = (self.ends.len() - whole) as u64;
        let kept = whole.checked_sub(1).map_or(0, |i| self.ends[i]);
        let unwritten = (self.buffer.len() - kept) as u64;
        let mut message = format!(
            "cannot write to {} ({error}): the last {} records taken are not in it",
            self.location, self.lost
        );
        if done > kept {
            if let Some(file) = &self.file {
                let length = self.written - unwritten;
                match file.set_len(length) {
                    Ok(()) => {
                        message +=
                            &format!(", and a half-written line was cut off at byte {length}")
                    }
                    Err(e) => {
                        message += &format!(
                            ", and its last line is cut short (it could not be cut off: {e})"
                        )
                    }
                }
            } else {
                message += ", and its last line is cut short";
            }
        }
        self.written -= unwritten;
        self.buffer.clear();
        self.ends.clear();
        anyhow::anyhow!(message)
    }

    /// Flushes and syncs the file; returns its length.
    fn sync(&mut self) -> anyhow::Result<Option<u64>> {
        self.flush()?;
        let Some(file) = &self.file else {
            return Ok(None);
        };
        file.sync_data()
            .with_context(|| format!("cannot sync {}", self.location))?;
        Ok(Some(self.written))
    }
}

impl Sink for JsonLinesSink {
    fn location(&self) -> &str {
        &self.location
    }

    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()> {
        self.write_json(record.value)
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.write_out()
    }

    fn checkpoint(&mut self) -> anyhow::Result<SinkState> {
        Ok(SinkState {
            length: self.sync()?,
            data: Vec::new(),
        })
    }

    fn lost(&self) -> u64 {
        self.lost
    }
}

/// A run that failed never finishes its sinks: what it emitted before the failure is
/// still written out, as far as it can be.
impl Drop for JsonLinesSink {
    fn drop(&mut self) {
        if !self.buffer.is_empty() {
            let _ = self.write_out();
        }
    }
}

/// Drops every record: for benchmarks that measure the engine, not the disk.
pub struct DiscardSink;

impl Sink for DiscardSink {
    fn location(&self) -> &str {
        "discard"
    }

    fn write(&mut self, _record: &OutputRecord<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}
