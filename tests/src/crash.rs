//! Crash loops: `weir run` killed with SIGKILL at random moments and restarted from the
//! same state directory, for the crash-safety tests (`tests/crash_recovery.rs`,
//! `tests/stage_graph.rs`).

use crate::gen::Rng;
use crate::{repo_root, weir, weir_bin};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `--parallelism N` for each of `parallelisms`: [`CrashLoop::each_run`] restarting at
/// another parallelism each time.
pub fn at_parallelisms(parallelisms: &[usize]) -> Vec<Vec<String>> {
    parallelisms
        .iter()
        .map(|p| vec!["--parallelism".to_string(), p.to_string()])
        .collect()
}

/// What the crashing runs went through.
#[derive(Debug, Default)]
pub struct Crashes {
    /// Kills that landed while a checkpoint existed, so the next run had to restore it.
    pub restored: usize,
    /// Kills in all.
    pub kills: usize,
}

/// The newest checkpoint file's name in `dir`, if any.
pub fn newest_checkpoint(dir: &Path) -> Option<String> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".weir"))
        .max()
}

/// How a crash loop runs `weir run`.
pub struct CrashLoop<'a> {
    /// The arguments (`run PIPELINE ...`); the loop adds `--checkpoint-interval 100ms`,
    /// `-q` and `--state-dir`, then the run's `each_run` arguments.
    pub args: &'a [String],
    /// Run `i` (the last one included) adds `each_run[i % len]` (none given: nothing), e.g.
    /// `--parallelism N`, or another file of the same pipeline.
    pub each_run: &'a [Vec<String>],
    /// The state directory.
    pub state: &'a Path,
    /// The folder whose newest checkpoint a kill waits for: `state`, or the last stage's
    /// folder in it for a pipeline of several stages.
    pub watch: &'a Path,
    /// What an uninterrupted run takes: a kill lands within a third of it after a new
    /// checkpoint.
    pub span: Duration,
    /// The seed of the kills' moments.
    pub seed: u64,
    /// The most kills (fewer if a run completes first).
    pub kills: usize,
}

impl CrashLoop<'_> {
    /// Runs `weir run` with checkpoints every 100 ms, killing it with SIGKILL at a random
    /// moment after it wrote a checkpoint of its own (so every kill leaves something to
    /// restore and every run makes progress), up to `kills` times, then runs it to
    /// completion.
    pub fn run(&self) -> Crashes {
        let mut rng = Rng::new(self.seed);
        let mut crashes = Crashes::default();
        let log = self.state.with_extension("log");
        let args = |run: usize| -> Vec<String> {
            let mut args = self.args.to_vec();
            args.extend(["--checkpoint-interval", "100ms", "-q", "--state-dir"].map(String::from));
            args.push(self.state.display().to_string());
            if !self.each_run.is_empty() {
                args.extend_from_slice(&self.each_run[run % self.each_run.len()]);
            }
            args
        };
        for run in 0..self.kills {
            let mut child = Command::new(weir_bin())
                .args(args(run))
                .current_dir(repo_root())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("start weir");
            let before = newest_checkpoint(self.watch);
            let limit = Instant::now() + Duration::from_secs(60);
            while newest_checkpoint(self.watch) == before && child.try_wait().unwrap().is_none() {
                if Instant::now() > limit {
                    child.kill().unwrap();
                    panic!(
                        "no checkpoint in {} within 60 s: {}",
                        self.watch.display(),
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let span_ms = self.span.as_millis().max(100) as u64;
            let deadline = Instant::now() + Duration::from_millis(rng.below(span_ms / 3));
            while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(5));
            }
            if let Some(status) = child.try_wait().unwrap() {
                let stderr = std::fs::read_to_string(&log).unwrap_or_default();
                assert!(status.success(), "a run failed: {stderr}");
                return crashes; // it completed before the kill
            }
            let had_checkpoint = newest_checkpoint(self.watch).is_some();
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            crashes.kills += 1;
            crashes.restored += usize::from(had_checkpoint);
        }
        let last = args(crashes.kills);
        weir(&last.iter().map(String::as_str).collect::<Vec<_>>()).assert_success();
        crashes
    }
}
