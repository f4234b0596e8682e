//! Kafka helpers for the connector tests, against the broker of [`crate::services`]:
//! creating topics, producing records to chosen partitions, reading topics back and
//! reading a consumer group's committed offsets. Nothing here joins a consumer group
//! (joins are slow on the test broker): partitions are assigned directly.

use crate::services::kafka_brokers;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake};
use std::time::{Duration, Instant};

/// How long the helpers wait for the broker before they panic.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs a future on this thread (the admin client's futures are completed by its own
/// thread, so nothing needs driving here).
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// Creates `topic` with `partitions` partitions (replication 1); panics if it cannot.
pub fn create_topic(topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("admin client");
    let options = AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(30)))
        .operation_timeout(Some(Duration::from_secs(30)));
    let results = block_on(admin.create_topics(
        &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
        &options,
    ))
    .expect("create topics");
    for result in results {
        result.unwrap_or_else(|(t, e)| panic!("cannot create topic {t}: {e}"));
    }
}

/// A record to produce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outgoing {
    pub payload: Vec<u8>,
    pub key: Option<Vec<u8>>,
    /// The message timestamp (ms since 1970); the producer's clock if `None`.
    pub timestamp: Option<i64>,
    pub partition: i32,
}

impl Outgoing {
    /// A record with this payload, no key, the producer's timestamp, to partition 0.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        Self {
            payload: payload.into(),
            ..Self::default()
        }
    }

    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }

    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = partition;
        self
    }

    /// To the partition Kafka's default partitioner picks for the key (murmur2, as the
    /// Java clients do).
    pub fn by_key(mut self) -> Self {
        self.partition = rdkafka::producer::PARTITION_UA;
        self
    }
}

/// Keeps the first delivery error.
struct Deliveries(Mutex<Vec<String>>);

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = result {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(error.to_string());
        }
    }
}

/// Produces `records` to `topic`, each to its partition, in order, and waits until every
/// one is acknowledged; panics if any is not. The producer is idempotent, so the order
/// within a partition is the order given, even when the client retries.
///
/// Every record goes in a message batch of its own: the test broker (tansu 0.6.0)
/// answers a ListOffsets request for the latest offset with the base offset of the
/// partition's last batch plus one, not with the log end offset, so after a batch of
/// 20 records it says 1. Whatever asks where a partition ends (`startup = "latest"`,
/// the end offsets a bounded source logs and uses for several topics) would be wrong.
/// One record per batch makes the two agree.
pub fn produce(topic: &str, records: &[Outgoing]) {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("batch.num.messages", "1")
        .set("linger.ms", "0")
        .set("message.timeout.ms", "30000")
        // For records sent `by_key`: Kafka's default partitioner.
        .set("partitioner", "murmur2_random")
        .create_with_context(Deliveries(Mutex::new(Vec::new())))
        .expect("producer");
    for (i, record) in records.iter().enumerate() {
        let mut message = BaseRecord::to(topic)
            .payload(&record.payload)
            .partition(record.partition);
        if let Some(key) = &record.key {
            message = message.key(key);
        }
        if let Some(ts) = record.timestamp {
            message = message.timestamp(ts);
        }
        let started = Instant::now();
        loop {
            match producer.send(message) {
                Ok(()) => break,
                Err((e, back)) => {
                    assert!(
                        started.elapsed() < TIMEOUT,
                        "cannot produce record {i} to {topic}: {e}"
                    );
                    message = back;
                    producer.poll(Duration::from_millis(50));
                }
            }
        }
    }
    producer
        .flush(TIMEOUT)
        .unwrap_or_else(|e| panic!("producing to {topic}: not acknowledged in time: {e}"));
    let failed = producer.context().0.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "{} of {} records to {topic} failed: {}",
        failed.len(),
        records.len(),
        failed[0]
    );
}

/// Produces JSON payloads to partition 0 (no key, the producer's timestamp).
pub fn produce_json(topic: &str, values: &[serde_json::Value]) {
    let records: Vec<Outgoing> = values
        .iter()
        .map(|v| Outgoing::new(v.to_string()))
        .collect();
    produce(topic, &records);
}

/// A message read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    pub timestamp: Option<i64>,
    /// Header names and values (`None` for a null value), in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub partition: i32,
    pub offset: i64,
}

impl Received {
    pub fn payload_str(&self) -> &str {
        std::str::from_utf8(&self.payload).expect("a UTF-8 payload")
    }

