//! Wasm components as process functions.
//!
//! [`WasmFunction`] loads a component, checks that it implements the `weir:udf` world,
//! and calls it through the generated [`bindings`]. The host services move into the
//! instance's store for the length of each call, so the imports ([`imports`]) act on the
//! host-owned state directly. After a trap the instance is thrown away and a fresh one
//! is created (and initialised) on the next call: state lives in the host, so nothing
//! is lost.

mod batch;
mod imports;
pub mod precompiled;
pub mod sandbox;

use super::{
    BatchEntry, BatchTaken, CallError, ElementRef, FiredTimer, HostServices, InitInfo,
    ProcessFunction,
};
use anyhow::Context as _;
use sandbox::GuestStderr;
use std::path::Path;
use std::time::Duration;
use wasmtime::component::{ComponentExportIndex, Linker, ResourceTable, TypedFunc};
use wasmtime::Store;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use weir_core::time::timers::TimeDomain;

/// Bindings generated from `wit/weir.wit`. Items the WIT documents carry its doc
/// comments; the rest is generated glue (constructors, `add_to_linker`, undocumented WIT
/// items), which the `missing_docs` lint is not asked to check.
#[allow(missing_docs)]
pub mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "keyed-process",
        imports: { default: trappable },
    });
}

use bindings::weir::udf::types;

/// What a UDF's store holds.
pub struct StoreData {
    /// The host services, moved in for the length of a call.
    host: HostServices,
    udf: std::sync::Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    limits: sandbox::MemoryLimiter,
    /// What the `dev-sources` import answers (empty but under `weir dev`).
    sources: DevSources,
}

/// Source files handed to a component through the `weir:udf/dev-sources` import: paths
/// relative to the project folder, and their bytes. Shared by every instance.
pub type DevSources = std::sync::Arc<Vec<(String, Vec<u8>)>>;

impl WasiView for StoreData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Sandbox settings of one UDF.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The most linear memory the instance may grow to; past it, an allocation fails
    /// inside the guest and the call traps.
    pub memory_bytes: usize,
    /// The longest one call (an element, a timer, a batch) may run before it is
    /// interrupted and counted as failed.
    pub call_timeout: Duration,
    /// How many bytes of keyed state (as the host holds it) the instance may keep
    /// between batches on the cached batch path; once it has been sent more, it drops
    /// its copies and starts over. 0 keeps none.
    pub state_cache_bytes: usize,
}

pub use weir_core::limits::{DEFAULT_CALL_TIMEOUT, DEFAULT_MEMORY_LIMIT};

/// A compiled UDF component, ready to instantiate (a clone shares the compiled code).
#[derive(Clone)]
pub struct LoadedComponent {
    /// The name it was loaded under (a run passes the pipeline's `[udf] name`): what
    /// messages, log lines and the guest's stderr are labelled with.
    pub name: String,
    /// The SHA-256 of the component's bytes, in hex: its identity in checkpoints.
    pub sha256: String,
    /// Whether it came from the compile cache.
    pub provenance: precompiled::Provenance,
    pre: bindings::KeyedProcessPre<StoreData>,
    /// The batch export the component has, if any: `weir:udf/cached-batch`, or else
    /// `weir:udf/batch`.
    batch: Option<(BatchPath, ComponentExportIndex)>,
    /// The files the `dev-sources` import hands the guest.
    sources: DevSources,
}

/// Which batch export a component is called through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchPath {
    /// `weir:udf/batch`: every key's state goes with every batch.
    Plain,
    /// `weir:udf/cached-batch`: the guest keeps the state of the keys it has seen.
    Cached,
}

/// The batched export: an encoded batch in, encoded effects out.
type BatchFunc = TypedFunc<(Vec<u8>,), (Result<Vec<u8>, types::Error>,)>;

