//! The durable registry of `weir serve`: what it runs, kept in the data dir so that a
//! restart (or a crash) comes back to the same pipelines and UDF versions.
//!
//! ```text
//! DATA/registry/
//!   pipelines/<name>.json      one record per pipeline: its definition (the pipeline
//!                              file's text and base folder), whether it should run, per
//!                              stage the kept versions and the active one, its history
//!   components/<sha256>.wasm   every kept version's component, stored once by content
//! ```
//!
//! A record file starts with a line `weir-registry 2 <sha256 of the rest>`, then the
//! record as JSON (format 1, written before pipelines had stages, is read as a pipeline
//! of one stage and written as format 2 at its next change); a file whose hash does not match is reported and not used. Every change
//! is written to a temporary file, synced, renamed over the old one and its folder synced
//! before the API answers, so a `kill -9` leaves each record as it was before the call or
//! after it, never between. A component is stored (and synced) before any record names
//! it; leftover temporary files are removed when the registry is opened.

use anyhow::Context as _;
mod record;

pub use record::{Desired, HistoryEntry, PipelineRecord, StageRecord, VersionRecord, MAX_HISTORY};

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use weir_control::{UdfVersion, Versions};
use weir_core::identity::sha256_hex;

/// How many versions of each stage of a pipeline the registry keeps (and can roll back
/// to) unless `weir serve --keep-versions` says otherwise.
pub const DEFAULT_KEEP_VERSIONS: usize = 10;

/// The first word of a record file; the format's version follows it.
const HEADER: &str = "weir-registry";

