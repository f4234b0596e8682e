//! # Weir io
//!
//! Where records come from and where they go: every connector of the host, each owning
//! its own settings.
//!
//! - [`source`]: JSON-lines files and stdin, Kafka topics, another stage's output
//!   ([`source::exchange`]: the bounded queue between stages, with its sink end); the
//!   [`Source`](source::Source) contract; decoding a record's key and event timestamp
//!   ([`source::decode`]).
//! - [`sink`]: JSON-lines files and stdout, upsert tables, PostgreSQL upserts, Kafka
//!   topics, and the dead-letter output. The [`Sink`](weir_core::output::Sink) contract
//!   itself is in `weir-core`, since the keyed operator writes into sinks.
//! - [`kafka`]: every Kafka client's configuration and log context, in one place.
//! - [`repartition`]: the headers of the repartition topic, read by the Kafka source.
//!
//! This crate depends on `weir-core` only: a change to a connector recompiles this crate
//! and those above it, never the wasm engine beside it.

#![warn(missing_docs)]

pub mod kafka;
pub mod repartition;
pub mod sink;
pub mod source;
