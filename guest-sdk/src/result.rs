//! The result type of a UDF's methods.

/// The result type of UDF methods: any error, with context, becomes the UDF's error
/// message (the whole `anyhow` chain, as `format!("{:#}", err)`).
pub type Result<T, E = anyhow::Error> = anyhow::Result<T, E>;
