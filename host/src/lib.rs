//! # Weir host
//!
//! The host engine owns everything stateful and timed; user functions are sandboxed
//! wasm components called once per element and once per timer, like Flink's
//! `KeyedProcessFunction`. Records flow through the modules in this order:
//!
//! ```text
//! source ──▶ time (event time, watermarks) ──▶ operator (keyed) ──▶ runtime (UDF) ──▶ sink
//!  │                                              │  ▲
//!  └─ decode: key + timestamp, or dead letter     └──┴─ state (keyed, host-owned) + timers
//! ```
//!
//! - [`pipeline`]: the pipeline file and command-line overrides.
//! - [`source`]: JSON-lines files and stdin; key and timestamp extraction.
//! - [`time`]: timestamp formats, watermarks, the timer service and timing wheel.
//! - [`state`]: host-owned keyed state.
//! - [`operator`]: the keyed operator that drives elements, watermarks and timers.
//! - [`runtime`]: the process-function interface and its wasm implementation.
//! - [`sink`]: JSON-lines files, upsert tables, PostgreSQL, Kafka, and the dead-letter output.
//! - [`checkpoint`]: incremental checkpoints of all of the above, and restoring them.
//! - [`run`]: wiring a pipeline file into a running pipeline, with its run report.
//! - [`produce`]: `weir produce`, JSON lines into a Kafka topic.
//! - [`serve`]: `weir serve`, many pipelines behind an admin API, with hot UDF swaps.
//! - [`dev`]: `weir dev`, rebuild on save and hot-swap into a running pipeline.

pub mod checkpoint;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod dev;
pub mod new;
pub mod operator;
pub mod pipeline;
pub mod produce;
pub mod run;
pub mod runtime;
pub mod serve;
pub mod sink;
pub mod source;
pub mod state;
pub mod time;