impl LoadedComponent {
    /// The batched interface the component is called through, as a WIT name without its
    /// version (`cached-batch` or `batch`), or `None` if it takes one call per element.
    pub fn batch_interface(&self) -> Option<&'static str> {
        self.batch.map(|(path, _)| match path {
            BatchPath::Cached => "cached-batch",
            BatchPath::Plain => "batch",
        })
    }

    /// The same compiled component with `files` handed to its instances through the
    /// `weir:udf/dev-sources` import (`weir dev`'s Python development runtime). Its
    /// [`sha256`](Self::sha256) is that of the component's and the files' together, so
    /// each set of sources is a version of its own.
    pub fn with_sources(&self, files: Vec<(String, Vec<u8>)>) -> Self {
        use sha2::Digest as _;
        let mut hasher = sha2::Sha256::new();
        hasher.update(b"weir-dev-sources\0");
        hasher.update(self.sha256.as_bytes());
        for (path, bytes) in &files {
            hasher.update((path.len() as u64).to_le_bytes());
            hasher.update(path.as_bytes());
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        let sha256: [u8; 32] = hasher.finalize().into();
        Self {
            sha256: weir_core::identity::hex(&sha256),
            sources: std::sync::Arc::new(files),
            ..self.clone()
        }
    }

    /// Compiles a component file and checks it against the contract.
    pub fn from_file(name: &str, path: &Path) -> anyhow::Result<Self> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read UDF component {}", path.display()))?;
        Self::from_bytes(name, &bytes).with_context(|| format!("UDF component {}", path.display()))
    }

    /// Compiles component bytes and checks them against the contract.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> anyhow::Result<Self> {
        if is_core_module(bytes) {
            anyhow::bail!(
                "this is a core wasm module, not a component: build the UDF for wasm32-wasip2 \
                 (or wrap the module with `wasm-tools component new`)"
            );
        }
        if !bytes.starts_with(b"\0asm") {
            anyhow::bail!(
                "not a WebAssembly file: it starts with {:?}, where a component starts with \
                 \"\\0asm\"; build the UDF (`weir build pipeline.toml`) and give its .wasm",
                String::from_utf8_lossy(&bytes[..bytes.len().min(8)])
            );
        }
        let engine = sandbox::engine();
        let sha256: [u8; 32] = {
            use sha2::Digest as _;
            sha2::Sha256::digest(bytes).into()
        };
        let (component, provenance) =
            precompiled::component(engine, bytes, &sha256).context("not a valid wasm component")?;
        let mut linker = Linker::<StoreData>::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(anyhow::Error::from)?;
        bindings::KeyedProcess::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |data| data,
        )
        .map_err(anyhow::Error::from)?;
        linker
            .instance("weir:udf/dev-sources@0.1.2")
            .and_then(|mut dev| {
                dev.func_wrap(
                    "sources",
                    |store: wasmtime::StoreContextMut<'_, StoreData>, ()| {
                        Ok((store.data().sources.as_ref().clone(),))
                    },
                )
            })
            .map_err(anyhow::Error::from)?;
        let instance_pre = linker
            .instantiate_pre(&component)
            .map_err(anyhow::Error::from)
            .context("the component needs imports Weir does not provide (a UDF may import only the weir:udf interfaces and WASI)")?;
        let pre = bindings::KeyedProcessPre::new(instance_pre)
            .map_err(anyhow::Error::from)
            .context("the component does not implement the weir:udf/keyed-process world (it must export weir:udf/process-function@0.1.2 or an earlier 0.1 version)")?;
        // Looked up by the contract's version; wasmtime finds an export of an earlier
        // 0.1.x version under it too (semver-compatible names).
        let export = |interface: &str| {
            let interface = component.get_export_index(None, interface)?;
            component.get_export_index(Some(&interface), "process-batch")
        };
        let batch = export("weir:udf/cached-batch@0.1.2")
            .map(|index| (BatchPath::Cached, index))
            .or_else(|| export("weir:udf/batch@0.1.2").map(|index| (BatchPath::Plain, index)));
        Ok(Self {
            name: name.to_string(),
            sha256: weir_core::identity::hex(&sha256),
            provenance,
            pre,
            batch,
            sources: DevSources::default(),
        })
    }
}

/// Whether `bytes` are a core module rather than a component (both start with `\0asm`;
/// the version field tells them apart).
fn is_core_module(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && &bytes[0..4] == b"\0asm" && bytes[4..8] == [1, 0, 0, 0]
}

struct Instance {
    store: Store<StoreData>,
    exports: Exports,
    stderr: GuestStderr,
}

/// The instance's exports.
struct Exports {
    bindings: bindings::KeyedProcess,
    batch: Option<BatchFunc>,
}

