//! An on-disk cache of compiled components, so a UDF starts in milliseconds the second
//! time.
//!
//! Compiling a component is the slow part of starting a UDF: a Rust UDF takes ~100 ms,
//! but a Python one (an 18 MB component carrying an interpreter) or a JavaScript one takes
//! seconds. Loading wasmtime's own serialized form takes about a millisecond. The cache
//! keeps one file per component, named after the SHA-256 of the component's bytes and a
//! hash of the engine's compatibility (wasmtime version and every code-generation
//! setting), under `$WEIR_CACHE_DIR/components` (default `~/.cache/weir/components`).
//!
//! Deserializing compiled code is only safe for artifacts this engine wrote, so nothing
//! is trusted blindly: an entry is the artifact followed by a trailer naming its source
//! hash, the engine hash and weir's version, with the artifact's length and CRC-32. A
//! checked entry is mapped, not read: its code and its memory images are the file's
//! pages, shared with the page cache and with other processes running the same UDF. An entry that fails any check, or
//! that wasmtime itself refuses, is ignored and overwritten with a fresh compilation.
//! Entries are written to a temporary name and renamed, so a reader never sees half a
//! file; the least recently used ones are deleted once the cache outgrows
//! [`CACHE_LIMIT_BYTES`].

use std::hash::{Hash as _, Hasher as _};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};
use wasmtime::component::Component;
use wasmtime::Engine;

/// The cache deletes its least recently used entries beyond this size.
pub const CACHE_LIMIT_BYTES: u64 = 2 << 30;

/// Compilations longer than this are worth a line in the log.
const SLOW_COMPILE: std::time::Duration = std::time::Duration::from_millis(500);

/// First bytes of an entry's trailer; the last digit is the entry's layout version (1
/// had the header first, so the file could not be mapped as it is).
const MAGIC: &[u8; 8] = b"WEIRCW02";

/// Where compiled components are kept, if anywhere. Set once, at start-up.
static CACHE_DIR: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Turns the cache off for this process (`--no-compile-cache`), or points it elsewhere.
/// Without a call, the cache is at [`default_dir`].
pub fn configure(dir: Option<PathBuf>) {
    let _ = CACHE_DIR.set(dir);
}

/// `$WEIR_CACHE_DIR/components`, else `$XDG_CACHE_HOME/weir/components`, else
/// `~/.cache/weir/components`.
pub fn default_dir() -> Option<PathBuf> {
    let env = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    let base = env("WEIR_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| env("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("weir")))
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache/weir")))?;
    Some(base.join("components"))
}

fn cache_dir() -> Option<&'static Path> {
    CACHE_DIR.get_or_init(default_dir).as_deref()
}

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Loaded from the cache.
    Cached,
    /// Compiled (and, if the cache is on, stored).
    Compiled,
}

/// Compiles `bytes` (whose SHA-256 is `sha256`), or loads the compiled form from the cache.
pub fn component(
    engine: &Engine,
    bytes: &[u8],
    sha256: &[u8; 32],
) -> anyhow::Result<(Component, Provenance)> {
    let Some(dir) = cache_dir() else {
        return Ok((Component::new(engine, bytes)?, Provenance::Compiled));
    };
    let entry = Entry::new(dir, engine, sha256);
    let started = Instant::now();
    match entry.load(engine) {
        Ok(component) => {
            tracing::debug!(
                "loaded the compiled component from {} in {:.1?}",
                entry.path.display(),
                started.elapsed()
            );
            return Ok((component, Provenance::Cached));
        }
        Err(Miss::Absent) => {}
        Err(Miss::Unusable(why)) => tracing::warn!(
            "ignoring compile cache entry {}: {why}; compiling again",
            entry.path.display()
        ),
    }
    let component = Component::new(engine, bytes)?;
    let took = started.elapsed();
    match entry.store(&component) {
        Ok(()) if took > SLOW_COMPILE => tracing::info!(
            "compiled the UDF component in {took:.1?}; kept in {} for the next start",
            dir.display()
        ),
        Ok(()) => tracing::debug!("compiled the component in {took:.1?}"),
        Err(error) => tracing::warn!(
            "cannot write the compile cache entry {}: {error:#}",
            entry.path.display()
        ),
    }
    Ok((component, Provenance::Compiled))
}

/// Why an entry was not used.
enum Miss {
    Absent,
    Unusable(String),
}

/// One cache file and the header it must carry.
struct Entry {
    path: PathBuf,
    header: Vec<u8>,
}

impl Entry {
    fn new(dir: &Path, engine: &Engine, sha256: &[u8; 32]) -> Self {
        // The engine's compatibility hash covers wasmtime's version and the settings that
        // shape generated code; weir's version is added for changes of our own.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        let engine_hash = hasher.finish();
        let source = weir_core::identity::hex(sha256);
        let mut header = Vec::with_capacity(48);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(sha256);
        header.extend_from_slice(&engine_hash.to_le_bytes());
        Self {
            path: dir.join(format!("{source}-{engine_hash:016x}.cwasm")),
            header,
        }
    }

