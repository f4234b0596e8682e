//! What the admin API's handlers share: the token, the running pipelines and the
//! registry that outlives them.

use crate::deployment::Deployment;
use crate::refused::Refused;
use crate::registry::{Desired, PipelineRecord, Registry, StageRecord};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use weir_control::Versions;
use weir_pipeline::{Overrides, StageGraph};

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
    /// The pipeline file `text` resolved against `base` with its checkpoints in the data
    /// dir (see [`resolve`]).
    fn graph(&self, text: &str, base: &Path) -> Result<StageGraph, Refused> {
        resolve(text, base, &self.data_dir)
    }

    /// [`Self::graph`] again, as often as asked: for the restarts of a deployment.
    fn resolver(&self, text: &str, base: &Path) -> crate::deployment::Resolve {
        let (text, base, data_dir) = (text.to_string(), base.to_path_buf(), self.data_dir.clone());
        Box::new(move || resolve(&text, &base, &data_dir))
    }

    /// Starts a pipeline from its file's text; `base` is where its relative paths start.
    /// Each stage's component becomes its active version (a new number if the registry
    /// has not seen its bytes for that stage), and the registry records it before this
    /// returns.
    pub fn create(&self, text: &str, base: &Path) -> Result<String, Refused> {
        let graph = self.graph(text, base)?;
        let name = graph.name.clone();
        // The name is reserved while the components are compiled and started, without
        // holding `pipelines`: reads and calls on other pipelines go on meanwhile.
        let _reserved = self.reserve(&name)?;
        let known = self.registry.get(&name);
        let mut first = Vec::with_capacity(graph.stages.len());
        let mut all_versions = Vec::with_capacity(graph.stages.len());
        // Per stage: its name, the number of its component and the component's hash.
        let mut activated: Vec<(String, u32, String)> = Vec::new();
        let release = |activated: &[(String, u32, String)]| {
            for (_, _, sha256) in activated {
                self.registry.release_component(sha256);
            }
        };
        for stage in &graph.stages {
            let stored = std::fs::read(&stage.spec.udf.path)
                .map_err(|e| {
                    Refused::new(
                        400,
                        format!(
                            "cannot read UDF component {}: {e}",
                            stage.spec.udf.path.display()
                        ),
                    )
                })
                .and_then(|bytes| {
                    let sha256 = self
                        .registry
                        .store_component(&bytes)
                        .map_err(|e| Refused::new(500, format!("{e:#}")))?;
                    Ok((Arc::new(bytes), sha256))
                });
            let (bytes, sha256) = match stored {
                Ok(stored) => stored,
                Err(refused) => {
                    release(&activated);
                    return Err(refused);
                }
            };
            let versions = match &known {
                Some(record) => self.registry.versions_of(record, &stage.name),
                None => Versions::default(),
            };
            let (number, seen) = versions.number_for(&sha256);
            if !seen {
                versions.insert(number, Arc::clone(&bytes), sha256.clone());
            }
            activated.push((stage.name.clone(), number, sha256));
            first.push(bytes);
            all_versions.push(versions);
        }
        let started = Deployment::start(
            graph,
            self.resolver(text, base),
            first,
            all_versions,
            self.group.as_deref(),
            self.probation_calls,
        );
        let mut deployment = match started {
            Ok(deployment) => deployment,
            Err(refused) => {
                release(&activated);
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
                stages: Vec::new(),
                history: Vec::new(),
            },
            |record| {
                record.definition = text.to_string();
                record.base = base.to_path_buf();
                record.desired = Desired::Running;
                record.stages = stage_records(&record.stages, &activated, keep);
                record.record("created", "", "");
            },
        );
        release(&activated);
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
        for stage in pipelines.get(name).iter().flat_map(|d| &d.stages) {
            let kept = record.stage(&stage.name);
            (stage.versions).retain(|number| kept.is_some_and(|k| k.version(number).is_some()));
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
        let graph = self
            .graph(&record.definition, &record.base)
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let versions: Vec<Versions> = (graph.stages.iter())
            .map(|stage| self.registry.versions_of(record, &stage.name))
            .collect();
        let active = |name: &str| -> anyhow::Result<Arc<Vec<u8>>> {
            let stage = record.stage(name).ok_or_else(|| {
                anyhow::anyhow!("the registry holds no version of stage {name:?}")
            })?;
            let version = stage.version(stage.active).ok_or_else(|| {
                anyhow::anyhow!("no version {} of stage {name:?} is kept", stage.active)
            })?;
            Ok(Arc::new(self.registry.component(&version.sha256)?))
        };
        let started = (graph.stages.iter())
            .map(|stage| active(&stage.name))
            .collect::<anyhow::Result<Vec<_>>>()
            .and_then(|first| {
                Deployment::start(
                    graph.clone(),
                    self.resolver(&record.definition, &record.base),
                    first,
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
                    Deployment::failed(graph, versions, reason),
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
                    r.record("started", "", why);
                },
            )?;
        }
        let mut pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        pipelines.insert(record.name.clone(), deployment);
        Ok(())
    }

    /// Records what pipelines did by themselves: a stage's running version that is no
    /// longer the one the registry has as active (probation rolled it back), and a
    /// pipeline whose inputs all ended. Called a few times a second by `weir serve`
    /// (never while a deploy or rollback of that pipeline is under way).
    pub fn record_what_pipelines_did(&self) {
        let pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        for (name, d) in pipelines.iter() {
            let Ok(_turn) = d.swapping.try_lock() else {
                continue;
            };
            let Some(record) = self.registry.get(name) else {
                continue;
            };
            if d.state() == weir_run::RunState::Finished && record.desired == Desired::Running {
                let finished = self.registry.update(
                    name,
                    || record.clone(),
                    |r| {
                        r.desired = Desired::Finished;
                        r.record("finished", "", "every input ended");
                    },
                );
                if let Err(e) = finished {
                    tracing::error!("pipeline {name:?}: cannot record its end: {e:#}");
                }
                continue;
            }
            for stage in &d.stages {
                let status = stage.control.status();
                let Some(running) = stage.versions.number_of(&status.udf_sha256) else {
                    continue; // not started yet, or tasks of a group on several versions
                };
                if record
                    .stage(&stage.name)
                    .is_none_or(|s| s.active == running)
                {
                    continue;
                }
                let keep = self.registry.keep_versions();
                let reason = status.last_error.unwrap_or_default();
                let sha = status.udf_sha256.clone();
                if let Err(e) = self.registry.change(name, |r| {
                    if let Some(versions) = r.stage_mut(&stage.name) {
                        versions.activate(running, &sha, keep);
                    }
                    r.record("rolled back automatically", &stage.name, reason);
                }) {
                    tracing::error!(
                        "pipeline {name:?}, stage {:?}: cannot record its rollback: {e:#}",
                        stage.name
                    );
                }
            }
        }
    }
}

