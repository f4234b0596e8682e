//! The figures of a run, and the summary printed at its end.

use std::time::Duration;

/// The figures of a finished (or failed) run.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// The pipeline's name.
    pub pipeline: String,
    /// The running UDF's name.
    pub udf: String,
    /// Per source: name, records read (including dead letters).
    pub sources: Vec<(String, u64)>,
    /// Per output: name, records emitted.
    pub outputs: Vec<(String, u64)>,
    /// Elements processed (a resumed run counts those before its checkpoint).
    pub processed: u64,
    /// Records and timers written to the dead-letter output (a resumed run counts those
    /// before its checkpoint).
    pub dead_letters: u64,
    /// Why this run's records and timers went to the dead letters.
    pub dead_letter_causes: DeadLetterCauses,
    /// Failed UDF calls the run survived: rolled back, dead-lettered or retried.
    pub udf_errors: u64,
    /// Calls made again after a failure (`on_error = "retry"`).
    pub udf_retries: u64,
    /// Records and timers the UDF rejected itself.
    pub rejected: u64,
    /// Where the dead-letter output is written.
    pub dead_letter_path: String,
    /// Elements that arrived at or below the watermark.
    pub late: u64,
    /// Event-time timers fired.
    pub event_timers: u64,
    /// Processing-time timers fired.
    pub processing_timers: u64,
    /// Wall time of this run, from opening it to its end.
    pub elapsed: Duration,
    /// The process's peak resident memory, where the OS tells it (Linux).
    pub peak_rss_bytes: Option<u64>,
    /// Asked to stop ([`RunOptions::stop`](crate::options::RunOptions::stop)) before the input
    /// ended: pending timers were not fired.
    pub interrupted: bool,
    /// Every input had ended: an interrupted run was stopped while the end of input's
    /// timers fired.
    pub input_ended: bool,
    /// The run was stopped while a record's failed call waited to be retried (what
    /// failed): no checkpoint was taken, so the run that resumes reads it again.
    pub stopped_before_retry: Option<String>,
    /// The checkpoint the run resumed from, if any.
    pub resumed_from: Option<u64>,
    /// Checkpoints this run took.
    pub checkpoints: u64,
    /// The longest time one checkpoint held processing up.
    pub longest_checkpoint_pause: Duration,
    /// With the `disk` state backend: what its stores held at the end, over the shards.
    pub state_store: Option<weir_core::state::SpillFigures>,
}

/// Why a run's records and timers went to the dead-letter output, one count per cause
/// (this run's: a resumed run's earlier ones are in [`RunReport::dead_letters`] only).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetterCauses {
    /// Records whose key or event time could not be decoded.
    pub undecodable: u64,
    /// Records and timers the UDF rejected itself.
    pub rejected: u64,
    /// Records and timers the UDF failed on (`on_error = "dead-letter"`, or after retries).
    pub failed: u64,
    /// Records and timers whose key's state the UDF could not read.
    pub unreadable_state: u64,
}

impl DeadLetterCauses {
    /// Every cause's count, in all.
    pub fn total(&self) -> u64 {
        self.undecodable + self.rejected + self.failed + self.unreadable_state
    }