    /// Checks the entry (trailer, length and CRC, then wasmtime's own checks) and maps
    /// it: the compiled code and the memory images are the file's pages, not copies.
    fn load(&self, engine: &Engine) -> Result<Component, Miss> {
        use std::io::{Read as _, Seek as _};
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
            Err(e) => return Err(Miss::Unusable(e.to_string())),
        };
        let unusable = |why: &str| Miss::Unusable(why.to_string());
        let io = |e: std::io::Error| Miss::Unusable(e.to_string());
        let size = file.metadata().map_err(io)?.len();
        let trailer_len = (self.header.len() + 12) as u64;
        let Some(length) = size.checked_sub(trailer_len) else {
            return Err(unusable("it is truncated"));
        };
        let mut trailer = vec![0; trailer_len as usize];
        file.seek(std::io::SeekFrom::Start(length)).map_err(io)?;
        file.read_exact(&mut trailer).map_err(io)?;
        if !trailer.starts_with(MAGIC) {
            // A complete entry always ends with its trailer: this one was cut off.
            return Err(unusable(
                "it is truncated (it does not end with its trailer)",
            ));
        }
        let lengths = trailer
            .strip_prefix(self.header.as_slice())
            .ok_or_else(|| unusable("it was written for another component or engine"))?;
        let stored = u64::from_le_bytes(lengths[..8].try_into().expect("8 bytes"));
        let crc = u32::from_le_bytes(lengths[8..].try_into().expect("4 bytes"));
        if stored != length {
            return Err(unusable("it is truncated"));
        }
        // The checksum, read in pieces: the file is mapped below, not held in memory.
        file.seek(std::io::SeekFrom::Start(0)).map_err(io)?;
        let mut hasher = crc32fast::Hasher::new();
        let mut buffer = vec![0; 1 << 20];
        let mut left = length;
        while left > 0 {
            let n = buffer.len().min(left as usize);
            file.read_exact(&mut buffer[..n]).map_err(io)?;
            hasher.update(&buffer[..n]);
            left -= n as u64;
        }
        if hasher.finalize() != crc {
            return Err(unusable("its checksum does not match"));
        }
        // SAFETY: the artifact is byte for byte what `Component::serialize` produced for
        // these source bytes on an engine with this compatibility hash (trailer and CRC
        // checked above; entries are renamed into place whole, never written over), and
        // wasmtime checks its own version and settings again. The trailer after the
        // artifact is outside every section wasmtime reads.
        let component = unsafe { Component::deserialize_file(engine, &self.path) }
            .map_err(|e| Miss::Unusable(format!("wasmtime refused it: {e}")))?;
        // Mark it recently used, for the eviction order.
        let _ = file.set_modified(SystemTime::now());
        Ok(component)
    }

    /// Writes the entry (the artifact, then its trailer) under a temporary name and
    /// renames it into place.
    fn store(&self, component: &Component) -> anyhow::Result<()> {
        let artifact = component.serialize()?;
        let dir = self.path.parent().expect("entries live in a directory");
        std::fs::create_dir_all(dir)?;
        let temporary = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&artifact)?;
        file.write_all(&self.header)?;
        file.write_all(&(artifact.len() as u64).to_le_bytes())?;
        file.write_all(&crc32fast::hash(&artifact).to_le_bytes())?;
        drop(file);
        std::fs::rename(&temporary, &self.path)?;
        evict(dir, CACHE_LIMIT_BYTES);
        Ok(())
    }
}

/// Deletes the least recently used entries until the cache holds at most `limit` bytes.
fn evict(dir: &Path, limit: u64) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<(SystemTime, u64, PathBuf)> = listing
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
    entries.sort();
    for (_, len, path) in entries {
        if total <= limit {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest component: the preamble of the binary format, and nothing else.
    const COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";
    /// Another one: the same with a custom section named "x".
    const OTHER_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00\x00\x02\x01x";

    fn compile(dir: &Path, bytes: &[u8]) -> (Entry, Component) {
        use sha2::Digest as _;
        let engine = crate::runtime::wasm::sandbox::engine();
        let sha: [u8; 32] = sha2::Sha256::digest(bytes).into();
        let entry = Entry::new(dir, engine, &sha);
        let component = Component::new(engine, bytes).unwrap();
        (entry, component)
    }

    #[test]
    fn an_entry_reads_back_and_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let engine = crate::runtime::wasm::sandbox::engine();
        let (entry, component) = compile(dir.path(), COMPONENT);
        assert!(matches!(entry.load(engine), Err(Miss::Absent)));
        entry.store(&component).unwrap();
        assert!(entry.load(engine).is_ok());

        // One flipped byte in the artifact: the checksum catches it.
        let mut file = std::fs::read(&entry.path).unwrap();
        file[10] ^= 0xff;
        std::fs::write(&entry.path, &file).unwrap();
        assert!(matches!(entry.load(engine), Err(Miss::Unusable(why)) if why.contains("checksum")));

        // A cut-off file: its trailer is gone.
        std::fs::write(&entry.path, &file[..file.len() / 2]).unwrap();
        assert!(
            matches!(entry.load(engine), Err(Miss::Unusable(why)) if why.contains("truncated"))
        );
        std::fs::write(&entry.path, &file[..10]).unwrap();
        assert!(
            matches!(entry.load(engine), Err(Miss::Unusable(why)) if why.contains("truncated"))
        );

        // Another component's entry under this name (copied, say).
        let (other, other_component) = compile(dir.path(), OTHER_COMPONENT);
        other.store(&other_component).unwrap();
        std::fs::copy(&other.path, &entry.path).unwrap();
        assert!(matches!(entry.load(engine), Err(Miss::Unusable(why)) if why.contains("another")));
    }

    #[test]
    fn eviction_drops_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.cwasm");
        let new = dir.path().join("new.cwasm");
        std::fs::write(&old, [0u8; 100]).unwrap();
        std::fs::write(&new, [0u8; 100]).unwrap();
        let an_hour_ago = SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
        evict(dir.path(), 150);
        assert!(!old.exists());
        assert!(new.exists());
    }
}
