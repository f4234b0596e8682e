//! A component that is not a UDF: built for wasm32-wasip2 it is a valid component, but of
//! an empty world, so `weir serve` must refuse it with an error naming the contract.

/// Something to export, so the component is not empty.
#[no_mangle]
pub extern "C" fn answer() -> i32 {
    42
}
