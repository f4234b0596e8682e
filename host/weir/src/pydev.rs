//! `weir dev`'s Python development runtime: one component per SDK version, holding
//! CPython, the `weir` SDK and a set of standard library modules, into which each save
//! hands the project's `.py` files (the `weir:udf/dev-sources` import). A save is then a
//! new instance of a component compiled once, with no componentize-py run and no
//! compilation: about 0.2 s from save to swapped in, where a build and a compile take
//! 10-25 s.
//!
//! The runtime (`guest-sdk/python/dev-runtime/weir_dev_runtime.py`, built into this
//! binary with `wit/weir.wit`) is built with the project's componentize-py and SDK the
//! first time, kept under the compile cache's folder (`…/weir/python-dev/`) by a hash
//! of what went into it, and compiled through the compile cache like any component.
//! What it cannot run as the built component would (a standard library module it does
//! not hold) it refuses at `init` with a message naming the module; `weir dev` then
//! builds the component instead (see `dev.rs`).

use anyhow::Context as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use weir_engine::runtime::wasm::{precompiled, LoadedComponent};
use weir_pipeline::PipelineSpec;

/// The runtime's app module.
const RUNTIME_MODULE: &str =
    include_str!("../../../guest-sdk/python/dev-runtime/weir_dev_runtime.py");
/// The contract, with the `keyed-process-dev` world the runtime is built for.
const WIT: &str = include_str!("../../../wit/weir.wit");
/// The most bytes of project sources handed to the runtime.
const MAX_SOURCE_BYTES: usize = 16 << 20;
/// What the runtime's `init` says when the app needs a module it does not hold.
const MISSING_MODULE: &str = "weir-dev: missing-module ";

/// A Python project run through the development runtime.
pub struct PythonDev {
    /// The project folder: the app module, the `weir` SDK folder, the sources handed over.
    dir: PathBuf,
    /// The folder holding the `weir` package the runtime is built from.
    sdk: PathBuf,
    /// The compiled runtime, and the hash of what went into it.
    runtime: Option<(String, LoadedComponent)>,
}

impl PythonDev {
    /// The development runtime for the UDF of `spec`, if its project is a Python one as
    /// `weir new --lang python` makes (`[udf.dev]`, whose folder holds `app.py` and the
    /// `weir` SDK, or `$WEIR_SDK_DIR` does).
    pub fn detect(spec: &PipelineSpec) -> Option<Self> {
        let dir = spec.udf.dev.as_ref()?.dir.clone();
        if !dir.join("app.py").is_file() {
            return None;
        }
        let sdk = std::env::var_os("WEIR_SDK_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.clone());
        sdk.join("weir/_export.py").is_file().then_some(Self {
            dir,
            sdk,
            runtime: None,
        })
    }

    /// The component of the project's current sources: the runtime (built and compiled
    /// first if the SDK or the toolchain changed) with them handed over.
    pub fn version(&mut self, name: &str) -> anyhow::Result<LoadedComponent> {
        let files = project_sources(&self.dir)?;
        let toolchain = componentize_py(&self.dir)?;
        let key = self.key(&toolchain)?;
        if self.runtime.as_ref().map(|(k, _)| k) != Some(&key) {
            let wasm = self.build(&toolchain, &key)?;
            let bytes = std::fs::read(&wasm)?;
            let component = LoadedComponent::from_bytes(name, &bytes)
                .with_context(|| format!("the Python development runtime {}", wasm.display()))?;
            self.runtime = Some((key, component));
        }
        let (_, runtime) = self.runtime.as_ref().expect("set above");
        Ok(runtime.with_sources(files))
    }

    /// A hash of everything the runtime is made of: its module, the contract, the SDK's
    /// files and the componentize-py executable.
    fn key(&self, toolchain: &Path) -> anyhow::Result<String> {
        let mut input = Vec::new();
        for part in [RUNTIME_MODULE.as_bytes(), WIT.as_bytes()] {
            input.extend_from_slice(&(part.len() as u64).to_le_bytes());
            input.extend_from_slice(part);
        }
        for (path, bytes) in python_files(&self.sdk.join("weir"), false)? {
            input.extend_from_slice(path.as_bytes());
            input.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            input.extend_from_slice(&bytes);
        }
        let toolchain = toolchain.canonicalize().unwrap_or(toolchain.to_path_buf());
        input.extend_from_slice(toolchain.to_string_lossy().as_bytes());
        if let Ok(meta) = std::fs::metadata(&toolchain) {
            input.extend_from_slice(&meta.len().to_le_bytes());
            if let Ok(modified) = meta.modified() {
                input.extend_from_slice(format!("{modified:?}").as_bytes());
            }
        }
        Ok(weir_core::identity::sha256_hex(&input))
    }

    /// The runtime's component file for `key`, built now if it is not there.
    fn build(&self, toolchain: &Path, key: &str) -> anyhow::Result<PathBuf> {
        let folder = runtime_dir(&self.dir);
        let wasm = folder.join(format!("{}.wasm", &key[..32]));
        if wasm.is_file() {
            return Ok(wasm);
        }
        eprintln!(
            "weir dev: building the Python development runtime (once per SDK version; 5-15 s) into {}",
            folder.display()
        );
        let started = std::time::Instant::now();
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("cannot create {}", folder.display()))?;
        let work = tempfile::Builder::new()
            .prefix("build-")
            .tempdir_in(&folder)?;
        let (sdk, src, wit) = (
            work.path().join("sdk"),
            work.path().join("src"),
            work.path().join("wit"),
        );
        for (path, bytes) in python_files(&self.sdk.join("weir"), false)? {
            let target = sdk.join("weir").join(path);
            std::fs::create_dir_all(target.parent().expect("a file in a folder"))?;
            std::fs::write(target, bytes)?;
        }
        std::fs::create_dir_all(&src)?;
        std::fs::write(src.join("weir_dev_runtime.py"), RUNTIME_MODULE)?;
        std::fs::create_dir_all(&wit)?;
        std::fs::write(wit.join("weir.wit"), WIT)?;
        let out = work.path().join("runtime.wasm");
        let output = Command::new(toolchain)
            .env_remove("VIRTUAL_ENV")
            .env("RUST_LIB_BACKTRACE", "0")
            .arg("-d")
            .arg(&wit)
            .args(["-w", "keyed-process-dev", "componentize", "-p"])
            .arg(&sdk)
            .arg("-p")
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .arg("weir_dev_runtime")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("cannot run {}", toolchain.display()))?;
        anyhow::ensure!(
            output.status.success(),
            "componentize-py could not build the Python development runtime ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        std::fs::rename(&out, &wasm)?;
        eprintln!(
            "weir dev: built the Python development runtime in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Ok(wasm)
    }
}

/// The standard library module named in a refusal of the runtime's `init`, if that is
/// why it refused.
pub fn missing_module(refusal: &str) -> Option<&str> {
    let rest = &refusal[refusal.find(MISSING_MODULE)? + MISSING_MODULE.len()..];
    rest.split(|c: char| c == ':' || c.is_whitespace())
        .next()
        .filter(|name| !name.is_empty())
}

/// Where built runtimes are kept: beside the compile cache (`…/weir/python-dev`), else
/// in the project's `.weir/python-dev`.
fn runtime_dir(project: &Path) -> PathBuf {
    precompiled::default_dir()
        .and_then(|components| components.parent().map(|base| base.join("python-dev")))
        .unwrap_or_else(|| project.join(".weir/python-dev"))
}

/// The `.py` files the runtime is handed: every one under the project folder, but for
/// the `weir` SDK (the runtime holds it), `wit/` and hidden or cache folders.
fn project_sources(dir: &Path) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let files = python_files(dir, true)?;
    let total: usize = files.iter().map(|(_, bytes)| bytes.len()).sum();
    anyhow::ensure!(
        total <= MAX_SOURCE_BYTES,
        "the project's .py files hold {} MB, more than the Python development runtime takes ({} MB)",
        total >> 20,
        MAX_SOURCE_BYTES >> 20
    );
    Ok(files)
}

