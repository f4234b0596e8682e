//! What the registry keeps of one pipeline: its definition, whether it should run, each
//! stage's kept UDF versions and active one, and its history; and the record file's
//! formats (2 today, 1 read as a pipeline of one stage).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use weir_core::time::wall_clock_ms;

/// The most history entries a record keeps.
pub const MAX_HISTORY: usize = 200;

/// Whether a pipeline should run when the server starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Desired {
    /// Started again with its active versions (it resumes from its checkpoint).
    Running,
    /// Stopped through the API: stays stopped until it is created again.
    Stopped,
    /// It ended by itself (every input ended): not started again, which would read its
    /// inputs once more.
    Finished,
}

/// One kept version of a stage's UDF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// Its number (1 for the first, then one more per new component of the stage).
    pub number: u32,
    /// The SHA-256 of its component: `components/<sha256>.wasm`.
    pub sha256: String,
    /// When it was first deployed, in ms since the epoch.
    pub deployed_at: i64,
}

/// The UDF versions of one stage of a pipeline (a pipeline of one `[udf]` is one stage,
/// named as the pipeline).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRecord {
    /// The stage's name, as the pipeline file gives it.
    pub name: String,
    /// The number of the version running (or to run).
    pub active: u32,
    /// The kept versions, oldest first (at most the registry's `keep_versions`; the
    /// active one always among them).
    pub versions: Vec<VersionRecord>,
}

impl StageRecord {
    /// A stage whose first version, number 1, is the component `sha256`.
    pub fn first(name: &str, sha256: &str) -> Self {
        let mut stage = Self {
            name: name.to_string(),
            active: 1,
            versions: Vec::new(),
        };
        stage.activate(1, sha256, 1);
        stage
    }

    /// The kept version with this number.
    pub fn version(&self, number: u32) -> Option<&VersionRecord> {
        self.versions.iter().find(|v| v.number == number)
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

/// Something that happened to a pipeline, as its history shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// When, in ms since the epoch.
    pub at: i64,
    /// `created`, `deployed`, `rolled back`, `rolled back automatically`, `stopped`,
    /// `started`, `finished`.
    pub action: String,
    /// The stage it happened to, in a pipeline of several stages (empty: the whole
    /// pipeline, or a pipeline of one stage).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stage: String,
    /// The version of that stage (of the one stage) active after it; 0 for an entry
    /// about every stage of a pipeline of several.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: u32,
    /// What came of it, or why (empty when there is nothing to add).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Everything the registry keeps about one pipeline (record format 2).
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
    /// Each stage's versions, in the graph's order (one for a `[udf]` pipeline).
    pub stages: Vec<StageRecord>,
    /// What happened to it, oldest first (the last [`MAX_HISTORY`] entries).
    pub history: Vec<HistoryEntry>,
}

impl PipelineRecord {
    /// The versions of stage `name`.
    pub fn stage(&self, name: &str) -> Option<&StageRecord> {
        self.stages.iter().find(|s| s.name == name)
    }

    /// The versions of stage `name`, to change.
    pub fn stage_mut(&mut self, name: &str) -> Option<&mut StageRecord> {
        self.stages.iter_mut().find(|s| s.name == name)
    }

    /// Appends a history entry for `action` on `stage` (empty: the whole pipeline),
    /// keeping the last [`MAX_HISTORY`]. The entry names the stage and its active
    /// version; in a pipeline of one stage it names no stage, and the version of that one.
    pub fn record(&mut self, action: &str, stage: &str, detail: impl Into<String>) {
        let (stage, version) = match self.stages.as_slice() {
            [only] => (String::new(), only.active),
            _ => (stage.to_string(), self.stage(stage).map_or(0, |s| s.active)),
        };
        self.history.push(HistoryEntry {
            at: wall_clock_ms(),
            action: action.to_string(),
            stage,
            version,
            detail: detail.into(),
        });
        let excess = self.history.len().saturating_sub(MAX_HISTORY);
        self.history.drain(..excess);
    }

    /// Checks what a record file must hold: a stage at least, no two of one name, each
    /// stage's active version among its kept ones.
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.stages.is_empty(), "it names no stage");
        for (i, stage) in self.stages.iter().enumerate() {
            anyhow::ensure!(
                !self.stages[..i].iter().any(|s| s.name == stage.name),
                "it names stage {:?} twice",
                stage.name
            );
            anyhow::ensure!(
                stage.version(stage.active).is_some(),
                "the active version {} of stage {:?} is not among its versions",
                stage.active,
                stage.name
            );
        }
        Ok(())
    }
}

/// A record of format 1 (before pipelines had stages): one UDF's versions.
#[derive(Deserialize)]
pub struct PipelineRecordV1 {
    name: String,
    definition: String,
    base: PathBuf,
    desired: Desired,
    active: u32,
    versions: Vec<VersionRecord>,
    history: Vec<HistoryEntry>,
}

impl From<PipelineRecordV1> for PipelineRecord {
    /// A pipeline of one stage, named as the pipeline (as a `[udf]` file's stage is).
    fn from(v1: PipelineRecordV1) -> Self {
        Self {
            stages: vec![StageRecord {
                name: v1.name.clone(),
                active: v1.active,
                versions: v1.versions,
            }],
            name: v1.name,
            definition: v1.definition,
            base: v1.base,
            desired: v1.desired,
            history: v1.history,
        }
    }
}
