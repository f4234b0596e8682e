//! The upsert sink: a table keyed by each record's upsert key, last value wins.
//!
//! Late data in event time corrects results that were already published (seed 001's
//! tumbling windows re-emit a corrected row for the same key). An upsert sink keeps the
//! latest value per key and writes the final table, one JSON line per key in order of
//! each key's first appearance, when the run completes; optionally it also writes every
//! record as it arrives, as a changelog. The key is the record's key as the UDF emitted
//! it, or the values of named fields of the record.

use super::file::JsonLinesSink;
use crate::source::extract::FieldPaths;
use anyhow::Context as _;
use std::collections::HashMap;
use weir_core::codec::{Reader, Writer};
use weir_core::output::{OutputRecord, Sink, SinkState};

/// An upsert sink's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpsertSpec {
    /// Fields (names or JSON pointers) of the value that form the key; `None`: the
    /// record's key as the UDF emitted it.
    pub key_fields: Option<Vec<String>>,
    /// A JSON-lines file that also gets every record as it arrives; none if `None`.
    pub changelog: Option<std::path::PathBuf>,
}

/// The sink of an output with `mode = "upsert"`: the last record per key, written as a
/// table when the run completes (see the module docs).
pub struct UpsertSink {
    table: JsonLinesSink,
    changelog: Option<JsonLinesSink>,
    key_fields: Option<(FieldPaths, Vec<String>)>,
    rows: Vec<Vec<u8>>,
    index: HashMap<Vec<u8>, usize>,
}

impl UpsertSink {
    /// An upsert sink writing its table to `table`; `key_fields` name the key's fields in
    /// the record's value (`None`: the record's own key).
    pub fn new(
        table: JsonLinesSink,
        changelog: Option<JsonLinesSink>,
        key_fields: Option<Vec<String>>,
    ) -> anyhow::Result<Self> {
        let key_fields = match key_fields {
            Some(fields) => {
                let paths: Vec<&str> = fields.iter().map(String::as_str).collect();
                let parsed = FieldPaths::new(&paths).map_err(|e| anyhow::anyhow!("key: {e}"))?;
                Some((parsed, fields))
            }
            None => None,
        };
        Ok(Self {
            table,
            changelog,
            key_fields,
            rows: Vec::new(),
            index: HashMap::new(),
        })
    }

    /// Puts back the table a checkpoint saved (see [`Sink::checkpoint`]).
    pub fn restore_table(&mut self, data: &[u8]) -> anyhow::Result<()> {
        let mut reader = Reader::new(data);
        let rows = reader.u64()?;
        for _ in 0..rows {
            let key = reader.bytes()?.to_vec();
            let value = reader.bytes()?.to_vec();
            self.index.insert(key, self.rows.len());
            self.rows.push(value);
        }
        reader.finish()
    }

    /// The upsert key of a record: the raw JSON of its key fields, or its own key.
    fn key(&self, record: &OutputRecord<'_>) -> anyhow::Result<Vec<u8>> {
        let Some((paths, names)) = &self.key_fields else {
            return record.key.map(<[u8]>::to_vec).ok_or_else(|| {
                anyhow::anyhow!(
                    "a record for the upsert sink {} has no key: emit it with a key, or set key = [...] on the sink",
                    self.table.location()
                )
            });
        };
        let text = std::str::from_utf8(record.value).context("record is not UTF-8")?;
        let mut found = vec![None; names.len()];
        paths
            .extract(text, &mut found)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut key = Vec::new();
        for (raw, name) in found.iter().zip(names) {
            let raw = raw.ok_or_else(|| {
                anyhow::anyhow!(
                    "a record for {} lacks its key field {name:?}: {text}",
                    self.table.location()
                )
            })?;
            key.extend_from_slice(raw.get().as_bytes());
            key.push(0x1f); // unit separator: no JSON text contains it raw
        }
        Ok(key)
    }
}

