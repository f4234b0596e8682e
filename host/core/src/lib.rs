//! # Weir core
//!
//! The ground floor of the Weir host: what every stage above shares and nothing here
//! depends on. No I/O, no wasm, no threads.
//!
//! - [`key`]: record keys, their ids, and the fixed order of keys whose timers tie.
//! - [`time`]: timestamp formats, watermarks, the timer service and its timing wheel.
//! - [`state`]: the host-owned keyed state table and the registry of declared states.
//! - [`output`]: records the UDF emits, and the [`Sink`](output::Sink) contract.
//! - [`position`]: where an input stands, as sources report it and checkpoints keep it.
//! - [`identity`]: a UDF's identity and the SHA-256 that tells versions apart.
//! - [`limits`]: the defaults of a UDF's sandbox and batching.
//! - [`codec`]: the small binary framing of checkpoint sections.
//!
//! The crates above, in data-path order: `weir-io` (sources and sinks) and `weir-engine`
//! (the keyed operator and the UDF runtime) beside each other, then `weir-checkpoint`,
//! `weir-pipeline`, `weir-run`, `weir-control`, `weir-cluster`, `weir-serve` and the
//! `weir` binary. `docs/architecture.md` draws the graph.

#![warn(missing_docs)]

pub mod codec;
pub mod identity;
pub mod key;
pub mod limits;
pub mod output;
pub mod position;
pub mod state;
pub mod time;
