//! The durable registry of `weir serve`: what it runs, kept in the data dir so that a
//! restart (or a crash) comes back to the same pipelines and UDF versions.
//!
//! ```text
//! DATA/registry/
//!   pipelines/<name>.json      one record per pipeline: its definition (the pipeline
//!                              file's text and base folder), whether it should run, the
//!                              kept versions, the active one, and its history
//!   components/<sha256>.wasm   every kept version's component, stored once by content
//! ```
//!
//! A record file starts with a line `weir-registry 1 <sha256 of the rest>`, then the
//! record as JSON; a file whose hash does not match is reported and not used. Every change
//! is written to a temporary file, synced, renamed over the old one and its folder synced
//! before the API answers, so a `kill -9` leaves each record as it was before the call or
//! after it, never between. A component is stored (and synced) before any record names
//! it; leftover temporary files are removed when the registry is opened.

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use weir_control::{UdfVersion, Versions};
use weir_core::identity::sha256_hex;
use weir_core::time::wall_clock_ms;

/// How many versions of a pipeline the registry keeps (and can roll back to) unless
/// `weir serve --keep-versions` says otherwise.
pub const DEFAULT_KEEP_VERSIONS: usize = 10;

/// The first word of a record file, and the format's version after it.
const HEADER: &str = "weir-registry 1";

/// Whether a pipeline should run when the server starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Desired {
    /// Started again with its active version (it resumes from its checkpoint).
    Running,
    /// Stopped through the API: stays stopped until it is created again.
    Stopped,
    /// It ended by itself (every input ended): not started again, which would read its
    /// inputs once more.
    Finished,
}

/// One kept version of a pipeline's UDF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// Its number (1 for the first, then one more per new component).
    pub number: u32,
    /// The SHA-256 of its component: `components/<sha256>.wasm`.
    pub sha256: String,
    /// When it was first deployed, in ms since the epoch.
    pub deployed_at: i64,
}

/// Something that happened to a pipeline, as its history shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// When, in ms since the epoch.
    pub at: i64,
    /// `created`, `deployed`, `rolled back`, `rolled back automatically`, `stopped`,
    /// `started`, `finished`.
    pub action: String,
    /// The version active after it.
    pub version: u32,
    /// What came of it, or why (empty when there is nothing to add).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// Everything the registry keeps about one pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelineRecord {
    /// The pipeline's name (also the record file's name).
    pub name: String,
    /// The pipeline file's text, as it was created.
    pub definition: String,
    /// The folder its relative paths start from.
    pub base: PathBuf,
    /// Whether it should run when the server starts.
    pub desired: Desired,
    /// The number of the version running (or to run).
    pub active: u32,
    /// The kept versions, oldest first (at most the registry's `keep_versions`; the
    /// active one always among them).
    pub versions: Vec<VersionRecord>,
    /// What happened to it, oldest first (the last [`MAX_HISTORY`] entries).
    pub history: Vec<HistoryEntry>,
}

/// The most history entries a record keeps.
pub const MAX_HISTORY: usize = 200;

impl PipelineRecord {
    /// The kept version with this number.
    pub fn version(&self, number: u32) -> Option<&VersionRecord> {
        self.versions.iter().find(|v| v.number == number)
    }

    /// Appends a history entry for `action` (the version active now), keeping the last
    /// [`MAX_HISTORY`].
    pub fn record(&mut self, action: &str, detail: impl Into<String>) {
        self.history.push(HistoryEntry {
            at: wall_clock_ms(),
            action: action.to_string(),
            version: self.active,
            detail: detail.into(),
        });
        let excess = self.history.len().saturating_sub(MAX_HISTORY);
        self.history.drain(..excess);
    }

