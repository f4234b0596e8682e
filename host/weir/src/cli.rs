//! The `weir` command line.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use weir_pipeline::{Overrides, PipelineSpec, StageGraph};
use weir_run::{run, run_graph, GraphFailure, GraphReport, RunOptions};

use crate::client::{answer, ServerArgs};
use crate::project::{Project, ProjectArgs};
use anyhow::Context as _;

#[derive(Parser, Debug)]
#[command(
    name = "weir",
    version,
    about = "A stream processor whose process functions are wasm components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Logs more: `-v` debug, `-vv` trace (wasmtime and cranelift stay quiet unless
    /// `WEIR_LOG` or `RUST_LOG` names them).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// The option of the commands that compile UDF components.
#[derive(clap::Args, Debug, Clone, Copy)]
struct CompileArgs {
    /// Compiles UDF components every time instead of keeping the compiled code in
    /// `$WEIR_CACHE_DIR/components` (default `~/.cache/weir/components`).
    #[arg(long)]
    no_compile_cache: bool,
}

impl CompileArgs {
    /// Applies the option to the process's wasm engine.
    fn apply(self) {
        if self.no_compile_cache {
            weir_engine::runtime::wasm::precompiled::configure(None);
        }
    }
}

/// How `weir status` prints.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum StatusFormat {
    /// One line per pipeline.
    Table,
    /// The admin API's answer, pretty-printed.
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs a pipeline until its inputs end.
    Run {
        /// The pipeline file (TOML; see docs/pipeline.md).
        pipeline: PathBuf,
        /// Reads source NAME from PATH instead (`-` for stdin).
        #[arg(long = "input", value_name = "NAME=PATH", value_parser = key_value)]
        inputs: Vec<(String, String)>,
        /// Writes output NAME to PATH instead (`-` for stdout).
        #[arg(long = "output", value_name = "NAME=PATH", value_parser = key_value)]
        outputs: Vec<(String, String)>,
        /// Sets UDF config KEY to VALUE.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
        config: Vec<(String, String)>,
        /// Runs another UDF component.
        #[arg(long, value_name = "PATH")]
        udf: Option<PathBuf>,
        /// Writes dead letters to PATH (default: next to the pipeline file).
        #[arg(long, value_name = "PATH")]
        dead_letter: Option<PathBuf>,
        /// Keeps checkpoints in DIR (default: `.weir-state/<pipeline name>` next to the
        /// pipeline file). A run resumes from the newest checkpoint there.
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// Time between checkpoints (default 10s).
        #[arg(long, value_name = "DURATION")]
        checkpoint_interval: Option<String>,
        /// Takes no checkpoints and restores none.
        #[arg(long)]
        no_checkpoints: bool,
        /// Processes the records in N keyed shards, each on its own thread with its own
        /// UDF instance (replaces the pipeline file's `parallelism`; default 1). A
        /// checkpoint taken at one parallelism restores at any other.
        #[arg(long, value_name = "N")]
        parallelism: Option<usize>,
        /// Starts from scratch: deletes the checkpoints in the state directory first.
        #[arg(long)]
        fresh: bool,
        /// Prints no summary at the end.
        #[arg(long, short)]
        quiet: bool,
        /// Exits with 3 instead of 0 when the run completed but sent any record or timer
        /// to the dead letters (rejected, undecodable, or failed under `on_error =
        /// "dead-letter"`), for scripts that must not take a lossy run for a success.
        #[arg(long)]
        fail_on_dead_letters: bool,
        /// Joins Kafka consumer group GROUP and runs the tasks (partitions) the group
        /// gives this process; start more processes with the same group to scale out
        /// (see docs/scaling.md). Every source must be a Kafka source.
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Runs a pipeline and reloads its UDF whenever its sources change (rebuilding it):
    /// a file input runs again from the start on every save (and is watched until
    /// Ctrl-C); a live input (stdin, Kafka) gets the new version swapped in, state kept.
    /// In a pipeline of several stages each stage's component is watched (not built),
    /// and a new one is put to work in its stage alone.
    Dev {
        /// The pipeline file (TOML; see docs/pipeline.md).
        pipeline: PathBuf,
        /// Reads source NAME from PATH instead (`-` for stdin).
        #[arg(long = "input", value_name = "NAME=PATH", value_parser = key_value)]
        inputs: Vec<(String, String)>,
        /// Writes output NAME to PATH instead (`-` for stdout).
        #[arg(long = "output", value_name = "NAME=PATH", value_parser = key_value)]
        outputs: Vec<(String, String)>,
        /// The UDF's crate (default: found by the component's name with `cargo metadata`).
        #[arg(long = "crate", value_name = "DIR")]
        crate_dir: Option<PathBuf>,
        /// Watches PATH (a .wasm built some other way, or a folder) instead of a crate.
        #[arg(long, value_name = "PATH")]
        watch: Option<PathBuf>,
        /// The shell command that rebuilds the component.
        #[arg(long, value_name = "COMMAND")]
        build: Option<String>,
        /// Sets UDF config KEY to VALUE.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
        config: Vec<(String, String)>,
        /// Exits when a file input has been run through once, instead of watching for
        /// changes (for scripts).
        #[arg(long)]
        once: bool,
        /// A Python project: builds its component (componentize-py, then a compile) on
        /// every save, instead of running its sources in the Python development runtime.
        #[arg(long)]
        full_build: bool,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Builds the UDF component of a project: runs the pipeline's `[udf.dev] build`, or
    /// `cargo build` of the Rust crate whose component the pipeline names.
    Build {
        /// The project's pipeline file.
        #[arg(default_value = "pipeline.toml")]
        pipeline: PathBuf,
        /// The UDF's crate (default: found by the component's name with `cargo metadata`).
        #[arg(long = "crate", value_name = "DIR")]
        crate_dir: Option<PathBuf>,
    },
    /// Runs a project's unit tests on the SDK's native test host: the pipeline's
    /// `[udf.dev] test`, or `cargo test` of the Rust crate.
    Test {
        /// The project's pipeline file.
        #[arg(default_value = "pipeline.toml")]
        pipeline: PathBuf,
        /// The UDF's crate (default: found by the component's name with `cargo metadata`).
        #[arg(long = "crate", value_name = "DIR")]
        crate_dir: Option<PathBuf>,
    },
    /// Runs many pipelines behind an HTTP admin API, with hot UDF swaps (docs/admin-api.md).
    Serve {
        /// Pipeline files to start right away.
        pipelines: Vec<PathBuf>,
        /// Address of the admin API (loopback unless told otherwise).
        #[arg(long, default_value = "127.0.0.1:7878")]
        listen: std::net::SocketAddr,
        /// Holds the API token and the pipelines' checkpoints.
        #[arg(long, default_value = ".weir-serve")]
        data_dir: PathBuf,
        /// The API token (default: generated at first start, kept in the data dir).
        #[arg(long, env = "WEIR_TOKEN")]
        token: Option<String>,
        /// Calls a new UDF version must pass before the old one is let go; a failure
        /// before then rolls back to the old version.
        #[arg(long, default_value_t = weir_control::DEFAULT_PROBATION_CALLS)]
        probation_calls: u64,
        /// Runs every pipeline as a member of Kafka consumer group GROUP, as
        /// `weir run --group` does: this process runs the tasks the group gives it, and a
        /// deployed UDF version goes to all of them (docs/scaling.md).
        #[arg(long)]
        group: Option<String>,
        /// How many UDF versions of each pipeline the registry keeps (and can roll back
        /// to); older components are removed.
        #[arg(long, default_value_t = weir_serve::registry::DEFAULT_KEEP_VERSIONS)]
        keep_versions: usize,
        /// How long a client may take to send a request's headers; a connection that has
        /// not sent them by then is closed (a request's body has 12 times as long).
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
        header_timeout: std::time::Duration,
        /// A host name the API answers for (repeatable), besides IP addresses and
        /// `localhost`: requests naming any other `Host` are refused (DNS rebinding).
        #[arg(long = "allow-host", value_name = "NAME")]
        allowed_hosts: Vec<String>,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Starts a pipeline on a running `weir serve`, or (with --pipeline) swaps in a new UDF.
    Deploy {
        /// A pipeline file, or with --pipeline a UDF component (.wasm).
        file: PathBuf,
        /// Swaps FILE in as the UDF of this running pipeline.
        #[arg(long)]
        pipeline: Option<String>,
        /// With --pipeline: the stage whose UDF FILE is, in a pipeline of several stages.
        #[arg(long, requires = "pipeline")]
        stage: Option<String>,
        /// With --pipeline: answer once the new version has passed its probation (exit
        /// 0) or been rolled back (exit 1, saying why), waiting at most 60 s.
        #[arg(long, requires = "pipeline")]
        wait: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Shows the pipelines of a running `weir serve` (or one of them), or with --group
    /// the tasks of a pipeline run in a consumer group: who owns each, and its lag.
    Status {
        name: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
        /// The consumer group of `weir run --group` (read from the brokers).
        #[arg(long, requires = "brokers")]
        group: Option<String>,
        /// The brokers, with --group.
        #[arg(long)]
        brokers: Option<String>,
        /// `table`: one line per pipeline; `json`: the admin API's answer.
        #[arg(short, long, value_enum, default_value = "table")]
        output: StatusFormat,
    },
    /// Goes back to a pipeline's previous UDF version (of one of its stages).
    Rollback {
        name: String,
        /// The stage to roll back, in a pipeline of several stages.
        #[arg(long)]
        stage: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Stops a pipeline gracefully (it checkpoints).
    Stop {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Creates a UDF project (Rust, Python or JavaScript) that `weir dev pipeline.toml`
    /// runs at once: the function, its unit tests, a pipeline and sample input.
    New {
        /// The UDF's name: lower-case letters, digits and '-'.
        #[arg(value_parser = crate::new::udf_name)]
        name: String,
        /// The language to write it in.
        #[arg(long, value_enum, default_value = "rust")]
        lang: crate::new::Lang,
        /// The project folder (default: ./NAME).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Rust: the weir-sdk crate to depend on (default: the SDK of the Weir checkout
        /// this binary was built from).
        #[arg(long, value_name = "DIR")]
        sdk: Option<PathBuf>,
    },
    /// Produces JSON lines (a file, or `-` for stdin) to a Kafka topic.
    Produce {
        /// The file to read, or `-` for stdin.
        input: String,
        /// Bootstrap brokers, host:port[,host:port...].
        #[arg(long)]
        brokers: String,
        /// The topic (it must exist).
        #[arg(long)]
        topic: String,
        /// The JSON field (name or pointer) whose value becomes the message key.
        #[arg(long)]
        key: Option<String>,
    },
}

/// A duration of more than 0 (`10s`, `500ms`), for a flag.
fn positive_duration(text: &str) -> Result<std::time::Duration, String> {
    match weir_core::time::parse_duration_ms(text) {
        Ok(ms) if ms > 0 => Ok(std::time::Duration::from_millis(ms as u64)),
        Ok(_) => Err(format!("{text:?} is not more than 0")),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// Exit code 0, or 1 with the error printed.
fn finished(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A flag that SIGINT or SIGTERM sets (see [`stop_on_signals`]).
fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    if let Err(e) = stop_on_signals(&stop) {
        tracing::warn!("cannot handle SIGINT/SIGTERM: {e}");
    }
    stop
}

/// SIGINT or SIGTERM stops the run gracefully; a second one exits at once.
fn stop_on_signals(stop: &Arc<AtomicBool>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(stop))?;
        signal_hook::flag::register(signal, Arc::clone(stop))?;
    }
    Ok(())
}

/// Loads a project's pipeline (exit 2 if it is bad) and runs `what` on its project.
fn project_command(
    pipeline: &std::path::Path,
    crate_dir: Option<PathBuf>,
    what: impl FnOnce(&PipelineSpec, &Project) -> anyhow::Result<()>,
) -> ExitCode {
    let spec = match PipelineSpec::load(pipeline, &Overrides::default()) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let args = ProjectArgs {
        crate_dir,
        ..ProjectArgs::default()
    };
    finished(Project::of(&spec, &args).and_then(|project| what(&spec, &project)))
}

/// The message for a pipeline whose component is not there: how to build it.
fn missing_component(pipeline: &std::path::Path, spec: &PipelineSpec) -> String {
    format!(
        "{}: no such file; build it with `weir build {}`",
        spec.udf.path.display(),
        pipeline.display()
    )
}

fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected NAME=VALUE, got {text:?}")),
    }
}

/// The crates whose info and debug logs say nothing a user of weir needs (the wasm
/// engine, the disk state store): they only warn unless the filter names them.
const NOISY: [&str; 4] = ["wasmtime", "cranelift", "fjall", "lsm_tree"];

/// What is logged: `$WEIR_LOG`, else `$RUST_LOG`, else `info` (`debug` with `-v`, `trace`
/// with `-vv`); wasmtime, cranelift and the disk state store (fjall, lsm_tree) only warn
/// unless the filter names them.
fn log_filter(verbose: u8) -> String {
    let given = ["WEIR_LOG", "RUST_LOG"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
    let mut filter = given.unwrap_or_else(|| {
        match verbose {
            0 => "info",
            1 => "debug",
            _ => "trace",
        }
        .to_string()
    });
    for noisy in NOISY {
        if !filter.contains(noisy) {
            filter.push_str(&format!(",{noisy}=warn"));
        }
    }
    filter
}

/// Sets up logging on stderr ([`log_filter`]), parses the command line and runs the
/// subcommand; returns the process's exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = log_filter(cli.verbose);
    let filter = match tracing_subscriber::EnvFilter::try_new(&filter) {
        Ok(filter) => filter,
        Err(e) => {
            // The user's filter, without the directives added for the noisy crates.
            let added = NOISY
                .iter()
                .filter_map(|c| filter.find(&format!(",{c}=warn")));
            let given = &filter[..added.min().unwrap_or(filter.len())];
            eprintln!("error: the log filter {given:?} (from WEIR_LOG or RUST_LOG): {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    match cli.command {
        Command::Dev {
            pipeline,
            inputs,
            outputs,
            crate_dir,
            watch,
            build,
            config,
            once,
            full_build,
            compile,
        } => {
            compile.apply();
            let overrides = Overrides {
                inputs,
                outputs,
                config,
                // Development runs start from scratch and leave no checkpoints behind.
                no_checkpoints: true,
                ..Overrides::default()
            };
            let graph = match StageGraph::load(&pipeline, &overrides) {
                Ok(graph) => graph,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return ExitCode::from(2);
                }
            };
            let stop = stop_flag();
            if !graph.is_single() {
                if crate_dir.is_some() || watch.is_some() || build.is_some() || full_build {
                    eprintln!("error: --crate, --watch, --build and --full-build name one UDF's project; in a pipeline of several stages `weir dev` watches each stage's component: build a stage's UDF as usual and its new component is put to work");
                    return ExitCode::from(2);
                }
                return finished(crate::dev_graph::dev_graph(
                    &pipeline, &overrides, graph, once, stop,
                ));
            }
            let spec = graph.stages.into_iter().next().expect("one stage").spec;
            let config = crate::dev::DevConfig {
                project: ProjectArgs {
                    crate_dir,
                    watch,
                    build,
                },
                once,
                full_build,
            };
            finished(crate::dev::dev(&pipeline, &overrides, spec, config, stop))
        }
        Command::Build {
            pipeline,
            crate_dir,
        } => project_command(&pipeline, crate_dir, |spec, project| {
            let build = project.build.as_ref().ok_or_else(|| {
                anyhow::anyhow!("{}: no way to build it", spec.udf.path.display())
            })?;
            let started = std::time::Instant::now();
            build.run().map_err(|why| anyhow::anyhow!(why))?;
            let bytes = std::fs::metadata(&spec.udf.path)
                .with_context(|| format!("the build wrote no {}", spec.udf.path.display()))?
                .len();
            eprintln!(
                "weir build: wrote {} ({:.1} MB) in {:.1} s",
                spec.udf.path.display(),
                bytes as f64 / 1e6,
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }),
        Command::Test {
            pipeline,
            crate_dir,
        } => project_command(&pipeline, crate_dir, |_, project| {
            let test = project.test.as_ref().ok_or_else(|| {
                anyhow::anyhow!(
                    "the pipeline's [udf.dev] has no `test` command; add one, e.g. test = \"python3 -m unittest\""
                )
            })?;
            test.run()
                .map_err(|why| anyhow::anyhow!("the tests failed: {why}"))
        }),
        Command::Serve {
            pipelines,
            listen,
            data_dir,
            token,
            probation_calls,
            group,
            keep_versions,
            header_timeout,
            allowed_hosts,
            compile,
        } => {
            compile.apply();
            let config = weir_serve::ServeConfig {
                header_timeout,
                allowed_hosts,
                listen,
                data_dir,
                token,
                probation_calls,
                pipelines,
                group,
                keep_versions,
            };
            match weir_serve::serve(config) {
                Err(e) if e.is::<weir_serve::DataDirInUse>() => {
                    eprintln!("error: {e:#}");
                    ExitCode::from(2)
                }
                result => finished(result),
            }
        }
        Command::Deploy {
            file,
            pipeline,
            stage,
            wait,
            server,
        } => {
            let client = server.client();
            answer(match pipeline {
                Some(name) => client.deploy_udf(&name, stage.as_deref(), &file, wait),
                None => client.create(&file),
            })
        }
        Command::Status {
            group: Some(group),
            brokers,
            ..
        } => finished(
            weir_cluster::status::group_status(&group, brokers.as_deref().unwrap_or_default())
                .map(|report| print!("{report}")),
        ),
        Command::Status {
            name,
            server,
            output,
            ..
        } => {
            let status = server.client().status(name.as_deref());
            match output {
                StatusFormat::Json => answer(status),
                StatusFormat::Table => finished(status.map(|value| {
                    print!("{}", crate::client::status_table(&value));
                })),
            }
        }
        Command::Rollback {
            name,
            stage,
            server,
        } => answer(server.client().rollback(&name, stage.as_deref())),
        Command::Stop { name, server } => answer(server.client().stop(&name)),
        Command::New {
            name,
            lang,
            dir,
            sdk,
        } => {
            let project = crate::new::NewProject {
                name,
                lang,
                dir,
                sdk,
            };
            finished(crate::new::create(&project).map(|dir| {
                eprintln!("weir: created {}", dir.display());
                eprintln!("{}", crate::new::next_steps(&dir));
            }))
        }
        Command::Produce {
            input,
            brokers,
            topic,
            key,
        } => finished(
            crate::produce::produce(&brokers, &topic, &input, key.as_deref())
                .map(|n| eprintln!("weir: produced {n} records to topic {topic:?}")),
        ),
        Command::Run {
            pipeline,
            inputs,
            outputs,
            config,
            udf,
            dead_letter,
            state_dir,
            checkpoint_interval,
            no_checkpoints,
            parallelism,
            fresh,
            quiet,
            fail_on_dead_letters,
            group,
            compile,
        } => {
            compile.apply();
            let overrides = Overrides {
                inputs,
                outputs,
                config,
                udf,
                dead_letter,
                state_dir,
                checkpoint_interval,
                no_checkpoints,
                parallelism,
            };
            let graph = match StageGraph::load(&pipeline, &overrides) {
                Ok(graph) => graph,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return ExitCode::from(2);
                }
            };
            for stage in &graph.stages {
                if !stage.spec.udf.path.exists() {
                    eprintln!("error: {}", missing_component(&pipeline, &stage.spec));
                    return ExitCode::FAILURE;
                }
            }
            let stop = stop_flag();
            if !graph.is_single() {
                if group.is_some() {
                    eprintln!("error: a pipeline of several stages cannot run in a --group yet (its stages would need repartition topics between the processes); run it with `weir run` alone");
                    return ExitCode::from(2);
                }
                let options = RunOptions {
                    progress: false,
                    stop: Some(stop),
                    fresh,
                    control: None,
                };
                return finished_graph(run_graph(&graph, &options), quiet, fail_on_dead_letters);
            }
            let spec = graph.stages.into_iter().next().expect("one stage").spec;
            if let Some(group) = group {
                if fail_on_dead_letters {
                    eprintln!("error: --fail-on-dead-letters is for runs that end; a --group member runs until it is stopped (watch weir_dead_letters_total instead)");
                    return ExitCode::from(2);
                }
                return finished(weir_cluster::run_in_group(&spec, &group, stop));
            }
            let options = RunOptions {
                progress: !quiet,
                stop: Some(stop),
                fresh,
                control: None,
            };
            match run(&spec, &options) {
                Ok(report) => {
                    if !quiet {
                        eprintln!("{}", report.summary());
                    }
                    if fail_on_dead_letters && report.dead_letters > 0 {
                        eprintln!(
                            "error: {} records went to the dead letters ({}) and --fail-on-dead-letters was given",
                            report.dead_letters, report.dead_letter_path
                        );
                        return ExitCode::from(3);
                    }
                    ExitCode::SUCCESS
                }
                Err(failure) => {
                    eprintln!("error: {failure}");
                    if let Some(report) = &failure.report {
                        eprintln!("{}", report.summary());
                    }
                    if failure.command_line {
                        ExitCode::from(2)
                    } else {
                        ExitCode::FAILURE
                    }
                }
            }
        }
    }
}

/// The exit of `weir run` on a pipeline of several stages: every stage's summary, and
/// the first stage's failure that was not caused by another's.
fn finished_graph(
    result: Result<GraphReport, GraphFailure>,
    quiet: bool,
    fail_on_dead_letters: bool,
) -> ExitCode {
    match result {
        Ok(report) => {
            if !quiet {
                eprint!("{}", report.summary());
            }
            let dead_letters = report.dead_letters();
            if fail_on_dead_letters && dead_letters > 0 {
                eprintln!(
                    "error: {dead_letters} records went to the dead letters and --fail-on-dead-letters was given"
                );
                return ExitCode::from(3);
            }
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("error: {failure}");
            eprint!("{}", failure.report.summary());
            if failure.failure.command_line {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
