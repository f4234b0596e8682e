//! The defaults of a UDF's sandbox and batching that a pipeline file may change
//! (`[udf] memory_limit`, `call_timeout`, `max_emit_bytes`, `max_batch`): stated here
//! once, for the engine that enforces them and the pipeline file that sets them.

use std::time::Duration;

/// The default memory cap of one UDF instance (`[udf] memory_limit`): 64 MiB.
pub const DEFAULT_MEMORY_LIMIT: usize = 64 << 20;

/// The default deadline of one UDF call (`[udf] call_timeout`): 1 s.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// The most bytes (keys and values) one call may emit unless the pipeline says
/// otherwise (`[udf] max_emit_bytes`): 64 MiB.
pub const DEFAULT_MAX_EMIT_BYTES: usize = 64 << 20;

/// The default number of entries in one batched call (`[udf] max_batch`).
pub const DEFAULT_MAX_BATCH: usize = 512;
