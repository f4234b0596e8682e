//! Which UDF is which: a component's identity, and the SHA-256 that tells versions apart.

use serde::{Deserialize, Serialize};

/// Which UDF wrote the state: its name and the SHA-256 of its component.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UdfIdentity {
    /// The UDF's name in the pipeline file.
    pub name: String,
    /// The SHA-256 of its component, in lower-case hex ([`sha256_hex`]).
    pub sha256: String,
}

/// The SHA-256 of `bytes` in lower-case hex: how component versions are told apart.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex(&sha2::Sha256::digest(bytes))
}

/// `bytes` in lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
