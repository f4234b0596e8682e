//! The `wit-bindgen` bindings of the `keyed-process-batched` world: every Rust UDF also
//! takes batches (see the `batch` module). Reached by UDF crates' [`export!`](crate::export)
//! through `__private::bindings`; not a public API.

#![allow(missing_docs, clippy::all)]

wit_bindgen::generate!({
    path: "../wit",
    world: "keyed-process-batched",
    pub_export_macro: true,
    export_macro_name: "export_component",
    default_bindings_module: "weir_sdk::__private::bindings",
});
