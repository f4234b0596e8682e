//! Checkpoints kept in a Kafka partition (for tasks of a consumer group): large ones go
//! in chunks and read back whole, deletions stick, and a write that broke off halfway is
//! never used, on the real broker.

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use std::time::Duration;
use weir_e2e::kafka::create_topic;
use weir_e2e::services::{kafka_brokers, unique_table};
use weir_host::checkpoint::kafka_store::{KafkaBackend, KafkaCheckpoints, CHUNK_BYTES};
use weir_host::checkpoint::store::Backend;

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
    let store = KafkaBackend::open(&target).unwrap();
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

    let reopened = KafkaBackend::open(&target).unwrap();
    assert_eq!(reopened.epochs().unwrap(), vec![1, 2]);
    assert!(
        reopened.read(1).unwrap() == big,
        "the chunked checkpoint reads back whole"
    );
    assert_eq!(reopened.read(2).unwrap(), small);
    assert!(reopened.read(3).is_err(), "deleted");

    // The other partition is another task's: nothing of this one shows there.
    let other = KafkaBackend::open(&KafkaCheckpoints {
        partition: 0,
        ..target
    })
    .unwrap();
    assert!(other.epochs().unwrap().is_empty());
}
