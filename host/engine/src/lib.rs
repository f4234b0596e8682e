//! # Weir engine
//!
//! The keyed operator and the UDF runtime: where an element meets its key's state and
//! the user's process function.
//!
//! - [`operator`]: the [`KeyedOperator`](operator::KeyedOperator), which drives elements,
//!   the watermark and timers of both domains through a process function, in batches,
//!   and writes what it emits into the sinks; a new UDF version is swapped in here and
//!   rolled back while on probation.
//! - [`runtime`]: the [`ProcessFunction`](runtime::ProcessFunction) contract, the
//!   [`HostServices`](runtime::HostServices) a call sees (keyed state, timers, outputs),
//!   and the wasm implementation (sandbox, imports, the batch wire, the compile cache).
//! - [`stage`]: the [`KeyedStage`](stage::KeyedStage), one UDF at parallelism N: its
//!   shards (one operator each), their threads, the sinks they share, and swaps that
//!   change every shard or none.
//! - [`snapshot`]: the keyed-state section of a checkpoint: every key with its slots and
//!   pending timers, whole or as the changes since the last one.
//!
//! Depends on `weir-core` (and wasmtime); the connectors in `weir-io` sit beside it.

#![warn(missing_docs)]

pub mod operator;
pub mod runtime;
pub mod snapshot;
pub mod stage;
