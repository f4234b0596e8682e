//! Disk-backed keyed state: what the `disk` state backend keeps of every key (its state
//! entries and its pending timers) in an embedded LSM store, so that a shard's state is
//! bounded by its disk, not its memory (Flink's RocksDB backend, Kafka Streams' stores).
//!
//! The store is [fjall](https://docs.rs/fjall), in pure Rust (RocksDB's C++ build costs a
//! fresh machine ~15 minutes of both cores; fjall builds in seconds). One [`DiskStore`]
//! per shard keeps four keyspaces ([`layout`]): the state entries, one row each (a
//! value, a list item, a map entry: changing one map entry of a key with 100,000 reads
//! and writes that entry alone), the pending timers by key and by time, and whole keys
//! as the key table sends them out of memory and back (`slots`: one saved row per key,
//! its slots and timers, which a dormant key keeps with its first listing by time; the
//! engine uses this one today).
//!
//! The store is a working copy, not a durable one: checkpoints stay the record of the
//! state (the same files as the memory backend's, so a pipeline can switch backends and
//! keep its state). A run opens its store empty, restores the checkpoint into it, and
//! the store is deleted when the run ends; nothing is synced while it runs. A full
//! checkpoint reads a [`StoreSnapshot`], which sees the store as it was when taken while
//! the run goes on writing, so it can be encoded on another thread.

#![warn(missing_docs)]

mod disk;
pub mod layout;
mod rows;
mod slots;
mod snapshot;
mod spent;
#[cfg(test)]
mod tests;

pub use disk::DiskStore;
pub use rows::Entries;
pub use snapshot::{KeyWalk, StoreSnapshot, StoredKey};
