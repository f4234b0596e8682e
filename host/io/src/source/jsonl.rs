//! JSON-lines sources: a file, or standard input.

use super::poll::{Polled, Source, SourceRecord};
use anyhow::Context as _;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use weir_core::position::Position;

/// The UTF-8 byte order mark some editors put at the start of a text file.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// How much of a line over the limit is kept, for its dead letter.
const OVERSIZED_PREFIX: usize = 1 << 10;

/// Reads lines from any buffered reader, skipping blank ones. A line longer than `max`
/// bytes is never held whole: its first [`OVERSIZED_PREFIX`] bytes are kept, the rest
/// is skipped, and the record says how long it was ([`SourceRecord::oversized`]).
struct LineReader<R> {
    reader: R,
    line: u64,
    offset: u64,
    max: usize,
}

impl<R: BufRead> LineReader<R> {
    fn new(reader: R, offset: u64, line: u64, max: usize) -> Self {
        Self {
            reader,
            line,
            offset,
            max,
        }
    }

    fn next(&mut self, record: &mut SourceRecord) -> std::io::Result<bool> {
        loop {
            record.data.clear();
            record.oversized = None;
            let limit = self.max as u64 + 1;
            let mut read = (&mut self.reader)
                .take(limit)
                .read_until(b'\n', &mut record.data)?;
            if read == 0 {
                return Ok(false);
            }
            if read as u64 == limit && record.data.last() != Some(&b'\n') {
                let (skipped, newline) = skip_line(&mut self.reader)?;
                read += skipped;
                record.data.truncate(OVERSIZED_PREFIX);
                record.oversized = Some((read - usize::from(newline)) as u64);
            }
            self.line += 1;
            record.line = Some(self.line);
            record.offset = self.offset;
            self.offset += read as u64;
            if record.oversized.is_some() {
                return Ok(true);
            }
            while matches!(record.data.last(), Some(b'\n' | b'\r')) {
                record.data.pop();
            }
            if record.offset == 0 && record.data.starts_with(BOM) {
                record.data.drain(..BOM.len());
            }
            if !record.data.iter().all(u8::is_ascii_whitespace) {
                return Ok(true);
            }
        }
    }
}

/// Skips the rest of a line: returns how many bytes that was, and whether it ended with
/// a line break (not with the end of input).
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<(usize, bool)> {
    let mut skipped = 0;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok((skipped, false));
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok((skipped + i + 1, true));
            }
            None => {
                let n = buf.len();
                reader.consume(n);
                skipped += n;
            }
        }
    }
}

/// A JSON-lines file, read in file order.
pub struct FileSource {
    location: String,
    lines: LineReader<BufReader<File>>,
    /// The file's size when it was opened.
    length: u64,
}

impl FileSource {
    /// Opens the file at `path` to read from its first line, lines of at most
    /// `max_record_bytes`. Fails, naming the path, if it cannot be opened.
    pub fn open(path: &Path, max_record_bytes: usize) -> anyhow::Result<Self> {
        Self::open_at(path, 0, 0, None, max_record_bytes)
    }

    /// Opens the file to read on from byte `offset`, the start of line `line + 1`
    /// (a checkpointed position), after checking that the bytes before `offset` are
    /// still those the checkpoint read (its `fingerprint`, if it has one): a file
    /// replaced by another is refused, as one cut shorter is.
    pub fn open_at(
        path: &Path,
        offset: u64,
        line: u64,
        fingerprint: Option<&str>,
        max_record_bytes: usize,
    ) -> anyhow::Result<Self> {
        let mut file = File::open(path)
            .with_context(|| format!("cannot open input file {}", path.display()))?;
        let length = file.metadata()?.len();
        anyhow::ensure!(
            offset <= length,
            "input file {} is shorter ({length} bytes) than the checkpoint's position ({offset}): \
             it was replaced; start over with --fresh",
            path.display()
        );
        if let Some(expected) = fingerprint {
            let actual = fingerprint_of(&file, offset)
                .with_context(|| format!("cannot read input file {}", path.display()))?;
            anyhow::ensure!(
                actual == expected,
                "input file {} is not the file the checkpoint read: its bytes before the \
                 checkpoint's position ({offset}) differ; it was replaced; start over with --fresh",
                path.display()
            );
        }
        if offset > 0 {
            std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(offset))?;
        }
        Ok(Self {
            location: path.display().to_string(),
            lines: LineReader::new(
                BufReader::with_capacity(1 << 18, file),
                offset,
                line,
                max_record_bytes,
            ),
            length,
        })
    }
}

