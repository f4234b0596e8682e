//! Turning a raw JSON line into what the keyed operator needs: key and event time.

use super::extract::FieldPaths;
use serde_json::value::RawValue;
use std::borrow::Cow;
use weir_core::time::format::TimestampFormat;
use weir_core::time::Timestamp;

/// `key = "@key"`: the key is the Kafka message's key, not a field of the value.
pub const MESSAGE_KEY: &str = "@key";
/// `timestamp = "@timestamp"`: the event time is the Kafka message's timestamp.
pub const MESSAGE_TIMESTAMP: &str = "@timestamp";

/// Where a source's records keep their key and timestamp.
#[derive(Debug, Clone)]
pub struct RecordDecoder {
    paths: FieldPaths,
    key_path: String,
    timestamp_path: String,
    timestamp_format: TimestampFormat,
}

/// What a record carries besides its value: a Kafka message's key and timestamp.
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageMeta<'a> {
    /// The message's key bytes, taken as the record's key with `key = "@key"`; `None`
    /// for a line of a file or stdin, or a Kafka message without a key.
    pub key: Option<&'a [u8]>,
    /// The message's timestamp (milliseconds since 1970), taken as the event time with
    /// `timestamp = "@timestamp"`; `None` where there is no message timestamp.
    pub timestamp: Option<Timestamp>,
}

/// A record's key and event time, borrowed from the line where possible.
#[derive(Debug, PartialEq)]
pub struct Decoded<'a> {
    /// The key's bytes: a string field's text (unescaped, so owned only when the JSON
    /// string has escapes), a number field's JSON text, or the message's key.
    pub key: Cow<'a, [u8]>,
    /// The event time, in milliseconds since 1970, parsed per the source's
    /// `timestamp_format` (or the message's timestamp).
    pub timestamp: Timestamp,
}

impl RecordDecoder {
    /// A decoder taking the key from the field path `key` and the event time from the
    /// field path `timestamp` (a bare field name or a JSON pointer such as `/user/id`),
    /// the latter written as `timestamp_format`. [`MESSAGE_KEY`] and
    /// [`MESSAGE_TIMESTAMP`] take the Kafka message's own key or timestamp instead.
    ///
    /// Fails, saying why, if a path is not a valid field path (empty, or a pointer with
    /// an empty segment). The pipeline loader calls this once per source to check the
    /// paths at start-up; a run builds one decoder per source.
    pub fn new<'a>(
        key: &'a str,
        timestamp: &'a str,
        timestamp_format: TimestampFormat,
    ) -> Result<Self, String> {
        // The message's own key or timestamp take no field: a name no JSON text has stands in.
        let field = |path: &'a str, special: &str| -> &'a str {
            if path == special {
                "\u{1}message"
            } else {
                path
            }
        };
        Ok(Self {
            paths: FieldPaths::new(&[
                field(key, MESSAGE_KEY),
                field(timestamp, MESSAGE_TIMESTAMP),
            ])?,
            key_path: key.to_string(),
            timestamp_path: timestamp.to_string(),
            timestamp_format,
        })
    }

    /// Decodes one line; the error is the reason recorded in the dead-letter output.
    pub fn decode<'a>(&self, line: &'a str) -> Result<Decoded<'a>, String> {
        self.decode_message(line, MessageMeta::default())
    }

    /// Only the key of one line (the timestamp field is not looked at).
    pub fn key_of<'a>(&self, line: &'a str) -> Result<Cow<'a, [u8]>, String> {
        let mut found: [Option<&'a RawValue>; 2] = [None, None];
        self.paths.extract(line, &mut found)?;
        let key = found[0].ok_or_else(|| format!("missing key field {:?}", self.key_path))?;
        key_bytes(key.get()).map_err(|e| format!("key field {:?} {e}", self.key_path))
    }

    /// Decodes one record whose key or timestamp may come from the message around it.
    pub fn decode_message<'a>(
        &self,
        line: &'a str,
        message: MessageMeta<'a>,
    ) -> Result<Decoded<'a>, String> {
        let mut found: [Option<&'a RawValue>; 2] = [None, None];
        self.paths.extract(line, &mut found)?;
        let [key, ts] = found;
        let key = if self.key_path == MESSAGE_KEY {
            Cow::Borrowed(
                message
                    .key
                    .ok_or("the message has no key (key = \"@key\")")?,
            )
        } else {
            let key = key.ok_or_else(|| format!("missing key field {:?}", self.key_path))?;
            key_bytes(key.get()).map_err(|e| format!("key field {:?} {e}", self.key_path))?
        };
        let timestamp = if self.timestamp_path == MESSAGE_TIMESTAMP {
            message
                .timestamp
                .ok_or("the message has no timestamp (timestamp = \"@timestamp\")")?
        } else {
            let ts =
                ts.ok_or_else(|| format!("missing timestamp field {:?}", self.timestamp_path))?;
            self.timestamp_format
                .parse_json(ts.get())
                .map_err(|e| format!("timestamp field {:?}: {e}", self.timestamp_path))?
        };
        Ok(Decoded { key, timestamp })
    }
}