/// The format records are written in (format 1, read too, is a pipeline of one stage).
const FORMAT: u32 = 2;

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

    /// The kept versions of stage `stage` of `record` with their components, for
    /// rollbacks: the versions whose component cannot be read are left out (and
    /// reported); none for a stage the record does not hold.
    pub fn versions_of(&self, record: &PipelineRecord, stage: &str) -> Versions {
        let mut kept = Vec::new();
        let versions = record.stage(stage).map_or(&[][..], |s| &s.versions);
        for v in versions {
            match self.component(&v.sha256) {
                Ok(bytes) => kept.push(UdfVersion {
                    number: v.number,
                    sha256: v.sha256.clone(),
                    bytes: Arc::new(bytes),
                    deployed_at: v.deployed_at,
                }),
                Err(e) => tracing::warn!(
                    "pipeline {:?}, stage {stage:?}: version {} cannot be rolled back to: {e:#}",
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
        let mut file = format!("{HEADER} {FORMAT} {}\n", sha256_hex(&body)).into_bytes();
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
            .flat_map(|r| r.stages.iter().flat_map(|s| &s.versions))
            .map(|v| v.sha256.as_str())
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

/// Reads and checks one record file, of format 2 or 1.
fn read_record(path: &Path) -> anyhow::Result<PipelineRecord> {
    let data = std::fs::read(path)?;
    let newline = data
        .iter()
        .position(|&b| b == b'\n')
        .context("no header line")?;
    let header = std::str::from_utf8(&data[..newline]).context("the header is not text")?;
    let (format, sha) = header
        .strip_prefix(HEADER)
        .and_then(|rest| rest.trim().split_once(' '))
        .and_then(|(format, sha)| Some((format.parse::<u32>().ok()?, sha.trim())))
        .with_context(|| format!("the header is not `{HEADER} {FORMAT} <sha256>`"))?;
    let body = &data[newline + 1..];
    anyhow::ensure!(
        sha256_hex(body) == sha,
        "its SHA-256 does not match its header: the file is damaged"
    );
    let record: PipelineRecord = match format {
        1 => serde_json::from_slice::<record::PipelineRecordV1>(body)
            .context("not a registry record of format 1")?
            .into(),
        FORMAT => serde_json::from_slice(body).context("not a registry record")?,
        other => anyhow::bail!(
            "it is of format {other}, which this weir does not know (it writes format {FORMAT}): a newer weir wrote it"
        ),
    };
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    anyhow::ensure!(
        stem.as_deref() == Some(record.name.as_str()),
        "it holds pipeline {:?}, not the one its name says",
        record.name
    );
    record.check()?;
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
            stages: vec![StageRecord::first(name, sha)],
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
                .update(name, || record(name, &sha), |r| r.record("created", "", ""))
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
                    |r| r.stages[0].activate(i as u32 + 1, sha, keep),
                )
                .unwrap();
            registry.release_component(sha);
        }
        let p = registry.get("p").unwrap();
        let kept: Vec<u32> = p.stages[0].versions.iter().map(|v| v.number).collect();
        assert_eq!((kept, p.stages[0].active), (vec![3, 4], 4));
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

    #[test]
    fn a_record_of_format_1_is_read_as_one_stage_and_written_as_format_2() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pipelines")).unwrap();
        let body = br#"{"name":"p","definition":"name = \"p\"","base":"/b","desired":"running","active":2,
            "versions":[{"number":1,"sha256":"aa","deployed_at":5},{"number":2,"sha256":"bb","deployed_at":6}],
            "history":[{"at":7,"action":"deployed","version":2}]}"#;
        let mut file = format!("weir-registry 1 {}\n", sha256_hex(body)).into_bytes();
        file.extend_from_slice(body);
        std::fs::write(dir.path().join("pipelines/p.json"), &file).unwrap();

        let (registry, damaged) = Registry::open(dir.path(), 3).unwrap();
        assert!(damaged.is_empty(), "{damaged:?}");
        let p = registry.get("p").unwrap();
        assert_eq!(p.stages.len(), 1);
        assert_eq!((p.stages[0].name.as_str(), p.stages[0].active), ("p", 2));
        assert_eq!(p.stages[0].versions[0].sha256, "aa");
        assert_eq!(p.history[0].version, 2);
        registry
            .change("p", |r| r.record("stopped", "", ""))
            .unwrap();
        let written = std::fs::read_to_string(dir.path().join("pipelines/p.json")).unwrap();
        assert!(written.starts_with("weir-registry 2 "), "{written}");
        drop(registry);
        let (registry, damaged) = Registry::open(dir.path(), 3).unwrap();
        assert!(damaged.is_empty(), "{damaged:?}");
        let p = registry.get("p").unwrap();
        assert_eq!(p.history.len(), 2);
        assert_eq!(
            p.history[1].version, 2,
            "a one-stage entry names its version"
        );
    }

    #[test]
    fn stages_keep_their_own_versions_and_history_names_the_stage() {
        let dir = tempfile::tempdir().unwrap();
        let (registry, _) = Registry::open(dir.path(), 2).unwrap();
        let shas: Vec<String> = ["count", "sum", "sum v2", "sum v3"]
            .iter()
            .map(|c| registry.store_component(c.as_bytes()).unwrap())
            .collect();
        let graph = PipelineRecord {
            stages: vec![
                StageRecord::first("count", &shas[0]),
                StageRecord::first("sum", &shas[1]),
            ],
            ..record("g", &shas[0])
        };
        registry
            .update("g", || graph, |r| r.record("created", "", ""))
            .unwrap();
        for (number, sha) in [(2, &shas[2]), (3, &shas[3])] {
            registry
                .change("g", |r| {
                    r.stage_mut("sum").unwrap().activate(number, sha, 2);
                    r.record("deployed", "sum", "");
                })
                .unwrap();
        }
        for sha in &shas {
            registry.release_component(sha);
        }
        // Components are pruned at a change.
        registry
            .change("g", |r| r.record("stopped", "", ""))
            .unwrap();
        let g = registry.get("g").unwrap();
        assert_eq!(g.stage("count").unwrap().active, 1);
        let sum = g.stage("sum").unwrap();
        let kept: Vec<u32> = sum.versions.iter().map(|v| v.number).collect();
        assert_eq!((kept, sum.active), (vec![2, 3], 3));
        let entries: Vec<(&str, &str, u32)> = g
            .history
            .iter()
            .map(|h| (h.action.as_str(), h.stage.as_str(), h.version))
            .collect();
        assert_eq!(
            entries,
            [
                ("created", "", 0),
                ("deployed", "sum", 2),
                ("deployed", "sum", 3),
                ("stopped", "", 0)
            ]
        );
        assert!(registry.component(&shas[0]).is_ok(), "count's v1 is kept");
        assert!(registry.component(&shas[1]).is_err(), "sum's v1 is not");
        assert_eq!(registry.versions_of(&g, "sum").last().unwrap().number, 3);
    }
}