    /// The causes that sent any, with their counts: `3 undecodable, 1 rejected by the UDF`.
    pub fn describe(&self) -> String {
        [
            (
                self.undecodable,
                "with a key or event time that cannot be decoded",
            ),
            (self.rejected, "rejected by the UDF"),
            (self.failed, "the UDF failed on"),
            (self.unreadable_state, "whose state the UDF cannot read"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, why)| format!("{n} {why}"))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

impl RunReport {
    /// Elements processed per second of [`elapsed`](Self::elapsed).
    pub fn records_per_second(&self) -> f64 {
        self.processed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The summary printed on stderr at the end of a run.
    /// Its first line names the pipeline and says how many records and timers went to
    /// the dead letters and why, if any did: a run that dropped records says so first.
    pub fn summary(&self) -> String {
        let mut s = format!("weir: pipeline {:?} (UDF {:?})", self.pipeline, self.udf);
        if self.dead_letters > 0 {
            let causes = &self.dead_letter_causes;
            let mut why = causes.describe();
            let earlier = self.dead_letters.saturating_sub(causes.total());
            if earlier > 0 {
                if !why.is_empty() {
                    why += ", ";
                }
                why += &format!("{earlier} before the checkpoint this run resumed from");
            }
            let records = if self.dead_letters == 1 {
                "record"
            } else {
                "records"
            };
            s += &format!(
                ": {} {records} went to the dead letters ({why}), see {}",
                self.dead_letters, self.dead_letter_path
            );
        }
        s += "\n";
        for (name, read) in &self.sources {
            s += &format!("  source {name}: {read} records read\n");
        }
        for (name, emitted) in &self.outputs {
            s += &format!("  output {name}: {emitted} records emitted\n");
        }
        s += &format!(
            "  dead letters: {} ({})\n",
            self.dead_letters, self.dead_letter_path
        );
        if self.udf_errors > 0 {
            s += &format!(
                "  UDF errors survived: {} ({} retries)\n",
                self.udf_errors, self.udf_retries
            );
        }
        if self.rejected > 0 {
            s += &format!("  rejected by the UDF: {}\n", self.rejected);
        }
        s += &format!("  late records: {}\n", self.late);
        s += &format!(
            "  timers fired: {} event-time, {} processing-time\n",
            self.event_timers, self.processing_timers
        );
        if let Some(store) = &self.state_store {
            s += &format!(
                "  state store (disk backend): {} keys on disk only; {} loaded back, {} written; {:.1} KiB in memory (cache {:.1} KiB), {:.1} MB on disk; keys found in memory {:.1}%; the stores' own memory {:.1} MB\n",
                store.dormant_keys,
                store.loads,
                store.saves,
                store.resident_bytes as f64 / 1024.0,
                store.budget_bytes as f64 / 1024.0,
                store.disk_bytes as f64 / 1e6,
                store.hit_ratio() * 100.0,
                store.store_memory_bytes as f64 / 1e6
            );
        }
        if let Some(epoch) = self.resumed_from {
            s += &format!("  resumed from checkpoint {epoch}\n");
        }
        if self.checkpoints > 0 {
            s += &format!(
                "  checkpoints: {} taken, longest pause {:.1} ms\n",
                self.checkpoints,
                self.longest_checkpoint_pause.as_secs_f64() * 1e3
            );
        }
        if let Some(failed) = &self.stopped_before_retry {
            s += &format!(
                "  stopped while waiting to retry a failed call, so no checkpoint was taken: the run that resumes reads the record again ({failed})\n"
            );
        } else if self.interrupted && self.input_ended {
            s += "  stopped after the input ended, while its timers fired: those not fired yet fire when the run resumes\n";
        } else if self.interrupted {
            s += "  stopped before the input ended: pending timers were not fired\n";
        }
        if let Some(peak) = self.peak_rss_bytes {
            s += &format!("  peak memory (RSS): {:.1} MB\n", peak as f64 / 1e6);
        }
        s += &format!(
            "  processed {} records in {:.3} s ({:.0} records/s)",
            self.processed,
            self.elapsed.as_secs_f64(),
            self.records_per_second()
        );
        s
    }
}

/// The peak resident set size of this process (`VmHWM`), on Linux.
pub(crate) fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The progress line's text after the record count: the rate, then, for inputs of known
/// size (`read` = bytes read, bytes in all), the share read and the time left at the
/// rate so far, then the watermark.
pub(crate) fn progress_message(
    processed: u64,
    elapsed: Duration,
    read: Option<(u64, u64)>,
    watermark: &str,
) -> String {
    let seconds = elapsed.as_secs_f64().max(1e-3);
    let rate = processed as f64 / seconds;
    let share = match read {
        Some((read, total)) if total > 0 && read > 0 => {
            let left = seconds * (total.saturating_sub(read)) as f64 / read as f64;
            let left = left.round() as u64;
            format!(
                "{:.0}% of {:.1} MB, ETA {}:{:02}, ",
                100.0 * read as f64 / total as f64,
                total as f64 / 1e6,
                left / 60,
                left % 60
            )
        }
        _ => String::new(),
    };
    format!("{rate:.0} records/s, {share}watermark {watermark}")
}

/// The progress line `weir run` shows on a terminal.
pub(crate) fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {human_pos} records, {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

#[cfg(test)]
mod progress_tests {
    use super::*;

    #[test]
    fn a_file_of_known_size_shows_the_share_read_and_the_time_left() {
        let line = progress_message(
            200_000,
            Duration::from_secs(4),
            Some((25_000_000, 100_000_000)),
            "2026-11-29 10:00:00.000",
        );
        assert_eq!(
            line,
            "50000 records/s, 25% of 100.0 MB, ETA 0:12, watermark 2026-11-29 10:00:00.000"
        );
    }

    #[test]
    fn a_live_input_shows_no_share() {
        let line = progress_message(100, Duration::from_secs(1), None, "none");
        assert_eq!(line, "100 records/s, watermark none");
    }
}

#[cfg(test)]
mod summary_tests {
    use super::*;

    fn report(dead_letters: u64, causes: DeadLetterCauses) -> RunReport {
        RunReport {
            pipeline: "p".into(),
            udf: "u".into(),
            dead_letters,
            dead_letter_causes: causes,
            dead_letter_path: "p.dead-letter.jsonl".into(),
            ..RunReport::default()
        }
    }

    #[test]
    fn the_first_line_names_the_pipeline_alone_when_nothing_was_dropped() {
        let summary = report(0, DeadLetterCauses::default()).summary();
        assert_eq!(
            summary.lines().next(),
            Some(r#"weir: pipeline "p" (UDF "u")"#)
        );
    }

    #[test]
    fn the_first_line_says_how_many_records_were_dropped_and_why() {
        let causes = DeadLetterCauses {
            undecodable: 1,
            rejected: 2,
            failed: 0,
            unreadable_state: 4,
        };
        let summary = report(7, causes.clone()).summary();
        assert_eq!(
            summary.lines().next(),
            Some(
                r#"weir: pipeline "p" (UDF "u"): 7 records went to the dead letters (1 with a key or event time that cannot be decoded, 2 rejected by the UDF, 4 whose state the UDF cannot read), see p.dead-letter.jsonl"#
            )
        );
        // A resumed run counts the dead letters before its checkpoint, without a cause.
        let resumed = report(10, causes).summary();
        assert!(
            resumed.lines().next().unwrap().contains(
                "10 records went to the dead letters (1 with a key or event time that cannot be decoded, 2 rejected by the UDF, 4 whose state the UDF cannot read, 3 before the checkpoint this run resumed from)"
            ),
            "{resumed}"
        );
    }
}
