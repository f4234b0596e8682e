//! A UDF project as `weir dev`, `weir build` and `weir test` see it: which files are its
//! sources, the command that builds its component, and the command that runs its unit
//! tests. The command line's `--watch`/`--build` come first, then the pipeline's
//! `[udf.dev]` (Python and JavaScript projects made by `weir new` have one), else the
//! Rust crate that builds the component, found with `cargo metadata`.

use anyhow::Context as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use weir_pipeline::PipelineSpec;

/// How to find a project's build when the pipeline does not say.
#[derive(Debug, Clone, Default)]
pub struct ProjectArgs {
    /// The UDF's Rust crate (found from the component's name when not given).
    pub crate_dir: Option<PathBuf>,
    /// Watch this path instead (a `.wasm` built by other means, or a source folder).
    pub watch: Option<PathBuf>,
    /// Run this shell command to rebuild instead.
    pub build: Option<String>,
}

/// What a project is made of.
#[derive(Debug, Clone)]
pub struct Project {
    /// The files and folders whose changes call for a rebuild.
    pub sources: Vec<PathBuf>,
    /// How the component is built; `None` when only a `.wasm` is watched.
    pub build: Option<Build>,
    /// How the unit tests run; `None` when the pipeline does not say.
    pub test: Option<Shell>,
}

/// A shell command and the folder it runs in.
#[derive(Debug, Clone)]
pub struct Shell {
    /// The command, run with `sh -c`.
    pub command: String,
    /// Where it runs (default: the current directory).
    pub dir: Option<PathBuf>,
}

/// How a component is built.
#[derive(Debug, Clone)]
pub enum Build {
    /// A shell command that writes the component where the pipeline names it.
    Shell(Shell),
    /// `cargo build` of a Rust crate for wasm32-wasip2; the component cargo writes is
    /// copied to where the pipeline names it, if that is elsewhere (a shared
    /// `CARGO_TARGET_DIR`).
    Cargo {
        /// The crate's `Cargo.toml`.
        manifest: PathBuf,
        /// Where the pipeline expects the component.
        component: PathBuf,
    },
}

impl Project {
    /// The project of `spec`'s UDF.
    pub fn of(spec: &PipelineSpec, args: &ProjectArgs) -> anyhow::Result<Self> {
        let from_command_line = |command: &String| {
            Build::Shell(Shell {
                command: command.clone(),
                dir: None,
            })
        };
        if let Some(watch) = &args.watch {
            return Ok(Self {
                sources: vec![watch.clone()],
                build: args.build.as_ref().map(from_command_line),
                test: None,
            });
        }
        if let (None, Some(dev)) = (&args.crate_dir, &spec.udf.dev) {
            let build = args
                .build
                .as_ref()
                .map(from_command_line)
                .unwrap_or(Build::Shell(Shell {
                    command: dev.build.clone(),
                    dir: Some(dev.dir.clone()),
                }));
            return Ok(Self {
                sources: dev.watch.clone(),
                build: Some(build),
                test: dev.test.as_ref().map(|command| Shell {
                    command: command.clone(),
                    dir: Some(dev.dir.clone()),
                }),
            });
        }
        let crate_dir = match &args.crate_dir {
            Some(dir) => dir.clone(),
            None => find_crate(&spec.udf.path)?,
        };
        let manifest = crate_dir.join("Cargo.toml");
        let build = match &args.build {
            Some(command) => from_command_line(command),
            None => Build::Cargo {
                manifest: manifest.clone(),
                component: spec.udf.path.clone(),
            },
        };
        Ok(Self {
            sources: vec![crate_dir.join("src"), manifest.clone()],
            build: Some(build),
            test: Some(Shell {
                command: format!(
                    "cargo test --quiet --release --manifest-path '{}'",
                    manifest.display()
                ),
                dir: None,
            }),
        })
    }
}

impl Shell {
    /// Runs the command; its output goes to the terminal.
    pub fn run(&self) -> Result<(), String> {
        let mut command = Command::new("sh");
        command.arg("-c").arg(&self.command);
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        match command.status() {
            Ok(status) if status.success() => Ok(()),
            Ok(status) => Err(format!("`{}` failed ({status})", self.command)),
            Err(e) => Err(format!("cannot run `{}`: {e}", self.command)),
        }
    }
}

impl Build {
    /// Builds the component; the build's own output goes to the terminal.
    pub fn run(&self) -> Result<(), String> {
        match self {
            Build::Shell(shell) => shell
                .run()
                .map_err(|why| format!("the build failed: {why}")),
            Build::Cargo {
                manifest,
                component,
            } => {
                cargo_build(manifest, component).map_err(|why| format!("the build failed: {why:#}"))
            }
        }
    }
}

/// `cargo build` of the crate at `manifest` for wasm32-wasip2; copies the component it
/// wrote to `component` when cargo's target folder is not the one the pipeline names.
fn cargo_build(manifest: &Path, component: &Path) -> anyhow::Result<()> {
    let output = Command::new("cargo")
        .args([
            "build",
            "--quiet",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(manifest)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run cargo")?;
    anyhow::ensure!(
        output.status.success(),
        "cargo build --manifest-path {} ({})",
        manifest.display(),
        output.status
    );
    let wanted = component.file_name().unwrap_or_default();
    let built = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .flat_map(|message| {
            message["filenames"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|f| f.as_str().map(PathBuf::from))
        })
        .find(|path| path.file_name() == Some(wanted));
    let Some(built) = built else {
        anyhow::bail!(
            "cargo built no {} for {}; is `[udf] path` the crate's component?",
            wanted.to_string_lossy(),
            manifest.display()
        );
    };
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(&built, component) {
        // To a temporary name, then renamed: a watcher never sees half a component.
        let folder = component.parent().filter(|p| !p.as_os_str().is_empty());
        let folder = folder.unwrap_or(Path::new("."));
        std::fs::create_dir_all(folder)
            .with_context(|| format!("cannot create {}", folder.display()))?;
        let temporary = folder.join(format!(".{}.tmp", wanted.to_string_lossy()));
        std::fs::copy(&built, &temporary)
            .and_then(|_| std::fs::rename(&temporary, component))
            .with_context(|| {
                format!("cannot copy {} to {}", built.display(), component.display())
            })?;
    }
    Ok(())
}

/// The crate that builds `wasm`: the package whose name, with `-` as `_`, is the file's
/// stem, among those `cargo metadata` lists from the component's folder upwards.
fn find_crate(wasm: &Path) -> anyhow::Result<PathBuf> {
    let stem = wasm
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A relative path's last ancestor is "" (`pipeline.toml` given without a folder):
    // that is the current directory, which a child process cannot be started in by name.
    let dir = wasm
        .ancestors()
        .find(|d| d.join("Cargo.toml").exists())
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let output = Command::new("cargo")
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(&dir)
        .output()
        .context("cannot run cargo metadata")?;
    anyhow::ensure!(
        output.status.success(),
        "cargo metadata failed in {}: {}; give the crate with --crate DIR, or --watch a .wasm",
        dir.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    packages
        .iter()
        .find(|p| p["name"].as_str().map(|n| n.replace('-', "_")) == Some(stem.clone()))
        .and_then(|p| p["manifest_path"].as_str())
        .and_then(|m| Path::new(m).parent().map(Path::to_path_buf))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no crate in the workspace of {} builds {stem}.wasm; give it with --crate DIR, or --watch the .wasm",
                dir.display()
            )
        })
}
