//! `weir new` compiles its templates and the Python and JavaScript SDKs into the binary
//! (`include_dir!`), which cargo does not track on stable Rust: rebuild when they change.
fn main() {
    for dir in [
        "templates",
        "../../guest-sdk/python/weir",
        "../../guest-sdk/js/sdk",
        "../../wit",
    ] {
        println!("cargo:rerun-if-changed={dir}");
    }
}