    /// Makes the version with `sha256` (numbered `number`, known or new) the active one;
    /// adds it to the kept versions if it is new, then drops the oldest beyond `keep`
    /// (never the active one).
    pub fn activate(&mut self, number: u32, sha256: &str, keep: usize) {
        if self.version(number).is_none() {
            self.versions.push(VersionRecord {
                number,
                sha256: sha256.to_string(),
                deployed_at: wall_clock_ms(),
            });
            self.versions.sort_by_key(|v| v.number);
        }
        self.active = number;
        while self.versions.len() > keep.max(1) {
            let Some(oldest) = self.versions.iter().position(|v| v.number != self.active) else {
                break;
            };
            self.versions.remove(oldest);
        }
    }
}

/// The registry: the records in memory, and the folder they are kept in.
pub struct Registry {
    dir: PathBuf,
    keep_versions: usize,
    records: Mutex<BTreeMap<String, PipelineRecord>>,
    /// Components stored for a deploy that has not been recorded (or refused) yet: not
    /// pruned meanwhile.
    pending: Mutex<BTreeSet<String>>,
    /// Record files that could not be read at open: while any is still there, no
    /// component is pruned, as it may name any of them (repairing the file and
    /// restarting brings its pipeline back, with its versions).
    damaged: Mutex<Vec<PathBuf>>,
}

/// What opening the registry found that cannot be used: the file and why.
#[derive(Debug)]
pub struct Damaged {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

impl Registry {
    /// Opens (or creates) the registry in `dir`, reading every record; leftover temporary
    /// files are removed. Records that cannot be trusted are returned as [`Damaged`],
    /// not loaded, and their files left as they are.
    pub fn open(dir: &Path, keep_versions: usize) -> anyhow::Result<(Self, Vec<Damaged>)> {
        for sub in ["pipelines", "components"] {
            let folder = dir.join(sub);
            std::fs::create_dir_all(&folder)
                .with_context(|| format!("cannot create {}", folder.display()))?;
            for entry in std::fs::read_dir(&folder)? {
                let path = entry?.path();
                if path.to_string_lossy().contains(".tmp-") {
                    std::fs::remove_file(&path)
                        .with_context(|| format!("cannot remove {}", path.display()))?;
                }
            }
        }
        let mut records = BTreeMap::new();
        let mut damaged = Vec::new();
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir.join("pipelines"))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        paths.sort();
        for path in paths {
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match read_record(&path) {
                Ok(record) => {
                    records.insert(record.name.clone(), record);
                }
                Err(e) => damaged.push(Damaged {
                    path,
                    reason: format!("{e:#}"),
                }),
            }
        }
        let registry = Self {
            dir: dir.to_path_buf(),
            keep_versions,
            records: Mutex::new(records),
            pending: Mutex::default(),
            damaged: Mutex::new(damaged.iter().map(|d| d.path.clone()).collect()),
        };
        // Components of deploys a crash cut short (kept while a damaged record might
        // still name them).
        registry.prune(&registry.lock());
        Ok((registry, damaged))
    }

    /// How many versions of a pipeline are kept.
    pub fn keep_versions(&self) -> usize {
        self.keep_versions
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PipelineRecord>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every record, by name.
    pub fn records(&self) -> Vec<PipelineRecord> {
        self.lock().values().cloned().collect()
    }

    /// The record of pipeline `name`.
    pub fn get(&self, name: &str) -> Option<PipelineRecord> {
        self.lock().get(name).cloned()
    }

    /// Stores a component by its content (once: a component already stored is left as
    /// it is), before a record names it; it is not pruned until
    /// [`release_component`](Self::release_component).
    pub fn store_component(&self, bytes: &[u8]) -> anyhow::Result<String> {
        let sha256 = sha256_hex(bytes);
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(sha256.clone());
        let path = self.component_path(&sha256);
        if !path.exists() {
            write_durably(&path, bytes)
                .with_context(|| format!("cannot store the component {}", path.display()))?;
        }
        Ok(sha256)
    }

    /// Lets a component stored for a deploy be pruned once no record names it: called
    /// when the deploy has been recorded, or refused.
    pub fn release_component(&self, sha256: &str) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(sha256);
    }

    /// The component with this hash, checked against it.
    pub fn component(&self, sha256: &str) -> anyhow::Result<Vec<u8>> {
        let path = self.component_path(sha256);
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        anyhow::ensure!(
            sha256_hex(&bytes) == sha256,
            "{} is damaged: its SHA-256 is not the one its name says",
            path.display()
        );
        Ok(bytes)
    }