/// How much of a file a fingerprint reads: this much from its start and this much just
/// before the position.
const FINGERPRINT_SPAN: u64 = 4 << 10;

/// What identifies the first `offset` bytes of `file` cheaply: the SHA-256 of its first
/// and last [`FINGERPRINT_SPAN`] bytes (they overlap in a short file), and `offset`
/// itself. A checkpoint keeps it with the file's position; a file that was replaced
/// (another export of the same data, a rotated log) almost surely differs in one of the
/// two spans.
fn fingerprint_of(file: &File, offset: u64) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt as _;
    let head_len = offset.min(FINGERPRINT_SPAN);
    let tail_start = offset.saturating_sub(FINGERPRINT_SPAN);
    let mut bytes = vec![0; (head_len + (offset - tail_start)) as usize];
    let (head, tail) = bytes.split_at_mut(head_len as usize);
    file.read_exact_at(head, 0)?;
    file.read_exact_at(tail, tail_start)?;
    Ok(weir_core::identity::sha256_hex(&bytes))
}

impl Source for FileSource {
    fn bytes_read(&self) -> Option<(u64, u64)> {
        Some((self.lines.offset.min(self.length), self.length))
    }

    fn location(&self) -> &str {
        &self.location
    }

    fn poll(&mut self, record: &mut SourceRecord, _wait: Duration) -> anyhow::Result<Polled> {
        let more = self
            .lines
            .next(record)
            .with_context(|| format!("cannot read {}", self.location))?;
        Ok(if more { Polled::Record } else { Polled::End })
    }

    fn positions(&self) -> Vec<Position> {
        let offset = self.lines.offset;
        // Without a fingerprint (the file cannot be read back) a resumed run checks only
        // the length, as checkpoints written before fingerprints do.
        let fingerprint = fingerprint_of(self.lines.reader.get_ref(), offset).ok();
        vec![Position::File {
            offset,
            line: self.lines.line,
            fingerprint,
        }]
    }
}

/// Standard input (or any reader), read on its own thread so that the pipeline can fire
/// processing-time timers while no line arrives.
pub struct StdinSource {
    location: String,
    lines: Lines,
    /// Lines taken so far.
    line: u64,
}

/// The lines a reader thread reads, taken by one source at a time.
type Lines = Arc<Mutex<Receiver<std::io::Result<SourceRecord>>>>;

/// A named pipe's lines, and whether its reader thread has ended.
type Stream = (Lines, Arc<AtomicBool>);

impl StdinSource {
    /// The process's standard input, named `stdin` in messages. One thread reads it for
    /// every stdin source the process opens, one after another (`weir serve` runs a
    /// pipeline stopped through its API again, `weir dev` runs a graph again): a line
    /// read but not taken by a source that ended is the next one's, never lost in a
    /// reader of its own that outlived its run. Lines hold at most the
    /// `max_record_bytes` of the first stdin source opened.
    pub fn stdin(max_record_bytes: usize) -> Self {
        static STDIN: OnceLock<Lines> = OnceLock::new();
        let lines = STDIN
            .get_or_init(|| read_lines("stdin", move || Ok(std::io::stdin()), max_record_bytes));
        Self {
            location: "stdin".to_string(),
            lines: Arc::clone(lines),
            line: 0,
        }
    }

    /// Any reader, named `location` in messages, read line by line (of at most
    /// `max_record_bytes`) on a thread of its own started at once; the source ends when
    /// the reader reaches its end.
    pub fn from_reader(
        location: &str,
        reader: impl Read + Send + 'static,
        max_record_bytes: usize,
    ) -> Self {
        Self::spawn(location, move || Ok(reader), max_record_bytes)
    }

