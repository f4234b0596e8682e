//! The state encoding is unambiguous: every value of every type, random or crafted to
//! begin with any prefix (the schema tag's bytes among them), reads back as written, in
//! value, list and map state, with and without a schema version; and values written in
//! the SDKs' first format (schema 0 untagged) still read as they did.

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::{json, Value};
use weir_sdk::prelude::*;
use weir_sdk::testing::TestHost;

/// Keeps every element's value in a value state (emitting the one it replaces), a list
/// and a map; an element `{"dump": true}` emits the list and the map.
struct Keep<T, const SCHEMA: u8> {
    value: ValueState<T>,
    list: ListState<T>,
    map: MapState<u32, T>,
    out: Output<Value>,
}

#[derive(Deserialize)]
struct Command<T> {
    value: Option<T>,
    #[serde(default)]
    dump: bool,
}

impl<T, const SCHEMA: u8> ProcessFunction for Keep<T, SCHEMA>
where
    T: Serialize + DeserializeOwned + 'static,
{
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let (mut value, mut list, mut map) = (
            ctx.value_state("value")?,
            ctx.list_state("list")?,
            ctx.map_state("map")?,
        );
        if SCHEMA != 0 {
            value = value.schema(SCHEMA);
            list = list.schema(SCHEMA);
            map = map.schema(SCHEMA);
        }
        Ok(Keep {
            value,
            list,
            map,
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, _ctx: &mut Context, el: &Element) -> Result<()> {
        let command: Command<T> = el.json()?;
        if command.dump {
            let map: Vec<(u32, T)> = self.map.entries()?;
            return self
                .out
                .emit(&json!({"list": self.list.get()?, "map": map}));
        }
        let value = command.value.expect("a value");
        self.out.emit(&json!({"replaced": self.value.get()?}))?;
        self.value.set(&value)?;
        self.list.append(&value)?;
        // The element's timestamp is its index: the map's keys are 1, 2, ...
        self.map.put(&(el.timestamp() as u32 + 1), &value)
    }
}

/// Keeps `values` one after another, 64 to a key, and checks that each read gives back
/// the value written before it under its key, and each key's list and map hold its
/// values in order.
fn round_trips<T, const SCHEMA: u8>(values: &[T])
where
    T: Serialize + DeserializeOwned + std::fmt::Debug + 'static,
{
    for (k, chunk) in values.chunks(64).enumerate() {
        // A host per key: the TestHost copies its whole state at every call.
        let mut host = TestHost::<Keep<T, SCHEMA>>::new().unwrap();
        let key = format!("k{k}");
        for (i, value) in chunk.iter().enumerate() {
            let element = json!({ "value": value }).to_string();
            host.process("main", &key, &element, i as i64).unwrap();
        }
        host.process("main", &key, r#"{"dump": true}"#, chunk.len() as i64)
            .unwrap();
        assert!(host.rejected().is_empty(), "{:?}", host.rejected());
        let outputs: Vec<Value> = host
            .take_outputs("main")
            .into_iter()
            .map(|o| o.value)
            .collect();
        let written: Vec<Value> = chunk.iter().map(|v| json!(v)).collect();
        for (i, output) in outputs[..chunk.len()].iter().enumerate() {
            let expected = match i {
                0 => Value::Null,
                _ => written[i - 1].clone(),
            };
            assert_eq!(output["replaced"], expected, "key {key}, element {i}");
        }
        let dump = &outputs[chunk.len()];
        assert_eq!(dump["list"], Value::Array(written.clone()), "key {key}");
        let map: Vec<Value> = (1..=chunk.len())
            .map(|n| json!([n, written[n - 1]]))
            .collect();
        let mut stored: Vec<Value> = dump["map"].as_array().unwrap().clone();
        stored.sort_by_key(|entry| entry[0].as_u64());
        assert_eq!(stored, map, "key {key}");
    }
}

/// A small, seeded generator (splitmix64), so that a failure names values that repeat.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `i64`s whose postcard encoding begins with `prefix`: the zigzag varint of each is
/// built from the prefix's bytes (continuation bits set as needed), then any tail.
fn i64s_starting_with(prefix: &[u8], random: &mut Random) -> Vec<i64> {
    (0..4)
        .map(|_| {
            let mut bytes: Vec<u8> = prefix.iter().map(|b| b | 0x80).collect();
            // Up to 9 bytes carry a u64; the last one ends the varint.
            let tail = 9 - bytes.len();
            for i in 0..tail {
                let b = (random.next() & 0x7f) as u8;
                bytes.push(if i + 1 == tail { b & 0x01 } else { b | 0x80 });
            }
            let bytes: Vec<u8> = bytes
                .iter()
                .zip(prefix.iter().map(Some).chain(std::iter::repeat(None)))
                .map(|(b, p)| match p {
                    // The prefix's own byte where it ends the varint as it is.
                    Some(p) => *p | (b & 0x80),
                    None => *b,
                })
                .collect();
            let zigzag: u64 = postcard::from_bytes(&bytes).unwrap_or(0);
            ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64)
        })
        .filter(|n| postcard::to_allocvec(n).unwrap().starts_with(prefix))
        .collect()
}

#[test]
fn random_i64s_read_back_as_written() {
    let mut random = Random(36);
    let values: Vec<i64> = (0..8_192).map(|_| random.next() as i64).collect();
    round_trips::<i64, 0>(&values);
    round_trips::<i64, 3>(&values);
}

#[test]
fn the_timestamp_that_collided_reads_back() {
    // An epoch-ms timestamp whose untagged encoding began with the schema tag.
    let values = [1_796_119_509_887i64, 1_796_119_509_887, 5];
    assert!(postcard::to_allocvec(&values[0])
        .unwrap()
        .starts_with(&[0xfe, 0xed]));
    round_trips::<i64, 0>(&values);
}

#[test]
fn values_crafted_to_start_with_any_two_byte_prefix_read_back() {
    // Every prefix a zigzag varint can begin with, the schema tag's among them: a value
    // whose encoding begins `fe ed v` for every version byte v is in here.
    let mut random = Random(8_192);
    let mut values = Vec::new();
    for first in 0x80..=0xffu8 {
        for second in 0..=0xffu8 {
            values.extend(
                i64s_starting_with(&[first, second], &mut random)
                    .into_iter()
                    .take(1),
            );
        }
    }
    for version in 0..=0x7fu8 {
        let crafted = i64s_starting_with(&[0xfe, 0xed, version | 0x80], &mut random);
        assert!(!crafted.is_empty(), "a value beginning fe ed {version:02x}");
        values.extend(crafted);
    }
    assert!(values.len() > 16_000, "{}", values.len());
    round_trips::<i64, 0>(&values);
    round_trips::<i64, 1>(&values);
}

/// The `weir new --lang rust` template's state.
#[derive(Serialize, Deserialize, Debug)]
struct Session {
    events: u32,
}

#[test]
fn structs_and_collections_that_began_with_the_tag_read_back() {
    // A session of 30,462 events and a list of 112,382 click times began with the tag.
    let sessions: Vec<Session> = (30_000..31_000).map(|events| Session { events }).collect();
    assert!(sessions
        .iter()
        .any(|s| postcard::to_allocvec(s).unwrap().starts_with(&[0xfe, 0xed])));
    round_trips::<Session, 0>(&sessions);
    let clicks: Vec<i64> = (0..112_382).map(|i| 1_764_410_455_411 + i).collect();
    assert!(postcard::to_allocvec(&clicks)
        .unwrap()
        .starts_with(&[0xfe, 0xed]));
    round_trips::<Vec<i64>, 0>(&[clicks.clone(), clicks[..10].to_vec()]);
    let mut random = Random(3);
    let bytes: Vec<Vec<u8>> = (0..=0xffu8)
        .map(|version| {
            let mut b = vec![0xfe, 0xed, version];
            b.extend((0..random.next() % 8).map(|_| random.next() as u8));
            b
        })
        .collect();
    round_trips::<Vec<u8>, 0>(&bytes);
    let strings: Vec<String> = (0..2_000)
        .map(|_| {
            char::from_u32((random.next() % 0x2_0000) as u32).map_or(String::new(), String::from)
        })
        .collect();
    round_trips::<String, 2>(&strings);
}

#[test]
fn values_of_the_first_format_read_as_before() {
    // Schema-0 values were written untagged; those that do not begin with the tag (all
    // but ~1 in 8,192 of them) read as they did, in value, list and map state.
    let mut host = TestHost::<Keep<i64, 0>>::new().unwrap();
    let untagged = |n: i64| postcard::to_allocvec(&n).unwrap();
    host.set_state_bytes("k", "value", untagged(1_764_410_455_411));
    host.set_list_state_bytes("k", "list", vec![untagged(-3), untagged(7)]);
    host.set_map_state_bytes(
        "k",
        "map",
        vec![(postcard::to_allocvec(&1u32).unwrap(), untagged(-3))],
    );
    host.process("main", "k", r#"{"value": 9}"#, 1).unwrap();
    host.process("main", "k", r#"{"dump": true}"#, 2).unwrap();
    let outputs: Vec<Value> = host
        .take_outputs("main")
        .into_iter()
        .map(|o| o.value)
        .collect();
    assert_eq!(outputs[0], json!({"replaced": 1_764_410_455_411i64}));
    assert_eq!(
        outputs[1],
        json!({"list": [-3, 7, 9], "map": [[1, -3], [2, 9]]})
    );
    // What is written now carries the tag and schema 0.
    assert_eq!(host.state_bytes("k", "value").unwrap(), [0xfe, 0xed, 0, 18]);
    // A value tagged in the first format (schema 1) reads under schema 1.
    let mut tagged = TestHost::<Keep<i64, 1>>::new().unwrap();
    tagged.set_state_bytes("k", "value", vec![0xfe, 0xed, 1, 14]);
    tagged.process("main", "k", r#"{"value": 1}"#, 1).unwrap();
    assert_eq!(tagged.take_outputs("main")[0].value, json!({"replaced": 7}));
}
