//! Watching a state directory while a run checkpoints into it. A run that completes
//! deletes its checkpoints, so their size can only be seen while it runs: a thread
//! samples the directory every 20 ms (a `read_dir` of a handful of files, far below the
//! noise of the figures it sits next to).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the checkpoint files of a state directory came to during a run.
#[derive(Debug, Default, Clone)]
pub struct StateDirUse {
    /// The most bytes of `checkpoint-*.weir` files present at once.
    pub peak_bytes: u64,
    /// The highest checkpoint epoch seen: the number of checkpoints taken (give or take
    /// one written in the last 20 ms of the run).
    pub checkpoints: u64,
    /// The largest size seen of each checkpoint file, by epoch.
    pub sizes: BTreeMap<u64, u64>,
}

impl StateDirUse {
    /// The largest checkpoint file.
    pub fn largest(&self) -> u64 {
        self.sizes.values().copied().max().unwrap_or(0)
    }
}

pub struct StateDirWatch {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<StateDirUse>,
}

impl StateDirWatch {
    /// Starts sampling `dir` (which need not exist yet).
    pub fn start(dir: &Path) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let dir: PathBuf = dir.to_path_buf();
        let handle = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut seen = StateDirUse::default();
                loop {
                    let done = stop.load(Ordering::Relaxed);
                    let (bytes, newest) = sample(&dir, &mut seen.sizes);
                    seen.peak_bytes = seen.peak_bytes.max(bytes);
                    seen.checkpoints = seen.checkpoints.max(newest);
                    if done {
                        return seen;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        Self { stop, handle }
    }

    /// Stops sampling; what was seen.
    pub fn finish(self) -> StateDirUse {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("the state directory watcher")
    }
}

/// Bytes of the checkpoint files in `dir`, and the newest epoch among them.
fn sample(dir: &Path, sizes: &mut BTreeMap<u64, u64>) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    let (mut bytes, mut newest) = (0, 0);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(epoch) = name
            .to_str()
            .and_then(|n| n.strip_prefix("checkpoint-"))
            .and_then(|n| n.strip_suffix(".weir"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        // A file removed between the listing and here counts as nothing.
        let len = entry.metadata().map_or(0, |m| m.len());
        bytes += len;
        let size = sizes.entry(epoch).or_default();
        *size = (*size).max(len);
        newest = newest.max(epoch);
    }
    (bytes, newest)
}

/// Removes `dir` if it exists, so that a watch starts from nothing.
pub fn clear(dir: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(anyhow::anyhow!("cannot remove {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}