    /// The value of the first header called `name`, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
            .map(|v| std::str::from_utf8(v).expect("a UTF-8 header"))
    }
}

/// A consumer that never joins its group (only `assign` and offset look-ups).
fn consumer(group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .create()
        .expect("consumer")
}

/// The partition ids of `topic`, ascending.
pub fn partitions(topic: &str) -> Vec<i32> {
    partitions_of(&consumer("weir-e2e-metadata"), topic)
}

fn partitions_of(consumer: &BaseConsumer, topic: &str) -> Vec<i32> {
    let metadata = consumer
        .fetch_metadata(Some(topic), TIMEOUT)
        .unwrap_or_else(|e| panic!("metadata of {topic}: {e}"));
    let found = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .filter(|t| t.error().is_none())
        .unwrap_or_else(|| panic!("topic {topic} does not exist"));
    let mut ids: Vec<i32> = found.partitions().iter().map(|p| p.id()).collect();
    ids.sort_unstable();
    ids
}

/// Reads every partition of `topic` from the beginning until two seconds pass without a
/// message (16 s before the first one): all it holds, however many that is.
pub fn read_all(topic: &str) -> Vec<Received> {
    read_until(topic, usize::MAX, Duration::from_secs(2))
}

/// Reads every partition of `topic` from the beginning until `expected` messages arrived
/// (panics after a minute), then checks for a second that no more come. Messages are in
/// arrival order: in offset order within a partition, interleaved across partitions.
pub fn read_topic(topic: &str, expected: usize) -> Vec<Received> {
    let got = read_until(topic, expected, Duration::ZERO);
    // Nothing more than expected arrives.
    let consumer = consumer("weir-e2e-reader");
    let mut list = TopicPartitionList::new();
    for partition in partitions_of(&consumer, topic) {
        let next = got
            .iter()
            .filter(|m| m.partition == partition)
            .map(|m| m.offset + 1)
            .max()
            .unwrap_or(0);
        list.add_partition_offset(topic, partition, Offset::Offset(next))
            .expect("add partition");
    }
    consumer.assign(&list).expect("assign the partitions");
    if let Some(Ok(m)) = consumer.poll(Duration::from_secs(1)) {
        panic!(
            "an extra message in {topic}: partition {} offset {}",
            m.partition(),
            m.offset()
        );
    }
    got
}

/// Reads `topic` from the beginning until `expected` messages arrived or, with a
/// non-zero `quiet`, until that long passes without one.
fn read_until(topic: &str, expected: usize, quiet: Duration) -> Vec<Received> {
    let consumer = consumer("weir-e2e-reader");
    let mut list = TopicPartitionList::new();
    for partition in partitions_of(&consumer, topic) {
        list.add_partition_offset(topic, partition, Offset::Beginning)
            .expect("add partition");
    }
    consumer.assign(&list).expect("assign the partitions");
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    let received = |m: &rdkafka::message::BorrowedMessage<'_>| Received {
        key: m.key().map(<[u8]>::to_vec),
        payload: m.payload().unwrap_or_default().to_vec(),
        timestamp: m.timestamp().to_millis(),
        headers: m
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default(),
        partition: m.partition(),
        offset: m.offset(),
    };
    let mut last = Instant::now();
    while got.len() < expected {
        // The first message may take a while (joining, the first fetch); after that,
        // `quiet` without one means the end.
        let waited = if got.is_empty() { quiet * 8 } else { quiet };
        if !quiet.is_zero() && last.elapsed() > waited {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {expected} messages arrived in {topic} within {} s",
            got.len(),
            TIMEOUT.as_secs()
        );
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(e)) => panic!("consuming {topic}: {e}"),
            Some(Ok(m)) => {
                got.push(received(&m));
                last = Instant::now();
            }
        }
    }
    got
}

/// The offsets `group` has committed for `topic`, by partition (partitions without a
/// committed offset are left out). Reads them without joining the group.
pub fn committed_offsets(group: &str, topic: &str) -> BTreeMap<i32, i64> {
    let consumer = consumer(group);
    let mut list = TopicPartitionList::new();
    for partition in partitions_of(&consumer, topic) {
        list.add_partition(topic, partition);
    }
    let committed = consumer
        .committed_offsets(list, TIMEOUT)
        .unwrap_or_else(|e| panic!("committed offsets of group {group} on {topic}: {e}"));
    committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(n) => Some((e.partition(), n)),
            _ => None,
        })
        .collect()
}
