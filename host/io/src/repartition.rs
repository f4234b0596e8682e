//! The repartition topic's wire format: the headers a repartitioner (in the cluster
//! crate) puts on each message it re-keys, and that a task's Kafka source reads back to
//! know which source partition and offset a message stands for.

use rdkafka::message::{Header, OwnedHeaders};

/// The source partition a repartitioned message came from: `topic[partition]`.
pub const FROM_HEADER: &str = "weir-from";
/// The message's offset in that partition.
pub const OFFSET_HEADER: &str = "weir-offset";
/// On a watermark marker (no payload): the largest event time read from that partition.
pub const TIMESTAMP_HEADER: &str = "weir-timestamp";

/// Reads a `weir-from` header: `topic[partition]`.
pub fn parse_from(text: &str) -> Option<(String, i32)> {
    let (topic, rest) = text.rsplit_once('[')?;
    let partition = rest.strip_suffix(']')?.parse().ok()?;
    Some((topic.to_string(), partition))
}

/// The headers of a repartitioned message: the source partition it came from, and its
/// offset there (a record) or the largest event time read there (a marker).
pub fn origin(from: &str, what: &'static str, value: &str) -> OwnedHeaders {
    OwnedHeaders::new_with_capacity(2)
        .insert(Header {
            key: FROM_HEADER,
            value: Some(from.as_bytes()),
        })
        .insert(Header {
            key: what,
            value: Some(value.as_bytes()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_header_reads_back() {
        assert_eq!(parse_from("clicks[3]"), Some(("clicks".to_string(), 3)));
        assert_eq!(
            parse_from("a.b[c][12]"),
            Some(("a.b[c]".to_string(), 12)),
            "a bracket in the topic name"
        );
        assert_eq!(parse_from("clicks"), None);
        assert_eq!(parse_from("clicks[x]"), None);
    }
}