    /// A named pipe (or another stream that is not a regular file) at `path`: opened and
    /// read on a thread of its own, since opening a FIFO waits for a writer and reading
    /// it waits for data, and neither may hold up the pipeline. As with stdin, a source
    /// opened again on the same path while that thread still reads (a run restarted, or
    /// created again after a stop) takes the lines from it: a second reader of the pipe
    /// would take some of them, and its run had ended. Once the pipe ended, a new thread
    /// opens it again.
    pub fn open_stream(path: &Path, max_record_bytes: usize) -> Self {
        static STREAMS: OnceLock<Mutex<HashMap<PathBuf, Stream>>> = OnceLock::new();
        let mut streams = STREAMS
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let location = path.display().to_string();
        let lines = match streams.get(path) {
            Some((lines, ended)) if !ended.load(Ordering::Acquire) => Arc::clone(lines),
            _ => {
                let owned = path.to_path_buf();
                let ended = Arc::new(AtomicBool::new(false));
                let lines = read_lines_until(
                    &location,
                    move || File::open(owned),
                    max_record_bytes,
                    Arc::clone(&ended),
                );
                streams.insert(path.to_path_buf(), (Arc::clone(&lines), ended));
                lines
            }
        };
        Self {
            location,
            lines,
            line: 0,
        }
    }

    fn spawn<R: Read + Send + 'static>(
        location: &str,
        open: impl FnOnce() -> std::io::Result<R> + Send + 'static,
        max_record_bytes: usize,
    ) -> Self {
        Self {
            location: location.to_string(),
            lines: read_lines(location, open, max_record_bytes),
            line: 0,
        }
    }
}

/// Starts a thread that opens a reader with `open` and reads its lines (of at most
/// `max_record_bytes`) ahead into the channel returned, until the reader ends or the
/// channel is dropped.
fn read_lines<R: Read + Send + 'static>(
    location: &str,
    open: impl FnOnce() -> std::io::Result<R> + Send + 'static,
    max_record_bytes: usize,
) -> Lines {
    read_lines_until(location, open, max_record_bytes, Arc::default())
}

/// [`read_lines`], setting `ended` once the thread has read the last line it will.
fn read_lines_until<R: Read + Send + 'static>(
    location: &str,
    open: impl FnOnce() -> std::io::Result<R> + Send + 'static,
    max_record_bytes: usize,
    ended: Arc<AtomicBool>,
) -> Lines {
    let (tx, rx) = mpsc::sync_channel(4096);
    std::thread::Builder::new()
        .name(format!("weir-{location}"))
        .spawn(move || {
            read_into(open, max_record_bytes, tx);
            ended.store(true, Ordering::Release);
        })
        .expect("cannot start a reader thread");
    Arc::new(Mutex::new(rx))
}

/// Opens a reader with `open` and sends its lines to `tx` until it ends, fails, or no
/// one takes them any more.
fn read_into<R: Read>(
    open: impl FnOnce() -> std::io::Result<R>,
    max_record_bytes: usize,
    tx: mpsc::SyncSender<std::io::Result<SourceRecord>>,
) {
    let reader = match open() {
        Ok(reader) => reader,
        Err(e) => {
            let _ = tx.send(Err(e));
            return;
        }
    };
    let mut lines = LineReader::new(BufReader::new(reader), 0, 0, max_record_bytes);
    loop {
        let mut record = SourceRecord::default();
        match lines.next(&mut record) {
            Ok(true) => {
                if tx.send(Ok(record)).is_err() {
                    return;
                }
            }
            Ok(false) => return,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        }
    }
}

impl Source for StdinSource {
    fn location(&self) -> &str {
        &self.location
    }

    fn poll(&mut self, record: &mut SourceRecord, wait: Duration) -> anyhow::Result<Polled> {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        match lines.recv_timeout(wait) {
            Ok(Ok(next)) => {
                *record = next;
                self.line = record.line.unwrap_or(self.line);
                Ok(Polled::Record)
            }
            Ok(Err(e)) => Err(e).with_context(|| format!("cannot read {}", self.location)),
            Err(RecvTimeoutError::Timeout) => Ok(Polled::Idle),
            Err(RecvTimeoutError::Disconnected) => Ok(Polled::End),
        }
    }

