//! The sandbox a UDF runs in: one shared engine, and a store per instance that grants
//! nothing beyond the Weir contract.
//!
//! - Deadlines: the engine uses epoch interruption (about 2% overhead, against 5% for
//!   fuel); a ticker thread advances the epoch every [`EPOCH_TICK`], and each call gets a
//!   deadline of its `call_timeout` in ticks.
//! - Memory: a [`MemoryLimiter`] caps each instance's linear memory; growing past it traps
//!   instead of failing quietly inside the guest.
//! - WASI: components built for `wasm32-wasip2` import WASI's cli, io, clocks, random and
//!   filesystem interfaces. They are satisfied with a context that grants nothing: no
//!   preopened directories, no network, no environment or arguments, clocks frozen at
//!   the epoch, deterministic randomness. The guest's stderr is kept (its last few KiB)
//!   so a panic message can be reported, and forwarded to the host's log at debug level (`WEIR_LOG=debug`).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use wasmtime::{Config, Engine, ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx};

/// How often the epoch advances: the granularity of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The process-wide engine. Compilation settings are the same for every UDF, and one
/// engine means one epoch ticker however many pipelines run.
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::new();
        config.wasm_component_model(true);
        // Weir calls components synchronously and uses none of the component model's
        // async features; without them every call is cheaper (measured: the Python
        // counter, one call per element, 7.5% faster; the batched Rust counter the same).
        config.concurrency_support(false);
        config.epoch_interruption(true);
        config.cranelift_opt_level(wasmtime::OptLevel::Speed);
        config.wasm_backtrace_details(wasmtime::WasmBacktraceDetails::Enable);
        // A new version of a UDF mostly repeats the old one's functions (its libraries do
        // not change): compiled functions are kept by content, so a hot swap compiles
        // only what changed.
        config
            .enable_incremental_compilation(Arc::new(CompiledFunctions::default()))
            .expect("incremental compilation is available");
        // `WEIR_PROFILE=perfmap` lets `perf` name the guest's functions.
        if std::env::var("WEIR_PROFILE").as_deref() == Ok("perfmap") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config).expect("the wasmtime engine configuration is valid");
        let ticker = engine.weak();
        std::thread::Builder::new()
            .name("weir-epoch".into())
            .spawn(move || loop {
                std::thread::sleep(EPOCH_TICK);
                match ticker.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => return,
                }
            })
            .expect("cannot start the epoch ticker thread");
        engine
    })
}

/// Compiled functions by the hash of their input, in memory, for incremental
/// compilation. Cleared when it grows past [`CompiledFunctions::LIMIT`] bytes.
#[derive(Debug, Default)]
struct CompiledFunctions {
    entries: Mutex<CompiledEntries>,
}

/// The cached entries, and their total size in bytes.
#[derive(Debug, Default)]
struct CompiledEntries {
    map: std::collections::HashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl CompiledFunctions {
    const LIMIT: usize = 256 << 20;
}

impl wasmtime::CacheStore for CompiledFunctions {
    fn get(&self, key: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.map.get(key).cloned().map(std::borrow::Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.bytes + value.len() > Self::LIMIT {
            entries.map.clear();
            entries.bytes = 0;
        }
        entries.bytes += key.len() + value.len();
        entries.map.insert(key.to_vec(), value);
        true
    }
}

/// Epoch ticks for a call deadline, rounded up, plus one for the tick already under way.
pub fn deadline_ticks(timeout: Duration) -> u64 {
    (timeout.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64).max(1) + 1
}

/// Memory limits of one instance.
pub fn limits(memory_limit_bytes: usize) -> MemoryLimiter {
    MemoryLimiter {
        limits: StoreLimitsBuilder::new()
            .memory_size(memory_limit_bytes)
            .instances(64)
            .tables(64)
            .memories(16)
            .trap_on_grow_failure(true)
            .build(),
        memory_bytes: 0,
    }
}

/// An instance's limits, and the linear memory it holds in all (a component may have
/// several memories), so the host can replace an instance whose memory only grows
/// before it reaches its limit.
pub struct MemoryLimiter {
    limits: StoreLimits,
    /// The sum of the instance's linear memory sizes.
    pub memory_bytes: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        if allowed {
            self.memory_bytes += desired.saturating_sub(current);
        }
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// A WASI context that grants nothing, with stderr captured into `stderr`.
pub fn wasi_context(stderr: GuestStderr) -> WasiCtx {
    WasiCtx::builder()
        .stderr(stderr)
        .wall_clock(FrozenClock)
        .monotonic_clock(FrozenClock)
        .secure_random(deterministic_random())
        .insecure_random(deterministic_random())
        .insecure_random_seed(0)
        .build()
}

/// A clock stopped at the Unix epoch: time reaches a UDF only through the contract.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// Randomness for the guest: a fixed sequence, so replays of a pipeline see the same bytes.
fn deterministic_random() -> wasmtime_wasi::Deterministic {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let bytes = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    wasmtime_wasi::Deterministic::new(bytes)
}

/// The guest's stderr: the last [`GuestStderr::KEEP`] bytes are kept for error reports,
/// and complete lines go to the host's log.
#[derive(Clone)]
pub struct GuestStderr {
    udf: Arc<str>,
    inner: Arc<Mutex<StderrBuffer>>,
}

#[derive(Default)]
struct StderrBuffer {
    tail: VecDeque<u8>,
    line: Vec<u8>,
}

impl GuestStderr {
    const KEEP: usize = 8 << 10;

    /// An empty stderr for the UDF `udf`, whose name labels the lines logged.
    pub fn new(udf: &str) -> Self {
        Self {
            udf: udf.into(),
            inner: Arc::default(),
        }
    }

    /// What the guest wrote last, trimmed.
    pub fn tail(&self) -> String {
        let buffer = self.inner.lock().unwrap();
        let bytes: Vec<u8> = buffer.tail.iter().copied().collect();
        String::from_utf8_lossy(&bytes).trim().to_string()
    }

    /// Forgets what was written, so a report shows only the failing call's output.
    pub fn clear(&self) {
        let mut buffer = self.inner.lock().unwrap();
        buffer.tail.clear();
    }

    fn write(&self, bytes: &[u8]) {
        let mut buffer = self.inner.lock().unwrap();
        buffer.tail.extend(bytes);
        let excess = buffer.tail.len().saturating_sub(Self::KEEP);
        buffer.tail.drain(..excess);
        for &b in bytes {
            if b == b'\n' {
                let line = std::mem::take(&mut buffer.line);
                tracing::debug!(target: "weir::udf", udf = %self.udf, "stderr: {}", String::from_utf8_lossy(&line));
            } else if buffer.line.len() < Self::KEEP {
                buffer.line.push(b);
            }
        }
    }
}

impl IsTerminal for GuestStderr {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStderr {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for GuestStderr {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_rounds_up() {
        assert_eq!(deadline_ticks(Duration::from_secs(1)), 101);
        assert_eq!(deadline_ticks(Duration::from_millis(1)), 2);
    }

    #[test]
    fn stderr_keeps_the_tail() {
        let stderr = GuestStderr::new("t");
        stderr.write(&vec![b'x'; 10_000]);
        stderr.write(b"\npanicked at src/lib.rs:3: boom\n");
        let tail = stderr.tail();
        assert!(tail.ends_with("panicked at src/lib.rs:3: boom"));
        assert!(tail.len() <= GuestStderr::KEEP);
        stderr.clear();
        assert_eq!(stderr.tail(), "");
    }
}
