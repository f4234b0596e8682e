//! What one UDF call emitted, held until the call returns and the operator routes it.

use super::OutputId;
use std::ops::Range;
use weir_core::output::OutputRecord;
use weir_core::time::Timestamp;

pub use weir_core::limits::DEFAULT_MAX_EMIT_BYTES;

/// Records the UDF emitted, waiting for the operator to route them. Their bytes share
/// one buffer, so emitting allocates nothing per record once the buffer has grown. One
/// call may emit at most [`limit`](Self::limit) bytes: the host holds a call's records
/// until the call has returned, so without a bound a UDF could make it hold any amount.
#[derive(Debug)]
pub struct Emitted {
    bytes: Vec<u8>,
    records: Vec<EmittedSpan>,
    limit: usize,
}

impl Default for Emitted {
    fn default() -> Self {
        Self {
            bytes: Vec::new(),
            records: Vec::new(),
            limit: DEFAULT_MAX_EMIT_BYTES,
        }
    }
}

/// A call emitted more than [`Emitted::limit`] bytes; the call fails with
/// [`CallError::EmitLimit`](super::CallError::EmitLimit).
#[derive(Debug, Clone, Copy)]
pub struct EmitLimitExceeded {
    /// The limit it went over.
    pub limit_bytes: usize,
}

impl std::fmt::Display for EmitLimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the call emitted more than its limit of {} bytes (max_emit_bytes)",
            self.limit_bytes
        )
    }
}

impl std::error::Error for EmitLimitExceeded {}

#[derive(Debug, Clone)]
struct EmittedSpan {
    output: OutputId,
    timestamp: Timestamp,
    key: Option<Range<usize>>,
    value: Range<usize>,
}

impl Emitted {
    /// Adds a record for `output` with its optional key, its value and its timestamp,
    /// copying the bytes into the shared buffer.
    pub fn push(
        &mut self,
        output: OutputId,
        key: Option<&[u8]>,
        value: &[u8],
        timestamp: Timestamp,
    ) {
        let mut append = |data: &[u8]| {
            let start = self.bytes.len();
            self.bytes.extend_from_slice(data);
            start..self.bytes.len()
        };
        let key = key.map(&mut append);
        let value = append(value);
        self.records.push(EmittedSpan {
            output,
            timestamp,
            key,
            value,
        });
    }

    /// The records in emission order, with their output.
    pub fn iter(&self) -> impl Iterator<Item = (OutputId, OutputRecord<'_>)> {
        self.records.iter().map(|r| {
            let record = OutputRecord {
                key: r.key.clone().map(|k| &self.bytes[k]),
                value: &self.bytes[r.value.clone()],
                timestamp: r.timestamp,
                sequence: 0,
            };
            (r.output, record)
        })
    }

    /// The most bytes of keys and values one call may emit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Sets [`limit`](Self::limit) (`[udf] max_emit_bytes`). The operator calls this
    /// once, before the first call.
    pub fn set_limit(&mut self, bytes: usize) {
        self.limit = bytes;
    }

    /// Whether what is waiting is over [`limit`](Self::limit).
    pub fn over_limit(&self) -> bool {
        self.bytes.len() > self.limit
    }

    /// How many records are waiting.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record is waiting.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Drops every waiting record, keeping the buffer's capacity.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.records.clear();
    }
}