    fn positions(&self) -> Vec<Position> {
        vec![Position::Stream { line: self.line }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_lines_with_numbers_offsets_and_blank_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "{\"a\":1}\r\n\n  \n{\"a\":2}\n{\"a\":3}").unwrap();
        let mut source = FileSource::open(&path, 1 << 20).unwrap();
        let mut rec = SourceRecord::default();
        let mut seen = Vec::new();
        while source.poll(&mut rec, Duration::ZERO).unwrap() == Polled::Record {
            seen.push((
                String::from_utf8(rec.data.clone()).unwrap(),
                rec.line,
                rec.offset,
            ));
        }
        assert_eq!(
            seen,
            vec![
                ("{\"a\":1}".into(), Some(1), 0),
                ("{\"a\":2}".into(), Some(4), 13),
                ("{\"a\":3}".into(), Some(5), 21)
            ]
        );
    }

    #[test]
    fn a_file_reopened_at_its_position_reads_on_from_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n").unwrap();
        let mut source = FileSource::open(&path, 1 << 20).unwrap();
        let mut rec = SourceRecord::default();
        source.poll(&mut rec, Duration::ZERO).unwrap();
        let Position::File {
            offset,
            line,
            fingerprint,
        } = source.positions()[0].clone()
        else {
            panic!()
        };
        assert_eq!((offset, line), (8, 1));
        let fingerprint = fingerprint.expect("a file's position has a fingerprint");
        let mut resumed =
            FileSource::open_at(&path, offset, line, Some(&fingerprint), 1 << 20).unwrap();
        resumed.poll(&mut rec, Duration::ZERO).unwrap();
        assert_eq!(
            (rec.data.as_slice(), rec.line, rec.offset),
            (&b"{\"a\":2}"[..], Some(2), 8)
        );
        let err = FileSource::open_at(&path, 1_000, 9, None, 1 << 20)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("shorter"), "{err}");
        // Another file, as long or longer, with other bytes before the position.
        std::fs::write(&path, "{\"b\":1}\n{\"a\":2}\n{\"a\":3}\n{\"a\":4}\n").unwrap();
        let err = FileSource::open_at(&path, offset, line, Some(&fingerprint), 1 << 20)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("not the file the checkpoint read"), "{err}");
        // The same bytes with more appended: resumed.
        std::fs::write(&path, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n{\"a\":4}\n").unwrap();
        FileSource::open_at(&path, offset, line, Some(&fingerprint), 1 << 20).unwrap();
    }

    #[test]
    fn a_line_over_the_limit_is_cut_to_a_prefix_and_the_next_one_reads_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        let long = format!("{{\"pad\":\"{}\"}}", "x".repeat(5_000));
        std::fs::write(&path, format!("\u{feff}{{\"a\":1}}\n{long}\n{{\"a\":3}}\n")).unwrap();
        let mut source = FileSource::open(&path, 4_000).unwrap();
        let mut rec = SourceRecord::default();
        let mut seen = Vec::new();
        while source.poll(&mut rec, Duration::ZERO).unwrap() == Polled::Record {
            seen.push((rec.data.len(), rec.oversized, rec.line, rec.offset));
        }
        let long_len = long.len() as u64;
        assert_eq!(
            seen,
            vec![
                (7, None, Some(1), 0),
                (OVERSIZED_PREFIX, Some(long_len), Some(2), 11),
                (7, None, Some(3), 11 + long_len + 1),
            ],
            "the byte order mark is dropped from line 1; line 2 is cut"
        );
    }

    #[test]
    fn missing_file_names_the_path() {
        let err = FileSource::open(Path::new("/no/such/input.jsonl"), 1 << 20)
            .err()
            .unwrap();
        assert!(format!("{err:#}").contains("/no/such/input.jsonl"));
    }

    #[test]
    fn reader_source_idles_then_ends() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        let mut source = StdinSource::from_reader("pipe", reader, 1 << 20);
        let mut rec = SourceRecord::default();
        assert_eq!(
            source.poll(&mut rec, Duration::from_millis(20)).unwrap(),
            Polled::Idle
        );
        std::io::Write::write_all(&mut writer, b"{\"x\":1}\n").unwrap();
        assert_eq!(
            source.poll(&mut rec, Duration::from_secs(5)).unwrap(),
            Polled::Record
        );
        assert_eq!(rec.data, b"{\"x\":1}");
        drop(writer);
        assert_eq!(
            source.poll(&mut rec, Duration::from_secs(5)).unwrap(),
            Polled::End
        );
    }
}
