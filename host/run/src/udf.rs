//! A run's UDF: its wasm component loaded (or found in the compile cache) with its
//! identity and its sandbox limits.

use anyhow::Context as _;
use weir_core::identity::UdfIdentity;
use weir_engine::runtime::wasm::{Limits, LoadedComponent, WasmFunction};
use weir_pipeline::PipelineSpec;

/// Loads the wasm component of `spec`'s UDF, once: its bytes are hashed for the
/// compile cache and the checkpoints' identity. Returns the function, ready for its
/// `init`, and its identity.
pub fn load_udf(spec: &PipelineSpec) -> anyhow::Result<(WasmFunction, UdfIdentity)> {
    let path = &spec.udf.path;
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read UDF component {}", path.display()))?;
    udf_from_bytes(spec, &bytes).with_context(|| format!("UDF component {}", path.display()))
}

/// The UDF of `spec` from its component's `bytes` (compiled, or found in the compile
/// cache), with its identity; not initialised yet.
pub fn udf_from_bytes(
    spec: &PipelineSpec,
    bytes: &[u8],
) -> anyhow::Result<(WasmFunction, UdfIdentity)> {
    let component = LoadedComponent::from_bytes(&spec.udf.name, bytes)?;
    // The bytes were hashed once, to look them up in the compile cache.
    let identity = UdfIdentity {
        name: spec.udf.name.clone(),
        sha256: component.sha256.clone(),
    };
    Ok((WasmFunction::new(component, udf_limits(spec)), identity))
}

/// The sandbox limits `spec` gives its UDF.
pub fn udf_limits(spec: &PipelineSpec) -> Limits {
    Limits {
        memory_bytes: spec.udf.memory_limit_bytes,
        call_timeout: spec.udf.call_timeout,
        state_cache_bytes: spec.udf.state_cache_bytes,
    }
}

/// The first 12 hex digits of a hash, for messages.
pub fn short_hash(sha256: &str) -> &str {
    &sha256[..sha256.len().min(12)]
}
