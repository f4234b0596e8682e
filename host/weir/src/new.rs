//! `weir new`: a ready UDF project in Rust, Python or JavaScript.
//!
//! Each project is the same small UDF (user sessions with an event-time timer, keyed
//! state, config and a side output), with a pipeline file and sample input, so that
//! `weir dev pipeline.toml` runs it at once. The templates live in `host/weir/templates/` and
//! are compiled into the binary, together with the pieces a Python or JavaScript project
//! carries with it (the SDK and the `wit/` contract): a project made by this binary
//! matches this binary's host.

use anyhow::Context as _;
use include_dir::{include_dir, Dir};
use std::path::{Path, PathBuf};

static RUST: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/templates/rust");
static PYTHON: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/templates/python");
static JS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/templates/js");
static PYTHON_SDK: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../guest-sdk/python/weir");
static JS_SDK: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../guest-sdk/js/sdk");
static WIT: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../../wit");

/// The languages a project can be made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

/// What to make, and where.
#[derive(Debug, Clone)]
pub struct NewProject {
    /// The UDF's name: lower-case letters, digits and `-`, starting with a letter
    /// (checked by [`create`]).
    pub name: String,
    /// The language of the template.
    pub lang: Lang,
    /// The project folder (default: `./NAME`).
    pub dir: Option<PathBuf>,
    /// Rust only: the `weir-sdk` crate to depend on (default: the one this binary was
    /// built with).
    pub sdk: Option<PathBuf>,
}

/// Writes the project; returns its folder.
pub fn create(project: &NewProject) -> anyhow::Result<PathBuf> {
    check_name(&project.name)?;
    let dir = project
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&project.name));
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        anyhow::bail!("{} already exists and is not empty", dir.display());
    }
    let mut substitutions = vec![
        ("{{name}}", project.name.clone()),
        ("{{name_snake}}", project.name.replace('-', "_")),
    ];
    let (template, carried): (&Dir, Vec<(&Dir, &str)>) = match project.lang {
        Lang::Rust => {
            let sdk = rust_sdk(project.sdk.as_deref())?;
            substitutions.push(("{{sdk_path}}", sdk.display().to_string()));
            (&RUST, vec![])
        }
        Lang::Python => (&PYTHON, vec![(&PYTHON_SDK, "weir"), (&WIT, "wit")]),
        Lang::Js => (&JS, vec![(&JS_SDK, "weir"), (&WIT, "wit")]),
    };
    let checkout = weir_checkout().map(|dir| dir.display().to_string());
    substitutions.push(("{{weir_checkout}}", checkout.unwrap_or_default()));
    write_dir(template, &dir, &substitutions)
        .with_context(|| format!("cannot write the project into {}", dir.display()))?;
    for (files, into) in carried {
        write_dir(files, &dir.join(into), &[])
            .with_context(|| format!("cannot write {into}/ into {}", dir.display()))?;
    }
    Ok(dir)
}

/// What to do next, printed after the project is made.
pub fn next_steps(dir: &Path) -> String {
    let steps = [
        format!("cd {}", dir.display()),
        "weir test                 # the unit tests, natively, on the SDK's test host".into(),
        "weir dev pipeline.toml    # runs input.jsonl, and again on every save of the sources (Ctrl-C stops)"
            .into(),
    ];
    format!(
        "next:\n  {}\nthe project's README.md says more",
        steps.join("\n  ")
    )
}

/// `check_name` for the command line's parser: a bad name is a bad command line (exit 2).
pub fn udf_name(text: &str) -> Result<String, String> {
    check_name(text)
        .map(|()| text.to_string())
        .map_err(|e| e.to_string())
}

/// Names become a crate name, a wasm file name and a pipeline name: lower-case letters,
/// digits and `-`, starting with a letter.
fn check_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    anyhow::ensure!(
        valid,
        "{name:?} is not a valid UDF name: use lower-case letters, digits and '-', starting with a letter (e.g. \"user-sessions\")"
    );
    Ok(())
}

/// The SDK crate a Rust project depends on by path: `--sdk`, else the source tree this
/// binary was built from (the SDK is not on crates.io yet).
fn rust_sdk(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let sdk = match given {
        Some(path) => path.to_path_buf(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk"),
    };
    let sdk = sdk
        .canonicalize()
        .ok()
        .filter(|p| p.join("Cargo.toml").exists());
    sdk.ok_or_else(|| {
        anyhow::anyhow!(
            "cannot find the weir-sdk crate; give the guest-sdk folder of a Weir checkout with --sdk DIR"
        )
    })
}

/// The Weir checkout this binary was built from, if it is still there: its
/// `scripts/toolchain/` installs the Python and JavaScript toolchains into its
/// `.weir-tools/`, where a project's `build.sh` looks for them last.
pub(crate) fn weir_checkout() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    dir.canonicalize()
        .ok()
        .filter(|d| d.join("scripts/toolchain").is_dir())
}

/// Writes every file of `files` under `into`, with the placeholders replaced. A
/// template's `X.tmpl` becomes `X` (a template `Cargo.toml` would otherwise be taken
/// for a crate of the Weir workspace); `build.sh` is made executable.
fn write_dir(files: &Dir, into: &Path, substitutions: &[(&str, String)]) -> anyhow::Result<()> {
    for entry in files.entries() {
        match entry {
            include_dir::DirEntry::Dir(dir) => write_dir(dir, into, substitutions)?,
            include_dir::DirEntry::File(file) => {
                let relative = file.path();
                let relative = match relative.to_str().and_then(|p| p.strip_suffix(".tmpl")) {
                    Some(stripped) => PathBuf::from(stripped),
                    None => relative.to_path_buf(),
                };
                if is_build_output(&relative) {
                    continue;
                }
                let path = into.join(relative);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                match std::str::from_utf8(file.contents()) {
                    Ok(text) => {
                        let text = substitutions
                            .iter()
                            .fold(text.to_string(), |text, (from, to)| text.replace(from, to));
                        std::fs::write(&path, text)?;
                    }
                    Err(_) => std::fs::write(&path, file.contents())?,
                }
                if path.extension().is_some_and(|e| e == "sh") {
                    use std::os::unix::fs::PermissionsExt as _;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
                }
            }
        }
    }
    Ok(())
}

/// Files a developer's checkout may hold next to the sources but a project must not get.
fn is_build_output(path: &Path) -> bool {
    path.components().any(|c| {
        let c = c.as_os_str();
        c == "__pycache__" || c == "node_modules" || c == "target"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("user-sessions").is_ok());
        assert!(check_name("s2").is_ok());
        for bad in ["", "Sessions", "2fast", "a_b", "end-", "a b"] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_rust_project_gets_its_name_and_sdk_path() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("user-sessions");
        create(&NewProject {
            name: "user-sessions".into(),
            lang: Lang::Rust,
            dir: Some(project.clone()),
            sdk: None,
        })
        .unwrap();
        let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("name = \"user-sessions\""));
        assert!(!manifest.contains("{{"));
        let pipeline = std::fs::read_to_string(project.join("pipeline.toml")).unwrap();
        assert!(pipeline.contains("release/user_sessions.wasm"));
        assert!(project.join("src/lib.rs").exists());

        // A second time into the same folder is refused.
        let again = create(&NewProject {
            name: "user-sessions".into(),
            lang: Lang::Rust,
            dir: Some(project),
            sdk: None,
        });
        assert!(again.unwrap_err().to_string().contains("not empty"));
    }
}