impl Sink for UpsertSink {
    fn location(&self) -> &str {
        self.table.location()
    }

    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()> {
        let key = self.key(record)?;
        if let Some(changelog) = &mut self.changelog {
            changelog.write(record)?;
        }
        match self.index.get(&key) {
            Some(&row) => {
                let value = &mut self.rows[row];
                value.clear();
                value.extend_from_slice(record.value);
            }
            None => {
                self.index.insert(key, self.rows.len());
                self.rows.push(record.value.to_vec());
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        match &mut self.changelog {
            Some(changelog) => changelog.flush(),
            None => Ok(()),
        }
    }

    /// The changelog's length and the whole table: the table is only written at the end,
    /// so a restored run needs it back.
    fn checkpoint(&mut self) -> anyhow::Result<SinkState> {
        let length = match &mut self.changelog {
            Some(changelog) => changelog.checkpoint()?.length,
            None => None,
        };
        let mut keys = vec![&[][..]; self.rows.len()];
        for (key, &row) in &self.index {
            keys[row] = key;
        }
        let mut data = Writer::default();
        data.u64(self.rows.len() as u64);
        for (key, value) in keys.iter().zip(&self.rows) {
            data.bytes(key);
            data.bytes(value);
        }
        Ok(SinkState {
            length,
            data: data.into_inner(),
        })
    }

    fn finish(&mut self) -> anyhow::Result<()> {
        for row in &self.rows {
            self.table.write_json(row)?;
        }
        self.table.flush()?;
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(dir: &std::path::Path, key_fields: Option<Vec<String>>) -> UpsertSink {
        let table = JsonLinesSink::create(&dir.join("table.jsonl")).unwrap();
        let changelog = JsonLinesSink::create(&dir.join("changes.jsonl")).unwrap();
        UpsertSink::new(table, Some(changelog), key_fields).unwrap()
    }

    fn record<'a>(key: Option<&'a [u8]>, value: &'a [u8]) -> OutputRecord<'a> {
        OutputRecord {
            key,
            value,
            timestamp: 0,
            sequence: 0,
        }
    }

    #[test]
    fn last_value_per_key_in_order_of_first_appearance() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(dir.path(), Some(vec!["w".into(), "/zone".into()]));
        s.write(&record(None, br#"{"w":"10:00","zone":1,"n":1}"#))
            .unwrap();
        s.write(&record(None, br#"{"w":"10:00","zone":2,"n":1}"#))
            .unwrap();
        s.write(&record(None, br#"{"w":"10:00","zone":1,"n":2}"#))
            .unwrap();
        s.flush().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("table.jsonl")).unwrap(),
            "",
            "written at the end"
        );
        s.finish().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("table.jsonl")).unwrap(),
            "{\"w\":\"10:00\",\"zone\":1,\"n\":2}\n{\"w\":\"10:00\",\"zone\":2,\"n\":1}\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("changes.jsonl"))
                .unwrap()
                .lines()
                .count(),
            3
        );
    }

    #[test]
    fn a_checkpointed_table_comes_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(dir.path(), None);
        s.write(&record(Some(b"b"), b"1")).unwrap();
        s.write(&record(Some(b"a"), b"2")).unwrap();
        s.write(&record(Some(b"b"), b"3")).unwrap();
        let state = s.checkpoint().unwrap();
        let table = JsonLinesSink::create(&dir.path().join("t2.jsonl")).unwrap();
        let mut restored = UpsertSink::new(table, None, None).unwrap();
        restored.restore_table(&state.data).unwrap();
        restored.write(&record(Some(b"a"), b"4")).unwrap();
        restored.finish().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("t2.jsonl")).unwrap(),
            "3\n4\n"
        );
    }

    #[test]
    fn keys_from_the_record_or_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(dir.path(), None);
        s.write(&record(Some(b"a"), b"1")).unwrap();
        s.write(&record(Some(b"a"), b"2")).unwrap();
        let err = s.write(&record(None, b"3")).unwrap_err().to_string();
        assert!(err.contains("has no key"), "{err}");
        let mut s = sink(dir.path(), Some(vec!["zone".into()]));
        let err = s
            .write(&record(None, br#"{"w":1}"#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("lacks its key field \"zone\""), "{err}");
    }
}