    /// The kept versions of `record` with their components, for rollbacks: the versions
    /// whose component cannot be read are left out (and reported).
    pub fn versions_of(&self, record: &PipelineRecord) -> Versions {
        let mut kept = Vec::new();
        for v in &record.versions {
            match self.component(&v.sha256) {
                Ok(bytes) => kept.push(UdfVersion {
                    number: v.number,
                    sha256: v.sha256.clone(),
                    bytes: Arc::new(bytes),
                    deployed_at: v.deployed_at,
                }),
                Err(e) => tracing::warn!(
                    "pipeline {:?}: version {} cannot be rolled back to: {e:#}",
                    record.name,
                    v.number
                ),
            }
        }
        Versions::restored(kept)
    }

    fn component_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("components").join(format!("{sha256}.wasm"))
    }

    fn record_path(&self, name: &str) -> PathBuf {
        self.dir.join("pipelines").join(format!("{name}.json"))
    }

    /// Changes the record of a pipeline the registry holds (see [`update`](Self::update));
    /// an error if it holds none.
    pub fn change(
        &self,
        name: &str,
        change: impl FnOnce(&mut PipelineRecord),
    ) -> anyhow::Result<PipelineRecord> {
        anyhow::ensure!(
            self.lock().contains_key(name),
            "the registry holds no pipeline {name:?}"
        );
        self.update(name, || unreachable!("checked above"), change)
    }

    /// Changes the record of `name`, creating it from `create` if there is none, and
    /// makes the change durable before returning:
    /// the record file is replaced atomically, then components no kept version names any
    /// more are removed. Returns the record as written.
    pub fn update(
        &self,
        name: &str,
        create: impl FnOnce() -> PipelineRecord,
        change: impl FnOnce(&mut PipelineRecord),
    ) -> anyhow::Result<PipelineRecord> {
        let mut records = self.lock();
        let mut record = records.get(name).cloned().unwrap_or_else(create);
        change(&mut record);
        let body = serde_json::to_vec_pretty(&record)?;
        let mut file = format!("{HEADER} {}\n", sha256_hex(&body)).into_bytes();
        file.extend_from_slice(&body);
        let path = self.record_path(name);
        write_durably(&path, &file)
            .with_context(|| format!("cannot write the registry record {}", path.display()))?;
        records.insert(name.to_string(), record.clone());
        self.prune(&records);
        Ok(record)
    }

    /// Removes the record of `name` (a deleted pipeline stays gone after a restart).
    pub fn remove(&self, name: &str) -> anyhow::Result<()> {
        let mut records = self.lock();
        let path = self.record_path(name);
        match std::fs::remove_file(&path) {
            Ok(()) => sync_dir(&path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot remove {}", path.display())),
        }
        records.remove(name);
        self.prune(&records);
        Ok(())
    }

    /// Removes the components no kept version of any record names (and no deploy under
    /// way has stored).
    fn prune(&self, records: &BTreeMap<String, PipelineRecord>) {
        {
            let mut damaged = self.damaged.lock().unwrap_or_else(|e| e.into_inner());
            damaged.retain(|path| path.exists());
            if !damaged.is_empty() {
                return;
            }
        }
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let named: BTreeSet<&str> = records
            .values()
            .flat_map(|r| r.versions.iter().map(|v| v.sha256.as_str()))
            .chain(pending.iter().map(String::as_str))
            .collect();
        let Ok(entries) = std::fs::read_dir(self.dir.join("components")) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
            if stem.is_some_and(|s| !named.contains(s.as_str())) {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

/// Reads and checks one record file.
fn read_record(path: &Path) -> anyhow::Result<PipelineRecord> {
    let data = std::fs::read(path)?;
    let newline = data
        .iter()
        .position(|&b| b == b'\n')
        .context("no header line")?;
    let header = std::str::from_utf8(&data[..newline]).context("the header is not text")?;
    let sha = header
        .strip_prefix(HEADER)
        .map(str::trim)
        .with_context(|| format!("the header is not `{HEADER} <sha256>`"))?;
    let body = &data[newline + 1..];
    anyhow::ensure!(
        sha256_hex(body) == sha,
        "its SHA-256 does not match its header: the file is damaged"
    );
    let record: PipelineRecord = serde_json::from_slice(body).context("not a registry record")?;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    anyhow::ensure!(
        stem.as_deref() == Some(record.name.as_str()),
        "it holds pipeline {:?}, not the one its name says",
        record.name
    );
    anyhow::ensure!(
        record.version(record.active).is_some(),
        "its active version {} is not among its versions",
        record.active
    );
    Ok(record)
}

/// Writes `bytes` to `path` so that a crash leaves either the old file or the new one:
/// a temporary file in the same folder, synced, renamed over `path`, the folder synced.
fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(
        "{}.tmp-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    sync_dir(path)
}

/// Syncs the folder holding `path`, so that a rename or removal in it is durable.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, sha: &str) -> PipelineRecord {
        PipelineRecord {
            name: name.into(),
            definition: "name = \"x\"".into(),
            base: "/b".into(),
            desired: Desired::Running,
            active: 1,
            versions: vec![VersionRecord {
                number: 1,
                sha256: sha.into(),
                deployed_at: 0,
            }],
            history: Vec::new(),
        }
    }

    #[test]
    fn records_survive_a_reopen_and_damage_is_reported_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, damaged) = Registry::open(dir.path(), 3).unwrap();
        assert!(damaged.is_empty());
        let sha = registry.store_component(b"component one").unwrap();
        for name in ["a", "b"] {
            registry
                .update(name, || record(name, &sha), |r| r.record("created", ""))
                .unwrap();
        }
        std::fs::write(dir.path().join("pipelines/c.json.tmp-1"), "half").unwrap();
        drop(registry);

        // Flip a byte in b's record.
        let b = dir.path().join("pipelines/b.json");
        let mut bytes = std::fs::read(&b).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0x01;
        std::fs::write(&b, &bytes).unwrap();

        let (registry, damaged) = Registry::open(dir.path(), 3).unwrap();
        assert_eq!(registry.records().len(), 1);
        assert_eq!(registry.get("a").unwrap().history[0].action, "created");
        assert_eq!(damaged.len(), 1);
        assert!(damaged[0].reason.contains("damaged"), "{:?}", damaged[0]);
        assert!(!dir.path().join("pipelines/c.json.tmp-1").exists());
        assert_eq!(registry.component(&sha).unwrap(), b"component one");
    }

    #[test]
    fn only_the_last_versions_are_kept_and_unnamed_components_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, _) = Registry::open(dir.path(), 2).unwrap();
        let shas: Vec<String> = (0..4)
            .map(|i| {
                registry
                    .store_component(format!("v{i}").as_bytes())
                    .unwrap()
            })
            .collect();
        registry
            .update("p", || record("p", &shas[0]), |_| {})
            .unwrap();
        registry.release_component(&shas[0]);
        for (i, sha) in shas.iter().enumerate().skip(1) {
            let keep = registry.keep_versions();
            registry
                .update(
                    "p",
                    || unreachable!(),
                    |r| r.activate(i as u32 + 1, sha, keep),
                )
                .unwrap();
            registry.release_component(sha);
        }
        let p = registry.get("p").unwrap();
        let kept: Vec<u32> = p.versions.iter().map(|v| v.number).collect();
        assert_eq!((kept, p.active), (vec![3, 4], 4));
        assert!(
            registry.component(&shas[0]).is_err(),
            "v1's component is removed"
        );
        assert!(registry.component(&shas[2]).is_ok());
        registry.remove("p").unwrap();
        assert!(registry.component(&shas[3]).is_err());
        let (registry, _) = Registry::open(dir.path(), 2).unwrap();
        assert!(
            registry.records().is_empty(),
            "a removed pipeline stays gone"
        );
    }
}
