//! Typed outputs: records are serialized to JSON and handed to the host.

use std::borrow::Borrow;
use std::marker::PhantomData;

use anyhow::anyhow;
use serde::Serialize;

use crate::backend::Active;
use crate::host_calls::Backend;
use crate::result::Result;

/// A declared output (the main output or a side output) carrying records of type `T`.
pub struct Output<T> {
    id: u32,
    name: Box<str>,
    _type: PhantomData<fn(&T)>,
}

impl<T> Clone for Output<T> {
    fn clone(&self) -> Self {
        Output::new(self.id, &self.name)
    }
}

impl<T> Output<T> {
    pub(crate) fn new(id: u32, name: &str) -> Self {
        Output {
            id,
            name: name.into(),
            _type: PhantomData,
        }
    }

    /// The name the output was declared with.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<T: Serialize> Output<T> {
    /// Emits `value` without a key, at the timestamp of the element or timer being
    /// processed.
    pub fn emit(&self, value: &T) -> Result<()> {
        self.write(value, None, None)
    }

    /// Emits a record with an optional key (the upsert key for upsert sinks) and
    /// timestamp. The value may be owned or borrowed.
    pub fn emit_record<V: Borrow<T>>(&self, record: Record<'_, V>) -> Result<()> {
        self.write(record.value.borrow(), record.key, record.timestamp)
    }

    /// Serializes `value` as JSON straight into the backend's buffer.
    fn write(&self, value: &T, key: Option<&[u8]>, timestamp: Option<i64>) -> Result<()> {
        Active::emit_with(self.id, key, timestamp, |buf| {
            serde_json::to_writer(buf, value)
        })
        .map_err(|e| anyhow!("output `{}`: cannot serialize record: {e}", self.name))
    }
}

/// A record to emit with [`Output::emit_record`]:
/// `Record::new(value).with_key(ctx.current_key()).with_timestamp(ts)`.
#[derive(Clone, Debug)]
pub struct Record<'a, V> {
    value: V,
    key: Option<&'a [u8]>,
    timestamp: Option<i64>,
}

impl<'a, V> Record<'a, V> {
    /// A record without key, at the current timestamp.
    pub fn new(value: V) -> Self {
        Record {
            value,
            key: None,
            timestamp: None,
        }
    }

    /// Sets the record's key (bytes or text).
    pub fn with_key<K: AsRef<[u8]> + ?Sized>(mut self, key: &'a K) -> Self {
        self.key = Some(key.as_ref());
        self
    }

    /// Sets the record's timestamp instead of the current element's or timer's.
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }
}
