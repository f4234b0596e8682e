//! The Kafka sink: every record of an output is produced to one topic.
//!
//! Why it looks like this: a stream processor's output is most often another stream, read
//! by other consumers, so records keep what Kafka can carry of them — the record's key as
//! the message key (none if it has none, so Kafka spreads those over partitions), its JSON
//! value as the payload, its event time as the message timestamp.
//!
//! The producer is librdkafka's, idempotent (`enable.idempotence=true`, `acks=all`), so the
//! retries librdkafka makes on its own neither duplicate nor reorder records within a
//! partition. `write` only enqueues (when librdkafka's queue is full it serves delivery
//! reports and tries again); `flush`, called while the input is idle and at the end, waits
//! for every enqueued record to be acknowledged. A record librdkafka gives up on (after
//! `message.timeout.ms`, 30 s unless set in `properties`) fails the run with its error,
//! naming the topic and brokers; so does a broker that cannot be reached when the sink
//! opens, so a wrong address fails before any input is read instead of hanging.
//!
//! Every record carries a `weir-id` header, `<pipeline>/<output>/<sequence>`, where the
//! sequence is the record's number in its output since the pipeline first started. The
//! number is kept in checkpoints, so after a crash the replay from the last checkpoint
//! re-sends byte-identical records with the same ids, and a consumer that remembers the
//! ids it has seen drops the repeats. (The id counts from the restored checkpoint
//! rather than from "epoch and position within it" because a replay need not place its
//! checkpoints where the crashed run did: a record's number in its output is the one
//! thing both runs agree on.)
//!
//! With `transactional = true` the sink also writes each checkpoint's records in one
//! Kafka transaction, committed when the checkpoint is taken, so `read_committed`
//! consumers only see records of completed checkpoints. A crash between the commit and
//! the checkpoint file landing replays that stretch in a new transaction: the ids still
//! tell the repeats apart. (The brokers on the development machines accept but do not
//! enforce transactions; the id guarantee is what the tests check.)

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weir_core::output::{OutputRecord, Sink};

/// A Kafka topic that records are produced to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaTarget {
    /// The bootstrap brokers, `host:port[,host:port...]` (librdkafka's
    /// `bootstrap.servers`).
    pub brokers: String,
    /// The topic every record of the output is produced to.
    pub topic: String,
    /// librdkafka producer properties, applied over the sink's defaults.
    pub properties: Vec<(String, String)>,
    /// Write each checkpoint's records in one Kafka transaction (`transactional.id`
    /// `weir-<pipeline>-<output>`), committed when the checkpoint is taken.
    pub transactional: bool,
}

/// How long librdkafka tries to deliver a record, unless the pipeline sets it.
const MESSAGE_TIMEOUT_MS: u64 = 30_000;
/// How long opening the sink waits for the brokers to answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Records enqueued between two polls of delivery reports.
const POLL_EVERY: u64 = 1_024;

/// The sink of one output that produces to a Kafka topic (see the module docs): each
/// record with its key, value, timestamp and `weir-id` header.
pub struct KafkaSink {
    topic: String,
    producer: CheckedProducer,
    /// `<pipeline>/<output>/`: the id header's prefix.
    id_prefix: String,
    id: String,
    transactional: bool,
}

/// A librdkafka producer, idempotent, whose undelivered records are errors: what the sink
/// and the repartitioner (the cluster crate's repartitioner) produce with.
pub struct CheckedProducer {
    location: String,
    producer: BaseProducer<Deliveries>,
    /// How long `flush` waits: a little longer than librdkafka's own delivery timeout,
    /// so a record it gives up on is reported as its error, not as a flush timeout.
    flush_timeout: Duration,
    sent: u64,
}

/// Counts failed deliveries and keeps the first error; forwards librdkafka's logs.
pub struct Deliveries {
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => tracing::warn!("librdkafka: {fac} {message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!("librdkafka: {fac} {message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!("librdkafka: {fac} {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!("kafka: {error}: {reason}");
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            let mut first = self.first_error.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert_with(|| error.to_string());
        }
    }
}

impl CheckedProducer {
    /// Creates the producer (`properties` win over the defaults) and checks that the
    /// brokers answer; with `transactional_id`, opens the first transaction.
    pub fn connect(
        location: String,
        brokers: &str,
        properties: &[(String, String)],
        transactional_id: Option<String>,
    ) -> anyhow::Result<Self> {
        let mut config = crate::kafka::client_config(brokers);
        config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", MESSAGE_TIMEOUT_MS.to_string());
        if let Some(id) = &transactional_id {
            config.set("transactional.id", id);
        }
        for (name, value) in properties {
            config.set(name, value);
        }
        let message_timeout = config
            .get("message.timeout.ms")
            .or_else(|| config.get("delivery.timeout.ms"))
            .and_then(|ms| ms.parse::<u64>().ok())
            .unwrap_or(MESSAGE_TIMEOUT_MS);
        let context = Deliveries {
            failed: AtomicU64::new(0),
            first_error: Mutex::new(None),
        };
        let producer: BaseProducer<Deliveries> = config
            .create_with_context(context)
            .map_err(|e| anyhow::anyhow!("{location}: invalid producer configuration: {e}"))?;
        producer
            .client()
            .fetch_metadata(None, CONNECT_TIMEOUT)
            .map_err(|e| {
                anyhow::anyhow!(
                    "{location}: cannot reach the brokers within {} s: {e}",
                    CONNECT_TIMEOUT.as_secs()
                )
            })?;
        if transactional_id.is_some() {
            producer
                .init_transactions(CONNECT_TIMEOUT)
                .and_then(|()| producer.begin_transaction())
                .map_err(|e| anyhow::anyhow!("{location}: cannot start a transaction: {e}"))?;
        }
        Ok(Self {
            location,
            producer,
            flush_timeout: Duration::from_millis(message_timeout) + Duration::from_secs(10),
            sent: 0,
        })
    }