/// A UDF component instance, recreated after any trap.
pub struct WasmFunction {
    component: LoadedComponent,
    limits: Limits,
    info: InitInfo,
    instance: Option<Instance>,
    /// The element passed to the guest; reused so a call allocates nothing for it.
    scratch: types::Element,
    /// The cache epoch of the live instance (cached batch path): the guest's copies of
    /// keys' state are current for keys marked with it.
    epoch: u32,
    /// Bytes of state sent to the guest in this epoch, which it may be keeping.
    cached_bytes: usize,
}

/// Cache epochs, unique in the process: no two instances (of any UDF) share one, so a
/// key marked by one instance is never taken as current by another.
static NEXT_EPOCH: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

fn next_epoch() -> u32 {
    NEXT_EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl WasmFunction {
    /// A function over `component`, sandboxed by `limits`. Nothing is instantiated
    /// yet: [`init`](ProcessFunction::init) creates the first instance, and any call
    /// after a trap creates a fresh one (initialised again with the same [`InitInfo`]).
    pub fn new(component: LoadedComponent, limits: Limits) -> Self {
        let scratch = types::Element {
            input: 0,
            key: Vec::new(),
            value: Vec::new(),
            timestamp: 0,
        };
        Self {
            component,
            limits,
            info: InitInfo::default(),
            instance: None,
            scratch,
            epoch: next_epoch(),
            cached_bytes: 0,
        }
    }

    /// Starts a new cache epoch: the guest drops its copies at the next batch, and every
    /// key goes with its state again. After a failed batch, a new instance, or once the
    /// guest may hold more than [`Limits::state_cache_bytes`] in copies.
    fn new_epoch(&mut self) {
        self.epoch = next_epoch();
        self.cached_bytes = 0;
    }

    /// The live instance, creating and initialising one if there is none.
    fn instance(&mut self, host: &mut HostServices) -> Result<&mut Instance, CallError> {
        if self.instance.is_none() {
            self.new_epoch();
            let stderr = GuestStderr::new(&self.component.name);
            let data = StoreData {
                host: HostServices::new(0),
                udf: self.component.name.as_str().into(),
                wasi: sandbox::wasi_context(stderr.clone()),
                table: ResourceTable::new(),
                limits: sandbox::limits(self.limits.memory_bytes),
                sources: std::sync::Arc::clone(&self.component.sources),
            };
            let mut store = Store::new(sandbox::engine(), data);
            store.limiter(|data| &mut data.limits);
            store.epoch_deadline_trap();
            store.set_epoch_deadline(sandbox::deadline_ticks(self.limits.call_timeout));
            let cannot = |e: wasmtime::Error| {
                CallError::Trapped(format!("cannot instantiate the component: {e:#}"))
            };
            let raw = self
                .component
                .pre
                .instance_pre()
                .instantiate(&mut store)
                .map_err(cannot)?;
            let bindings = bindings::KeyedProcess::new(&mut store, &raw).map_err(cannot)?;
            let batch = match &self.component.batch {
                Some((_, index)) => Some(raw.get_typed_func(&mut store, index).map_err(cannot)?),
                None => None,
            };
            let exports = Exports { bindings, batch };
            let mut instance = Instance {
                store,
                exports,
                stderr,
            };
            let context = types::InitContext {
                config: self.info.config.clone(),
                inputs: self.info.inputs.clone(),
            };
            host.declaring = true;
            let result = call(
                &mut instance,
                host,
                self.limits.call_timeout,
                &self.limits,
                |e, s| {
                    e.bindings
                        .weir_udf_process_function()
                        .call_init(s, &context)
                },
            );
            host.declaring = false;
            result?;
            self.instance = Some(instance);
        }
        Ok(self.instance.as_mut().expect("just created"))
    }

    fn run<R>(
        &mut self,
        host: &mut HostServices,
        f: impl FnOnce(
            &Exports,
            &mut Store<StoreData>,
            &types::Element,
        ) -> wasmtime::Result<Result<R, types::Error>>,
    ) -> Result<R, CallError> {
        let limits = self.limits.clone();
        self.instance(host)?;
        let scratch = &self.scratch;
        let instance = self.instance.as_mut().expect("created above");
        let result = call(instance, host, limits.call_timeout, &limits, |b, s| {
            f(b, s, scratch)
        });
        if matches!(
            result,
            Err(CallError::Trapped(_)
                | CallError::Timeout(_)
                | CallError::OutOfMemory { .. }
                | CallError::EmitLimit { .. })
        ) {
            // A trapped store cannot be used again; the next call gets a fresh instance.
            self.instance = None;
        } else if instance.store.data().limits.memory_bytes > limits.memory_bytes / 4 * 3 {
            // A guest whose memory keeps growing (a leak in it, or in its language's
            // bindings) is replaced before it reaches its limit: the state is the host's,
            // so a fresh instance goes on where this one was.
            tracing::debug!(
                "UDF {}: replacing its instance, which holds {} MiB of linear memory",
                self.component.name,
                instance.store.data().limits.memory_bytes >> 20
            );
            self.instance = None;
        }
        result
    }
}

/// Runs one export call with the host services moved into the store.
fn call<R>(
    instance: &mut Instance,
    host: &mut HostServices,
    timeout: Duration,
    limits: &Limits,
    f: impl FnOnce(&Exports, &mut Store<StoreData>) -> wasmtime::Result<Result<R, types::Error>>,
) -> Result<R, CallError> {
    let store = &mut instance.store;
    host.rejected = None;
    std::mem::swap(&mut store.data_mut().host, host);
    store.set_epoch_deadline(sandbox::deadline_ticks(timeout));
    let result = f(&instance.exports, store);
    std::mem::swap(&mut store.data_mut().host, host);
    if result.is_err() && host.emitted.over_limit() {
        // The `emit` import refused the record that went over the limit (a trap).
        return Err(CallError::EmitLimit {
            limit_bytes: host.emitted.limit(),
        });
    }
    match result {
        Ok(Ok(_)) if host.rejected.is_some() => {
            instance.stderr.clear();
            Err(CallError::Rejected(
                host.rejected.take().unwrap_or_default(),
            ))
        }
        Ok(Ok(value)) => {
            instance.stderr.clear();
            Ok(value)
        }
        Ok(Err(error)) => Err(match error.kind {
            types::ErrorKind::StateDecode => CallError::StateDecode(error.message),
            types::ErrorKind::Failed => CallError::Returned(error.message),
        }),
        Err(trap) => Err(classify_trap(
            trap.into(),
            &instance.stderr,
            timeout,
            limits,
        )),
    }
}

fn classify_trap(
    error: anyhow::Error,
    stderr: &GuestStderr,
    timeout: Duration,
    limits: &Limits,
) -> CallError {
    if let Some(wasmtime::Trap::Interrupt) = error.downcast_ref::<wasmtime::Trap>() {
        return CallError::Timeout(timeout);
    }

    let cause = error.root_cause().to_string();
    if cause.contains("forcing trap when growing memory") {
        return CallError::OutOfMemory {
            limit_bytes: limits.memory_bytes,
            detail: cause,
        };
    }
    let mut report = cause;
    if let Some(wasmtime::Trap::UnreachableCodeReached) = error.downcast_ref::<wasmtime::Trap>() {
        report += " (the guest panicked or aborted)";
    }
    let tail = stderr.tail();
    let guest_said: Vec<&str> = tail
        .lines()
        .filter(|l| !l.starts_with("note: run with `RUST_BACKTRACE=1`"))
        .collect();
    if !guest_said.is_empty() {
        report += "\nguest stderr:";
        for line in guest_said {
            report += "\n    ";
            report += line;
        }
    }
    if let Some(backtrace) = error.downcast_ref::<wasmtime::WasmBacktrace>() {
        let frames: Vec<String> = backtrace
            .frames()
            .iter()
            .filter_map(|f| {
                f.func_name()
                    .map(|name| format!("{:#}", rustc_demangle::demangle(name)))
            })
            .filter(|name| !is_runtime_frame(name))
            .collect();
        if !frames.is_empty() {
            report += "\nguest backtrace (innermost first):";
            for frame in frames {
                report += "\n    ";
                report += &frame;
            }
        }
    }
    CallError::Trapped(report)
}

/// Frames of the guest's panic machinery and of the generated glue, which say nothing
/// about where the UDF went wrong.
fn is_runtime_frame(name: &str) -> bool {
    const RUNTIME: [&str; 8] = [
        "std",
        "core",
        "alloc",
        "__rust",
        "__rustc",
        "abort",
        "rust_",
        "weir_sdk::__private",
    ];
    RUNTIME.iter().any(|prefix| name.starts_with(prefix))
        || name.contains("_cabi")
        || name.starts_with("<std")
        || name.starts_with("weir:udf/")
}

impl ProcessFunction for WasmFunction {
    fn name(&self) -> &str {
        &self.component.name
    }

    fn another_instance(&self) -> Option<Box<dyn ProcessFunction>> {
        // The compiled code is shared; the instance, its store and its memory are not.
        Some(Box::new(WasmFunction::new(
            self.component.clone(),
            self.limits.clone(),
        )))
    }

    fn init(&mut self, host: &mut HostServices, info: &InitInfo) -> Result<(), CallError> {
        self.info = info.clone();
        self.instance = None;
        self.instance(host).map(|_| ())
    }

    fn process_element(
        &mut self,
        host: &mut HostServices,
        element: ElementRef<'_>,
    ) -> Result<(), CallError> {
        let scratch = &mut self.scratch;
        scratch.input = element.input;
        scratch.timestamp = element.timestamp;
        scratch.key.clear();
        scratch.key.extend_from_slice(element.key);
        scratch.value.clear();
        scratch.value.extend_from_slice(element.value);
        self.run(host, |b, store, element| {
            b.bindings
                .weir_udf_process_function()
                .call_process_element(store, element)
        })
    }

    fn on_timer(
        &mut self,
        host: &mut HostServices,
        timer: FiredTimer<'_>,
    ) -> Result<(), CallError> {
        let timer = types::Timer {
            domain: match timer.domain {
                TimeDomain::EventTime => types::TimeDomain::EventTime,
                TimeDomain::ProcessingTime => types::TimeDomain::ProcessingTime,
            },
            timestamp: timer.timestamp,
            key: timer.key.to_vec(),
        };
        self.run(host, |b, store, _| {
            b.bindings
                .weir_udf_process_function()
                .call_on_timer(store, &timer)
        })
    }

    fn takes_batches(&self) -> bool {
        self.component.batch.is_some()
    }

    fn process_batch(
        &mut self,
        host: &mut HostServices,
        entries: &[BatchEntry<'_>],
    ) -> Result<BatchTaken, CallError> {
        // Creates the instance first, so that the batch is encoded for its epoch.
        self.instance(host)?;
        let cached = matches!(self.component.batch, Some((BatchPath::Cached, _)));
        let epoch = cached.then_some(self.epoch);
        // The operator read the clock (and removed expired state by it) for this batch.
        let processing_time = host.processing_time;
        let encoded = batch::encode(host, entries, processing_time, epoch);
        let buffer = encoded.buffer;
        let result = self.run(host, |exports, store, _| {
            let func = exports
                .batch
                .as_ref()
                .expect("only called when takes_batches");
            func.call(store, (buffer,)).map(|(result,)| result)
        });
        let effects = result.and_then(|effects| {
            let decoded = batch::decode(host, &encoded.keys, entries.len(), &effects)
                .map_err(CallError::Trapped)?;
            // Over the limit, the batch fails; the operator runs its entries again one
            // call at a time, each under the limit on its own.
            if decoded.emitted_bytes > host.emitted.limit() {
                return Err(CallError::EmitLimit {
                    limit_bytes: host.emitted.limit(),
                });
            }
            let taken = BatchTaken {
                consumed: decoded.consumed,
                skipped: decoded.skipped,
            };
            // A new instance since the batch was encoded has an epoch of its own.
            let epoch = epoch.filter(|&e| e == self.epoch);
            batch::apply(
                host,
                decoded,
                entries,
                &encoded.keys,
                &self.component.name,
                epoch,
                processing_time,
            );
            Ok(taken)
        });
        match &effects {
            // The guest's copies of the failed batch's keys are gone or unknown.
            Err(_) => self.new_epoch(),
            Ok(_) if cached => {
                self.cached_bytes += encoded.state_bytes;
                if self.cached_bytes > self.limits.state_cache_bytes {
                    self.new_epoch();
                }
            }
            Ok(_) => {}
        }
        effects
    }
}