/// The bytes of a key: a string's text, or a number's JSON text.
fn key_bytes(raw: &str) -> Result<Cow<'_, [u8]>, String> {
    match raw.as_bytes().first() {
        Some(b'"') if !raw.contains('\\') => Ok(Cow::Borrowed(&raw.as_bytes()[1..raw.len() - 1])),
        Some(b'"') => {
            let text: String =
                serde_json::from_str(raw).map_err(|e| format!("is not a string: {e}"))?;
            Ok(Cow::Owned(text.into_bytes()))
        }
        Some(b'-' | b'0'..=b'9') => Ok(Cow::Borrowed(raw.as_bytes())),
        Some(b'n') => Err("is null".into()),
        _ => Err(format!("must be a string or a number, not {raw}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder() -> RecordDecoder {
        RecordDecoder::new("ad_id", "/clicked_at", TimestampFormat::Datetime).unwrap()
    }

    #[test]
    fn key_and_timestamp_from_the_message() {
        let d =
            RecordDecoder::new(MESSAGE_KEY, MESSAGE_TIMESTAMP, TimestampFormat::EpochMs).unwrap();
        let meta = MessageMeta {
            key: Some(b"k1"),
            timestamp: Some(42),
        };
        let decoded = d.decode_message(r#"{"x":1}"#, meta).unwrap();
        assert_eq!((decoded.key.as_ref(), decoded.timestamp), (&b"k1"[..], 42));
        let err = d
            .decode_message(r#"{"x":1}"#, MessageMeta::default())
            .unwrap_err();
        assert!(err.contains("no key"), "{err}");
        assert!(d
            .decode_message("not json", meta)
            .unwrap_err()
            .contains("JSON"));
    }

    #[test]
    fn decodes_string_and_number_keys() {
        let d = decoder();
        let rec = d
            .decode(r#"{"ad_id": "ad-1", "clicked_at": "1970-01-01 00:00:01.5"}"#)
            .unwrap();
        assert_eq!(
            rec,
            Decoded {
                key: Cow::Borrowed(b"ad-1"),
                timestamp: 1_500
            }
        );
        let rec = d
            .decode(r#"{"clicked_at": "1970-01-01 00:00:00", "ad_id": 17}"#)
            .unwrap();
        assert_eq!(&*rec.key, b"17");
        let rec = d
            .decode(r#"{"ad_id": "caf\u00e9", "clicked_at": "1970-01-01 00:00:00"}"#)
            .unwrap();
        assert_eq!(&*rec.key, "café".as_bytes());
    }

    #[test]
    fn reasons_name_the_field() {
        let d = decoder();
        let cases = [
            (
                r#"{"clicked_at": "1970-01-01 00:00:00"}"#,
                r#"missing key field "ad_id""#,
            ),
            (
                r#"{"ad_id": "a"}"#,
                r#"missing timestamp field "/clicked_at""#,
            ),
            (
                r#"{"ad_id": null, "clicked_at": "1970-01-01 00:00:00"}"#,
                r#"key field "ad_id" is null"#,
            ),
            (
                r#"{"ad_id": [1], "clicked_at": "1970-01-01 00:00:00"}"#,
                "must be a string or a number",
            ),
            (
                r#"{"ad_id": "a", "clicked_at": "noon"}"#,
                r#"timestamp field "/clicked_at": "noon" is not a date-time"#,
            ),
            (r#"{"ad_id": "a", "#, "not valid JSON"),
        ];
        for (line, reason) in cases {
            let err = d.decode(line).unwrap_err();
            assert!(err.contains(reason), "{line}: {err}");
        }
    }
}
