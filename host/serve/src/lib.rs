//! `weir serve`: a long-running host for many pipelines, steered over an HTTP admin API.
//!
//! Each pipeline runs on its own thread exactly as `weir run` would run it (checkpoints
//! in `<data dir>/state/<pipeline>`), with a [`RunControl`](weir_run::RunControl)
//! through which the API swaps its UDF and reads its status. New UDF versions are
//! compiled, checked against the contract and `init`ed off the processing path, then
//! swapped in between two runs of records; a version that fails within its first calls
//! is rolled back automatically. What the server runs (each pipeline's definition, its
//! versions and their components, its history) is kept in its [`registry`], so that a
//! restart or a crash comes back to it. The API is described in `docs/admin-api.md`.

#![warn(missing_docs)]

mod api;
pub mod connections;
pub mod deployment;
mod metrics;
mod page;
mod refused;
pub mod registry;
mod server;

pub use connections::BODY_TIMEOUT_FACTOR;
pub use refused::Refused;
pub use server::Server;

use anyhow::Context as _;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// How `weir serve` is set up.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The address the admin API and status page listen on; the address bound is
    /// printed at start.
    pub listen: SocketAddr,
    /// Holds the token and the pipelines' state directories.
    pub data_dir: PathBuf,
    /// The bearer token; generated (and kept in the data dir) if not given.
    pub token: Option<String>,
    /// Calls a new UDF version must pass before the old one is let go.
    pub probation_calls: u64,
    /// Pipeline files to start with.
    pub pipelines: Vec<PathBuf>,
    /// Runs every pipeline as a member of this consumer group (see `weir_cluster`).
    pub group: Option<String>,
    /// How many versions of each pipeline the registry keeps.
    pub keep_versions: usize,
    /// How long a client may take to send a request's headers (its body gets
    /// [`BODY_TIMEOUT_FACTOR`] times as long).
    pub header_timeout: std::time::Duration,
    /// Host names the API answers for, besides IP addresses and `localhost`.
    pub allowed_hosts: Vec<String>,
}

/// The token in force: given, or kept in `<data dir>/token` (created on first start).
pub fn token(data_dir: &Path, given: Option<String>) -> anyhow::Result<(String, bool)> {
    if let Some(token) = given {
        return Ok((token, false));
    }
    let path = data_dir.join("token");
    if let Ok(token) = std::fs::read_to_string(&path) {
        return Ok((token.trim().to_string(), false));
    }
    use rand::Rng as _;
    let token: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(32)
        .map(char::from)
        .collect();
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    std::fs::write(&path, &token).with_context(|| format!("cannot write {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok((token, true))
}

/// Another `weir serve` holds the data directory: a second server there would resume the
/// first's pipelines and prune the components its records do not name. `weir serve`
/// exits with 2 on it.
#[derive(Debug)]
pub struct DataDirInUse {
    /// The data directory.
    pub data_dir: PathBuf,
    /// What the lock file says of the server holding it (its process id and address).
    pub holder: String,
}

impl std::fmt::Display for DataDirInUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "another weir serve is using the data directory {} ({}); stop it, or give this one another --data-dir",
            self.data_dir.display(),
            self.holder
        )
    }
}

impl std::error::Error for DataDirInUse {}

/// The exclusive lock on a data directory that a running server holds (on
/// `<data dir>/serve.lock`, released when the process ends, however it ends).
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Takes the exclusive lock on `data_dir` (creating it), or says which server holds it.
pub fn lock_data_dir(data_dir: &Path) -> anyhow::Result<DataDirLock> {
    use std::io::Write as _;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    let path = data_dir.join("serve.lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            let holder = match holder.trim() {
                "" => "its process is not known".to_string(),
                known => known.to_string(),
            };
            return Err(DataDirInUse {
                data_dir: data_dir.to_path_buf(),
                holder,
            }
            .into());
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
    file.set_len(0)?;
    write!(file, "process {}", std::process::id())?;
    Ok(DataDirLock { _file: file })
}

