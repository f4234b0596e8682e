//! What the admin API's handlers share: the token, the running pipelines and the
//! registry that outlives them.

use crate::deployment::Deployment;
use crate::refused::Refused;
use crate::registry::{Desired, PipelineRecord, Registry};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use weir_control::Versions;
use weir_pipeline::{Overrides, PipelineSpec};

/// What the handlers share.
pub struct Server {
    /// The bearer token mutating calls must carry.
    pub token: String,
    /// Where the pipelines' state directories are.
    pub data_dir: PathBuf,
    /// Calls a new UDF version is on probation for.
    pub probation_calls: u64,
    /// The pipelines, by name. Held only to look up or insert, never through a compile:
    /// reads must not wait for one.
    pub pipelines: Mutex<BTreeMap<String, Deployment>>,
    /// The names of pipelines being created (compiled and started), reserved so that a
    /// second create of the same name is refused while the first is under way.
    pub creating: Mutex<BTreeSet<String>>,
    /// With `--group`: the consumer group every pipeline joins.
    pub group: Option<String>,
    /// What the server runs, kept in the data dir (see [`crate::registry`]).
    pub registry: Registry,
}

impl Server {
    /// The pipeline file `text` resolved against `base` (where its relative paths
    /// start), with its checkpoints in the data dir.
    fn spec(&self, text: &str, base: &Path) -> Result<PipelineSpec, Refused> {
        let mut spec =
            PipelineSpec::parse(text, &base.join("pipeline.toml"), &Overrides::default())
                .map_err(|e| Refused::new(400, format!("invalid pipeline: {e:#}")))?;
        spec.checkpoint.dir = self.data_dir.join("state").join(&spec.name);
        Ok(spec)
    }

    /// Starts a pipeline from its file's text; `base` is where its relative paths start.
    /// Its component becomes its active version (a new number if the registry has not
    /// seen its bytes for this pipeline), and the registry records it before this
    /// returns.
    pub fn create(&self, text: &str, base: &Path) -> Result<String, Refused> {
        let spec = self.spec(text, base)?;
        let name = spec.name.clone();
        // The name is reserved while the component is compiled and started, without
        // holding `pipelines`: reads and calls on other pipelines go on meanwhile.
        let _reserved = self.reserve(&name)?;
        let bytes = std::fs::read(&spec.udf.path).map_err(|e| {
            Refused::new(
                400,
                format!("cannot read UDF component {}: {e}", spec.udf.path.display()),
            )
        })?;
        let bytes = Arc::new(bytes);
        let sha256 = self
            .registry
            .store_component(&bytes)
            .map_err(|e| Refused::new(500, format!("{e:#}")))?;
        let known = self.registry.get(&name);
        let versions = match &known {
            Some(record) => self.registry.versions_of(record),
            None => Versions::default(),
        };
        let (number, seen) = versions.number_for(&sha256);
        if !seen {
            versions.insert(number, Arc::clone(&bytes), sha256.clone());
        }
        let started = Deployment::start(
            spec,
            bytes,
            versions,
            self.group.as_deref(),
            self.probation_calls,
        );
        let mut deployment = match started {
            Ok(deployment) => deployment,
            Err(refused) => {
                self.registry.release_component(&sha256);
                return Err(refused);
            }
        };
        let keep = self.registry.keep_versions();
        let recorded = self.registry.update(
            &name,
            || PipelineRecord {
                name: name.clone(),
                definition: text.to_string(),
                base: base.to_path_buf(),
                desired: Desired::Running,
                active: number,
                versions: Vec::new(),
                history: Vec::new(),
            },
            |record| {
                record.definition = text.to_string();
                record.base = base.to_path_buf();
                record.desired = Desired::Running;
                record.activate(number, &sha256, keep);
                record.record("created", "");
            },
        );
        self.registry.release_component(&sha256);
        if let Err(e) = recorded {
            deployment.stop();
            return Err(Refused::new(
                500,
                format!("pipeline {name:?} was not started: {e:#}"),
            ));
        }
        let mut pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        pipelines.insert(name.clone(), deployment);
        drop(pipelines);
        self.forget_unkept_versions(&name);
        Ok(name)
    }

    /// Forgets in memory the versions of pipeline `name` that its registry record no
    /// longer keeps (`--keep-versions`): memory does not grow with every deploy. Called
    /// after every change of the record's versions.
    pub fn forget_unkept_versions(&self, name: &str) {
        let Some(record) = self.registry.get(name) else {
            return;
        };
        let pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = pipelines.get(name) {
            d.versions.retain(|number| record.version(number).is_some());
        }
    }

