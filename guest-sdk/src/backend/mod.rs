//! The backend in use: which implementation of [`Backend`](crate::host_calls::Backend)
//! answers the SDK's host calls on this target, chosen at compile time so each call is
//! a direct (inlinable) function call:
//!
//! - `wasm32`: [`wasm::Wasm`], the component's imports;
//! - native: [`native::Native`], the in-memory host behind `testing::TestHost`.
//!
//! What a backend implements, and the types its calls carry, are in
//! [`host_calls`](crate::host_calls): the backends and the batch overlay import them
//! from there, not from here.

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod native;
#[cfg(target_arch = "wasm32")]
mod wasm;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod world;

/// The backend in use for this target.
#[cfg(target_arch = "wasm32")]
pub(crate) type Active = wasm::Wasm;
/// The backend in use for this target.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) type Active = native::Native;