    /// The name given to [`connect`](Self::connect), which this producer's errors start
    /// with (a sink's is `kafka topic "t" on host:port`).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Enqueues a record; while librdkafka's queue is full, serves delivery reports and
    /// tries again.
    pub fn send(&mut self, message: BaseRecord<'_, [u8], [u8]>) -> anyhow::Result<()> {
        let mut message = message;
        let started = Instant::now();
        loop {
            match self.producer.send(message) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    if started.elapsed() > self.flush_timeout {
                        anyhow::bail!(
                            "{}: the producer queue stayed full for {} s",
                            self.location,
                            self.flush_timeout.as_secs()
                        );
                    }
                    message = back;
                    self.producer.poll(Duration::from_millis(50));
                    self.check_deliveries()?;
                }
                Err((e, _)) => anyhow::bail!("{}: cannot produce a record: {e}", self.location),
            }
        }
        self.sent += 1;
        if self.sent.is_multiple_of(POLL_EVERY) {
            self.producer.poll(Duration::ZERO);
            self.check_deliveries()?;
        }
        Ok(())
    }

    /// Waits until every enqueued record is acknowledged.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        let flushed = self.producer.flush(self.flush_timeout);
        self.check_deliveries()?;
        flushed.map_err(|e| {
            anyhow::anyhow!(
                "{}: {} record(s) not acknowledged within {} s: {e}",
                self.location,
                self.producer.in_flight_count(),
                self.flush_timeout.as_secs()
            )
        })
    }

    /// Commits the open transaction and opens the next.
    fn commit_transaction(&mut self, begin_next: bool) -> anyhow::Result<()> {
        self.producer
            .commit_transaction(self.flush_timeout)
            .map_err(|e| {
                anyhow::anyhow!("{}: cannot commit the transaction: {e}", self.location)
            })?;
        if begin_next {
            self.producer.begin_transaction().map_err(|e| {
                anyhow::anyhow!("{}: cannot begin a transaction: {e}", self.location)
            })?;
        }
        Ok(())
    }

    /// Fails if librdkafka reported records it could not deliver.
    fn check_deliveries(&self) -> anyhow::Result<()> {
        let context = self.producer.context();
        let failed = context.failed.load(Ordering::Relaxed);
        if failed > 0 {
            let first = context
                .first_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_default();
            anyhow::bail!(
                "{}: {failed} record(s) could not be delivered: {first}",
                self.location
            );
        }
        Ok(())
    }
}

impl KafkaSink {
    /// Creates the producer and checks that the brokers answer. `pipeline` and `output`
    /// name the records' ids.
    pub fn connect(target: &KafkaTarget, pipeline: &str, output: &str) -> anyhow::Result<Self> {
        let location = format!("kafka topic {:?} on {}", target.topic, target.brokers);
        let transactional_id = target
            .transactional
            .then(|| format!("weir-{pipeline}-{output}"));
        Ok(Self {
            topic: target.topic.clone(),
            producer: CheckedProducer::connect(
                location,
                &target.brokers,
                &target.properties,
                transactional_id,
            )?,
            id_prefix: format!("{pipeline}/{output}/"),
            id: String::new(),
            transactional: target.transactional,
        })
    }
}

impl Sink for KafkaSink {
    fn location(&self) -> &str {
        self.producer.location()
    }

    fn write(&mut self, record: &OutputRecord<'_>) -> anyhow::Result<()> {
        use std::fmt::Write as _;
        self.id.clear();
        let _ = match weir_core::output::Sequence::of(record.sequence) {
            weir_core::output::Sequence::Output(n) => write!(self.id, "{}{n}", self.id_prefix),
            weir_core::output::Sequence::Grouped { group, number } => {
                write!(self.id, "{}g{group}.{number}", self.id_prefix)
            }
        };
        let headers = OwnedHeaders::new_with_capacity(1).insert(Header {
            key: "weir-id",
            value: Some(self.id.as_bytes()),
        });
        let mut message = BaseRecord::to(&self.topic)
            .payload(record.value)
            .headers(headers);
        if let Some(key) = record.key {
            message = message.key(key);
        }
        // Kafka timestamps are milliseconds since 1970 and cannot be negative.
        if record.timestamp >= 0 {
            message = message.timestamp(record.timestamp);
        }
        self.producer.send(message)
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.producer.flush()
    }

    fn checkpoint(&mut self) -> anyhow::Result<super::SinkState> {
        self.producer.flush()?;
        if self.transactional {
            self.producer.commit_transaction(true)?;
        }
        Ok(super::SinkState::default())
    }

    fn finish(&mut self) -> anyhow::Result<()> {
        self.producer.flush()?;
        if self.transactional {
            self.producer.commit_transaction(false)?;
        }
        Ok(())
    }
}