/// The `.py` files under `dir`, by path relative to it (with `/`), sorted. With
/// `project`, the SDK's and the contract's folders at the top are left out.
fn python_files(dir: &Path, project: bool) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let walk = walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|entry| {
            let name = entry.file_name().to_string_lossy();
            let top = entry.depth() == 1;
            entry.depth() == 0
                || !(name.starts_with('.')
                    || name == "__pycache__"
                    || name == "node_modules"
                    || (project && top && (name == "weir" || name == "wit")))
        });
    let mut files = Vec::new();
    for entry in walk {
        let entry = entry.with_context(|| format!("cannot read {}", dir.display()))?;
        let path = entry.path();
        if !entry.file_type().is_file() || path.extension().is_none_or(|e| e != "py") {
            continue;
        }
        let relative = path.strip_prefix(dir).expect("under the walked folder");
        let relative = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        files.push((relative, bytes));
    }
    Ok(files)
}

/// The componentize-py executable, found as the project's `build.sh` finds it:
/// `$WEIR_PYTHON_TOOLCHAIN` (the executable, or a venv holding it), the project's
/// `.venv`, `PATH`, the `.weir-tools/python` of the Weir checkout.
fn componentize_py(project: &Path) -> anyhow::Result<PathBuf> {
    let in_venv = |dir: &Path| dir.join("bin/componentize-py");
    if let Some(toolchain) = std::env::var_os("WEIR_PYTHON_TOOLCHAIN").filter(|v| !v.is_empty()) {
        let toolchain = PathBuf::from(toolchain);
        return Ok(if toolchain.is_dir() {
            in_venv(&toolchain)
        } else {
            toolchain
        });
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("componentize-py"))
            .find(|p| p.is_file())
    });
    let checkout = crate::new::weir_checkout().map(|c| in_venv(&c.join(".weir-tools/python")));
    let candidates = [Some(in_venv(&project.join(".venv"))), on_path, checkout]
        .into_iter()
        .flatten();
    for candidate in candidates {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    anyhow::bail!("componentize-py not found (see the project's build.sh)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_module_is_read_from_the_refusal() {
        let refusal = "rejected: its init failed: returned an error: weir-dev: missing-module statistics: the Python development runtime does not hold";
        assert_eq!(missing_module(refusal), Some("statistics"));
        assert_eq!(missing_module("rejected: KeyError"), None);
    }

    #[test]
    fn project_sources_leave_out_the_sdk_and_hidden_folders() {
        let dir = tempfile::tempdir().unwrap();
        for file in [
            "app.py",
            "lib/__init__.py",
            "lib/util.py",
            "weir/__init__.py",
            ".venv/x.py",
            "lib/__pycache__/util.py",
            "notes.txt",
        ] {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x = 1\n").unwrap();
        }
        let names: Vec<String> = project_sources(dir.path())
            .unwrap()
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        assert_eq!(names, ["app.py", "lib/__init__.py", "lib/util.py"]);
    }
}