    /// Reserves `name` for a pipeline being created: refused (409) if a pipeline of that
    /// name runs or is being created. The name is free again when the reservation drops.
    fn reserve(&self, name: &str) -> Result<Reservation<'_>, Refused> {
        let pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if pipelines.get(name).is_some_and(Deployment::is_running) {
            return Err(Refused::new(
                409,
                format!("pipeline {name:?} is already running (stop or delete it first)"),
            ));
        }
        let mut creating = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        if !creating.insert(name.to_string()) {
            return Err(Refused::new(
                409,
                format!("pipeline {name:?} is being created by another call"),
            ));
        }
        Ok(Reservation {
            server: self,
            name: name.to_string(),
        })
    }

    /// Starts a pipeline the registry holds again, with its active version: it resumes
    /// from its checkpoint. `weir serve` calls this at start for every pipeline that
    /// should run; `again` names why, when the registry had it stopped (it is then
    /// recorded as running).
    /// A pipeline whose definition can be read but that cannot be started is shown as
    /// `failed` with the reason (see [`Deployment::failed`]), and the error returned.
    pub fn resume(&self, record: &PipelineRecord, again: Option<&str>) -> anyhow::Result<()> {
        let spec = self
            .spec(&record.definition, &record.base)
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let versions = self.registry.versions_of(record);
        let started = record
            .version(record.active)
            .ok_or_else(|| anyhow::anyhow!("no version {} is kept", record.active))
            .and_then(|active| self.registry.component(&active.sha256))
            .and_then(|bytes| {
                Deployment::start(
                    spec.clone(),
                    Arc::new(bytes),
                    versions.clone(),
                    self.group.as_deref(),
                    self.probation_calls,
                )
                .map_err(|e| anyhow::anyhow!("{}", e.message))
            });
        let deployment = match started {
            Ok(deployment) => deployment,
            Err(e) => {
                let reason = format!("cannot be started from the registry: {e:#}");
                let mut pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
                pipelines.insert(
                    record.name.clone(),
                    Deployment::failed(spec, versions, reason),
                );
                return Err(e);
            }
        };
        if let Some(why) = again {
            self.registry.update(
                &record.name,
                || record.clone(),
                |r| {
                    r.desired = Desired::Running;
                    r.record("started", why);
                },
            )?;
        }
        let mut pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        pipelines.insert(record.name.clone(), deployment);
        Ok(())
    }

    /// Records what pipelines did by themselves: a running version that is no longer the
    /// one the registry has as active (probation rolled it back), and a pipeline whose
    /// inputs all ended. Called a few times a second by `weir serve` (never while a
    /// deploy or rollback of that pipeline is under way).
    pub fn record_what_pipelines_did(&self) {
        let pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        for (name, d) in pipelines.iter() {
            let Ok(_turn) = d.swapping.try_lock() else {
                continue;
            };
            let status = d.control.status();
            let Some(running) = d.versions.number_of(&status.udf_sha256) else {
                continue; // not started yet, or tasks of a group on several versions
            };
            let Some(record) = self.registry.get(name) else {
                continue;
            };
            if status.state == weir_run::RunState::Finished && record.desired == Desired::Running {
                let finished = self.registry.update(
                    name,
                    || record.clone(),
                    |r| {
                        r.desired = Desired::Finished;
                        r.record("finished", "every input ended");
                    },
                );
                if let Err(e) = finished {
                    tracing::error!("pipeline {name:?}: cannot record its end: {e:#}");
                }
                continue;
            }
            if record.active == running {
                continue;
            }
            let keep = self.registry.keep_versions();
            let reason = status.last_error.unwrap_or_default();
            let sha = status.udf_sha256.clone();
            if let Err(e) = self.registry.update(
                name,
                || record.clone(),
                |r| {
                    r.activate(running, &sha, keep);
                    r.record("rolled back automatically", reason);
                },
            ) {
                tracing::error!("pipeline {name:?}: cannot record its rollback: {e:#}");
            }
        }
    }
}

/// A pipeline name reserved by [`Server::reserve`] while the pipeline is created.
struct Reservation<'a> {
    server: &'a Server,
    name: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut creating = self
            .server
            .creating
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        creating.remove(&self.name);
    }
}
