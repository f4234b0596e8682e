//! JSON-lines sources: a file, or standard input.

use super::{Polled, Source, SourceRecord};
use anyhow::Context as _;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;
use weir_core::position::Position;

/// Reads lines from any buffered reader, skipping blank ones.
struct LineReader<R> {
    reader: R,
    line: u64,
    offset: u64,
}

impl<R: BufRead> LineReader<R> {
    fn next(&mut self, record: &mut SourceRecord) -> std::io::Result<bool> {
        loop {
            record.data.clear();
            let read = self.reader.read_until(b'\n', &mut record.data)?;
            if read == 0 {
                return Ok(false);
            }
            self.line += 1;
            record.line = Some(self.line);
            record.offset = self.offset;
            self.offset += read as u64;
            while matches!(record.data.last(), Some(b'\n' | b'\r')) {
                record.data.pop();
            }
            if !record.data.iter().all(u8::is_ascii_whitespace) {
                return Ok(true);
            }
        }
    }
}

/// A JSON-lines file, read in file order.
pub struct FileSource {
    location: String,
    lines: LineReader<BufReader<File>>,
}

impl FileSource {
    /// Opens the file at `path` to read from its first line. Fails, naming the path, if
    /// it cannot be opened.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        Self::open_at(path, 0, 0)
    }

    /// Opens the file to read on from byte `offset`, the start of line `line + 1`
    /// (a checkpointed position).
    pub fn open_at(path: &Path, offset: u64, line: u64) -> anyhow::Result<Self> {
        let mut file = File::open(path)
            .with_context(|| format!("cannot open input file {}", path.display()))?;
        let length = file.metadata()?.len();
        anyhow::ensure!(
            offset <= length,
            "input file {} is shorter ({length} bytes) than the checkpoint's position ({offset}): \
             it was replaced; start over with --fresh",
            path.display()
        );
        if offset > 0 {
            std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(offset))?;
        }
        Ok(Self {
            location: path.display().to_string(),
            lines: LineReader {
                reader: BufReader::with_capacity(1 << 18, file),
                line,
                offset,
            },
        })
    }
}

impl Source for FileSource {
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
        vec![Position::File {
            offset: self.lines.offset,
            line: self.lines.line,
        }]
    }
}

/// Standard input (or any reader), read on its own thread so that the pipeline can fire
/// processing-time timers while no line arrives.
pub struct StdinSource {
    location: String,
    lines: Receiver<std::io::Result<SourceRecord>>,
    /// Lines taken so far.
    line: u64,
}

impl StdinSource {
    /// The process's standard input, named `stdin` in messages. Its reader thread
    /// starts at once.
    pub fn stdin() -> Self {
        Self::from_reader("stdin", std::io::stdin())
    }

    /// Any reader, named `location` in messages, read line by line on a thread of its
    /// own started at once; the source ends when the reader reaches its end.
    pub fn from_reader(location: &str, reader: impl Read + Send + 'static) -> Self {
        Self::spawn(location, move || Ok(reader))
    }

    /// A named pipe (or another stream that is not a regular file) at `path`: opened and
    /// read on its own thread, since opening a FIFO waits for a writer and reading it
    /// waits for data, and neither may hold up the pipeline.
    pub fn open_stream(path: &Path) -> Self {
        let owned = path.to_path_buf();
        Self::spawn(&path.display().to_string(), move || File::open(owned))
    }

    fn spawn<R: Read + Send + 'static>(
        location: &str,
        open: impl FnOnce() -> std::io::Result<R> + Send + 'static,
    ) -> Self {
        let (tx, rx) = mpsc::sync_channel(4096);
        std::thread::Builder::new()
            .name(format!("weir-{location}"))
            .spawn(move || {
                let reader = match open() {
                    Ok(reader) => reader,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let mut lines = LineReader {
                    reader: BufReader::new(reader),
                    line: 0,
                    offset: 0,
                };
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
            })
            .expect("cannot start a reader thread");
        Self {
            location: location.to_string(),
            lines: rx,
            line: 0,
        }
    }
}

impl Source for StdinSource {
    fn location(&self) -> &str {
        &self.location
    }

    fn poll(&mut self, record: &mut SourceRecord, wait: Duration) -> anyhow::Result<Polled> {
        match self.lines.recv_timeout(wait) {
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
        let mut source = FileSource::open(&path).unwrap();
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
        let mut source = FileSource::open(&path).unwrap();
        let mut rec = SourceRecord::default();
        source.poll(&mut rec, Duration::ZERO).unwrap();
        let Position::File { offset, line } = source.positions()[0].clone() else {
            panic!()
        };
        assert_eq!((offset, line), (8, 1));
        let mut resumed = FileSource::open_at(&path, offset, line).unwrap();
        resumed.poll(&mut rec, Duration::ZERO).unwrap();
        assert_eq!(
            (rec.data.as_slice(), rec.line, rec.offset),
            (&b"{\"a\":2}"[..], Some(2), 8)
        );
        let err = FileSource::open_at(&path, 1_000, 9)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("shorter"), "{err}");
    }

    #[test]
    fn missing_file_names_the_path() {
        let err = FileSource::open(Path::new("/no/such/input.jsonl"))
            .err()
            .unwrap();
        assert!(format!("{err:#}").contains("/no/such/input.jsonl"));
    }

    #[test]
    fn reader_source_idles_then_ends() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        let mut source = StdinSource::from_reader("pipe", reader);
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
