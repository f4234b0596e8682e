//! Checkpoints kept in a Kafka partition (for tasks of a consumer group): large ones go
//! in chunks and read back whole, deletions stick, and a write that broke off halfway is
//! never used, and a zombie cannot write over a new owner, on the real broker.

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use std::time::Duration;
use weir_checkpoint::kafka_store::{KafkaBackend, KafkaCheckpoints, CHUNK_BYTES};
use weir_checkpoint::store::Backend;
use weir_e2e::kafka::create_topic;
use weir_e2e::services::{kafka_brokers, unique_table};

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn chunks_deletions_and_broken_writes() {
    let topic = unique_table("checkpoints");
    create_topic(&topic, 2);
    let target = KafkaCheckpoints {
        brokers: kafka_brokers(),
        topic: topic.clone(),
        partition: 1,
    };
    let work = weir_e2e::Workdir::new();
    let state = work.path("state");
    // What a killed process left of its copy of this partition goes when a store opens;
    // a live process's stays.
    let left = state.join("kafka-p1-4000000000-1");
    let live = state.join(format!("kafka-p1-{}-1", std::process::id()));
    for dir in [&left, &live] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("1.weir"), b"old").unwrap();
    }
    let store = KafkaBackend::open(&target, &state).unwrap();
    assert!(!left.exists() && live.exists());
    std::fs::remove_dir_all(&live).unwrap();
    assert!(
        store.epochs().unwrap().is_empty(),
        "a new partition holds nothing"
    );

    let big = bytes(CHUNK_BYTES * 2 + 12_345, 7); // three chunks
    let small = bytes(100, 9);
    store.write(1, &big).unwrap();
    store.write(2, &small).unwrap();
    store.write(3, &bytes(10, 3)).unwrap();
    store.delete(3).unwrap();

    // Epoch 4, broken off after the first of its two chunks (a crash while writing).
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .unwrap();
    let headers = OwnedHeaders::new().insert(Header {
        key: "weir-chunk",
        value: Some(b"99/0/2".as_slice()),
    });
    producer
        .send(
            BaseRecord::to(&topic)
                .partition(1)
                .key("4")
                .payload(&bytes(10, 4))
                .headers(headers),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();

    let reopened = KafkaBackend::open(&target, &state).unwrap();
    assert_eq!(reopened.epochs().unwrap(), vec![1, 2]);
    assert!(
        reopened.read(1).unwrap() == big,
        "the chunked checkpoint reads back whole"
    );
    assert_eq!(reopened.read(2).unwrap(), small);
    assert!(reopened.read(3).is_err(), "deleted");

    // The other partition is another task's: nothing of this one shows there.
    let other = KafkaBackend::open(
        &KafkaCheckpoints {
            partition: 0,
            ..target
        },
        &state,
    )
    .unwrap();
    assert!(other.epochs().unwrap().is_empty());
    // Each store keeps what it holds in a local copy of its own, a file per checkpoint,
    // and deletes it when it goes.
    let copies = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(copies().len(), 3, "{:?}", copies());
    let holding_big = copies()
        .iter()
        .filter(|name| {
            std::fs::metadata(state.join(name).join("1.weir"))
                .is_ok_and(|m| m.len() == big.len() as u64)
        })
        .count();
    assert_eq!(
        holding_big, 2,
        "the writer's and the reader's copies hold checkpoint 1"
    );
    drop((store, reopened, other));
    assert!(copies().is_empty(), "{:?}", copies());
}

/// A task's store claims its partition: once a new owner has claimed it, what the old one
/// (a zombie, frozen past its session timeout) writes or deletes is ignored by readers.
#[test]
fn a_zombie_s_writes_after_a_new_claim_are_ignored() {
    let topic = unique_table("claimed");
    create_topic(&topic, 1);
    let target = KafkaCheckpoints {
        brokers: kafka_brokers(),
        topic,
        partition: 0,
    };
    let work = weir_e2e::Workdir::new();
    let state = work.path("state");
    let zombie = KafkaBackend::open_claimed(&target, &state).unwrap();
    let first = bytes(CHUNK_BYTES + 10, 1);
    zombie.write(1, &first).unwrap();

    let owner = KafkaBackend::open_claimed(&target, &state).unwrap();
    assert_eq!(
        owner.epochs().unwrap(),
        vec![1],
        "the new owner restores from 1"
    );
    zombie.write(2, &bytes(50, 2)).unwrap();
    zombie.write(3, &bytes(50, 3)).unwrap();
    zombie.delete(1).unwrap();
    let second = bytes(70, 4);
    owner.write(2, &second).unwrap();

    let reader = KafkaBackend::open(&target, &state).unwrap();
    assert_eq!(reader.epochs().unwrap(), vec![1, 2]);
    assert!(
        reader.read(1).unwrap() == first,
        "the zombie's deletion is ignored"
    );
    assert_eq!(
        reader.read(2).unwrap(),
        second,
        "the owner's epoch 2, not the zombie's"
    );
}
