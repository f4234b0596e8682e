//! What the admin API's handlers share: the token and the running pipelines.

use crate::deployment::Deployment;
use crate::refused::Refused;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use weir_pipeline::{Overrides, PipelineSpec};

/// What the handlers share.
pub struct Server {
    /// The bearer token mutating calls must carry.
    pub token: String,
    /// Where the pipelines' state directories are.
    pub data_dir: PathBuf,
    /// Calls a new UDF version is on probation for.
    pub probation_calls: u64,
    /// The pipelines, by name.
    pub pipelines: Mutex<BTreeMap<String, Deployment>>,
    /// With `--group`: the consumer group every pipeline joins.
    pub group: Option<String>,
}

impl Server {
    /// Starts a pipeline from its file's text; `base` is where its relative paths start.
    pub fn create(&self, text: &str, base: &Path) -> Result<String, Refused> {
        let mut spec =
            PipelineSpec::parse(text, &base.join("pipeline.toml"), &Overrides::default())
                .map_err(|e| Refused::new(400, format!("invalid pipeline: {e:#}")))?;
        spec.checkpoint.dir = self.data_dir.join("state").join(&spec.name);
        let mut pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = pipelines.get(&spec.name) {
            if existing.is_running() {
                return Err(Refused::new(
                    409,
                    format!(
                        "pipeline {:?} is already running (stop or delete it first)",
                        spec.name
                    ),
                ));
            }
        }
        let name = spec.name.clone();
        let deployment = Deployment::start(spec, self.group.as_deref(), self.probation_calls)?;
        pipelines.insert(name.clone(), deployment);
        Ok(name)
    }
}