/// Runs the server until SIGINT/SIGTERM, then stops every pipeline gracefully. Refuses
/// ([`DataDirInUse`]) to start on a data directory another server is using.
pub fn serve(config: ServeConfig) -> anyhow::Result<()> {
    let _lock = lock_data_dir(&config.data_dir)?;
    let open_files = connections::raise_open_file_limit();
    let (token, generated) = token(&config.data_dir, config.token.clone())?;
    let (registry, damaged) =
        registry::Registry::open(&config.data_dir.join("registry"), config.keep_versions)?;
    for d in &damaged {
        eprintln!(
            "weir serve: the registry file {} cannot be used ({}); its pipeline is not started, and no component is removed from the registry while the file is there (repair it and restart, or delete it)",
            d.path.display(),
            d.reason
        );
    }
    let server = Arc::new(Server {
        token: token.clone(),
        data_dir: config.data_dir.clone(),
        probation_calls: config.probation_calls,
        pipelines: Mutex::new(BTreeMap::new()),
        creating: Mutex::new(std::collections::BTreeSet::new()),
        group: config.group.clone(),
        registry,
    });
    start_pipelines(&server, &config.pipelines)?;
    {
        let server = Arc::clone(&server);
        std::thread::Builder::new()
            .name("weir-registry".into())
            .spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_millis(200));
                server.record_what_pipelines_did();
            })?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let address = listener.local_addr()?;
        eprintln!("weir serve: admin API and status page on http://{address}/");
        if generated {
            // The token itself stays out of logs: a fingerprint tells two tokens apart.
            let file = config.data_dir.join("token");
            eprintln!(
                "weir serve: generated an API token (sha256 {}…), kept in {}: `weir deploy` reads it from there; `cat {}` shows it",
                &weir_core::identity::sha256_hex(token.as_bytes())[..12],
                file.display(),
                file.display()
            );
        }
        let limits = connections::Limits::new(open_files, config.header_timeout);
        tracing::info!(
            "weir serve: at most {} API connections ({} open files allowed), {} ms for a request's headers",
            limits.connections,
            open_files,
            limits.header_timeout.as_millis()
        );
        let app = api::router(
            Arc::clone(&server),
            limits.body_timeout,
            config.allowed_hosts.clone().into(),
        );
        connections::serve_connections(listener, app, limits, shutdown_signal()).await;
        anyhow::Ok(())
    })?;
    let mut pipelines = server.pipelines.lock().unwrap_or_else(|e| e.into_inner());
    for (name, deployment) in pipelines.iter_mut() {
        tracing::info!("stopping pipeline {name:?}");
        deployment.stop();
    }
    Ok(())
}

/// Starts what the server runs: the pipeline files on its command line, then every
/// pipeline the registry holds as running. A file whose pipeline the registry holds with
/// the same definition resumes it (its active version); with another definition, the
/// file wins, as a `POST` of it would. A file that cannot be started stops the server; a
/// pipeline of the registry that cannot is reported and left out.
fn start_pipelines(server: &Server, files: &[PathBuf]) -> anyhow::Result<()> {
    let mut named = std::collections::BTreeSet::new();
    for path in files {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read pipeline file {}", path.display()))?;
        let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
        let base = std::fs::canonicalize(folder.unwrap_or(Path::new(".")))
            .with_context(|| format!("cannot find the folder of {}", path.display()))?;
        let name = weir_pipeline::StageGraph::parse(
            &text,
            &base.join("pipeline.toml"),
            &weir_pipeline::Overrides::default(),
        )
        .map(|graph| graph.name)
        .map_err(|e| anyhow::anyhow!("{}: invalid pipeline: {e:#}", path.display()))?;
        named.insert(name.clone());
        match server.registry.get(&name) {
            Some(record) if record.definition == text && record.base == base => {
                let again = (record.desired == registry::Desired::Stopped)
                    .then(|| format!("from the command line ({})", path.display()));
                server
                    .resume(&record, again.as_deref())
                    .map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?;
                tracing::info!(
                    "pipeline {name:?} resumed with {} (its file {} is the one in the registry)",
                    active_versions(&record),
                    path.display()
                );
            }
            known => {
                if known.is_some() {
                    eprintln!(
                        "weir serve: pipeline {name:?}: {} differs from the definition in the registry; running the file's",
                        path.display()
                    );
                }
                server
                    .create(&text, &base)
                    .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message))?;
                tracing::info!("pipeline {name:?} started from {}", path.display());
            }
        }
    }
    for record in server.registry.records() {
        if named.contains(&record.name) || record.desired != registry::Desired::Running {
            continue;
        }
        match server.resume(&record, None) {
            Ok(()) => eprintln!(
                "weir serve: pipeline {:?} resumed with {} from the registry",
                record.name,
                active_versions(&record)
            ),
            Err(e) => eprintln!(
                "weir serve: pipeline {:?} from the registry cannot be started: {e:#}",
                record.name
            ),
        }
    }
    Ok(())
}

/// The active versions of `record`'s stages, as the log says them: `version 3` for a
/// pipeline of one stage, `count v1, sum v3` for several.
fn active_versions(record: &registry::PipelineRecord) -> String {
    match record.stages.as_slice() {
        [only] => format!("version {}", only.active),
        stages => stages
            .iter()
            .map(|s| format!("{} v{}", s.name, s.active))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}
