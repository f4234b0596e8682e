//! Kafka clients, configured in one place: every consumer, producer and admin client of
//! the host (sources, sinks, checkpoint stores, a group's member, status and
//! repartitioner) starts from [`client_config`], and logs through one of the contexts
//! here.

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;

/// A client of `brokers` (librdkafka's `bootstrap.servers`), to be completed with the
/// settings of its use.
pub fn client_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    config
}

/// Drops a librdkafka client (a consumer, a producer, an admin client) on a thread of its
/// own: librdkafka takes about 100 ms to tear one down (its threads notice the end on
/// their next poll), which a short-lived client's caller need not wait for.
pub fn drop_in_background<C: Send + 'static>(client: C) {
    std::thread::spawn(move || drop(client));
}

/// A consumer of `brokers` in consumer group `group` that commits only what it is told
/// to (`enable.auto.commit = false`): every consumer of the host tracks its own
/// positions, in checkpoints or in explicit commits.
pub fn consumer_config(brokers: &str, group: &str) -> ClientConfig {
    let mut config = client_config(brokers);
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false");
    config
}

/// Forwards librdkafka's logs and errors to the run's log, naming `what` the client is
/// (`kafka source`, say); all brokers down is a warning, other errors are debug detail
/// (librdkafka logs each connection failure itself).
pub struct Logs(pub &'static str);

impl rdkafka::ClientContext for Logs {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => tracing::warn!("librdkafka: {fac} {message}"),
            _ => tracing::debug!("librdkafka: {fac} {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::AllBrokersDown) {
            tracing::warn!("{}: {reason}; waiting for the brokers to come back", self.0);
        } else {
            tracing::debug!("{}: {error}: {reason}", self.0);
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Logs {}

/// A reader's context: reaching the end of a partition is how reading ends, not an
/// error worth the log; errors are debug detail naming `what` reads (`reading
/// checkpoints`, say).
pub struct Quiet(pub &'static str);

impl rdkafka::ClientContext for Quiet {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!("{}: {error}: {reason}", self.0);
    }
}

impl rdkafka::consumer::ConsumerContext for Quiet {}