/// The stages of a record after a create: each stage of `activated` (its name, the
/// number of its component and the component's hash), in the graph's order, with the
/// versions `old` kept of a stage of that name and that component made active (at most
/// `keep` versions). Stages the pipeline no longer has are dropped.
fn stage_records(
    old: &[StageRecord],
    activated: &[(String, u32, String)],
    keep: usize,
) -> Vec<StageRecord> {
    activated
        .iter()
        .map(|(name, number, sha256)| {
            let mut stage =
                (old.iter().find(|s| &s.name == name).cloned()).unwrap_or_else(|| StageRecord {
                    name: name.clone(),
                    active: *number,
                    versions: Vec::new(),
                });
            stage.activate(*number, sha256, keep);
            stage
        })
        .collect()
}

/// The pipeline file `text` (of one stage or several) resolved against `base` (where
/// its relative paths start), with its checkpoints in `data_dir`: a `[udf]` pipeline's in
/// `state/<pipeline>`, each stage's of a graph in `state/<pipeline>/<stage>`.
fn resolve(text: &str, base: &Path, data_dir: &Path) -> Result<StageGraph, Refused> {
    let mut graph = StageGraph::parse(text, &base.join("pipeline.toml"), &Overrides::default())
        .map_err(|e| Refused::new(400, format!("invalid pipeline: {e:#}")))?;
    let dir = data_dir.join("state").join(&graph.name);
    let single = graph.is_single();
    for stage in &mut graph.stages {
        stage.spec.checkpoint.dir = match single {
            true => dir.clone(),
            false => dir.join(&stage.name),
        };
    }
    Ok(graph)
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
