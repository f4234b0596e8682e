//! Watermarks: how far event time has certainly progressed.
//!
//! Each source runs a bounded-out-of-orderness generator (Flink's
//! `forBoundedOutOfOrderness`): after each record its watermark becomes
//! `max timestamp seen - out_of_orderness - 1 ms` if that is larger, so a record whose
//! timestamp equals the newest one seen is never late, even at `out_of_orderness = 0`
//! (Flink's `forMonotonousTimestamps`). The pipeline's watermark
//! is the minimum over its sources; a source that has ended no longer holds it back, and
//! once every source has ended the watermark is [`END_OF_TIME`]. A source marked idle
//! (no record for its `idle_timeout`) does not hold it back either until it delivers
//! again; when every source left is idle, the watermark moves to the largest of theirs,
//! as Flink's `StatusWatermarkValve` does.

use super::{Timestamp, END_OF_TIME, MIN_WATERMARK};

/// One source's watermark generator.
#[derive(Debug, Clone)]
pub struct BoundedOutOfOrderness {
    out_of_orderness: Timestamp,
    watermark: Timestamp,
    ended: bool,
    idle: bool,
    /// The input is another stage's output: its watermark is that stage's, handed on
    /// in markers, and the records' own timestamps do not move it.
    follows_upstream: bool,
}

impl BoundedOutOfOrderness {
    /// A generator that trails the largest timestamp seen by `out_of_orderness_ms`
    /// milliseconds and one more, starting at [`MIN_WATERMARK`] (nothing seen yet).
    pub fn new(out_of_orderness_ms: Timestamp) -> Self {
        Self {
            out_of_orderness: out_of_orderness_ms,
            watermark: MIN_WATERMARK,
            ended: false,
            idle: false,
            follows_upstream: false,
        }
    }

    /// A generator for an input that is another stage's output: its watermark is the
    /// upstream stage's, as the markers between the records say (Flink's rule: a
    /// downstream operator's watermark is the minimum of its inputs'), and a record's
    /// timestamp never moves it.
    pub fn upstream() -> Self {
        Self {
            follows_upstream: true,
            ..Self::new(0)
        }
    }

    /// The watermark from the timestamps seen, ended or not (what a checkpoint keeps).
    pub fn seen(&self) -> Timestamp {
        self.watermark
    }

    /// Accounts for a record's timestamp (nothing for an input that follows its
    /// upstream's watermark).
    pub fn observe(&mut self, ts: Timestamp) {
        if self.follows_upstream {
            return;
        }
        self.advance_past(ts);
    }

    /// Accounts for a marker: the largest event time read (a repartition topic's), or
    /// for an input that follows its upstream, the upstream's watermark itself.
    pub fn progress(&mut self, ts: Timestamp) {
        if self.follows_upstream {
            self.watermark = self.watermark.max(ts);
        } else {
            self.advance_past(ts);
        }
    }

    fn advance_past(&mut self, ts: Timestamp) {
        let candidate = ts.saturating_sub(self.out_of_orderness).saturating_sub(1);
        if candidate > self.watermark {
            self.watermark = candidate;
        }
    }

    /// Marks the source ended: from now on [`current`](Self::current) is
    /// [`END_OF_TIME`].
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// Whether [`end`](Self::end) was called.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// The source's own watermark ([`END_OF_TIME`] once ended).
    pub fn current(&self) -> Timestamp {
        if self.ended {
            END_OF_TIME
        } else {
            self.watermark
        }
    }
}

/// The pipeline's watermark: the minimum over its sources' watermarks.
#[derive(Debug, Clone)]
pub struct PipelineWatermark {
    sources: Vec<BoundedOutOfOrderness>,
    current: Timestamp,
}

impl PipelineWatermark {
    /// The watermark over `sources`, one generator per source in the order the
    /// pipeline indexes them (the `source` argument of the other methods).
    pub fn new(sources: Vec<BoundedOutOfOrderness>) -> Self {
        let mut this = Self {
            sources,
            current: MIN_WATERMARK,
        };
        this.current = this.combined();
        this
    }

    /// The pipeline's watermark now. It never moves back, except by
    /// [`restore`](Self::restore).
    pub fn current(&self) -> Timestamp {
        self.current
    }

    /// Records a timestamp of source `source`; returns the new pipeline watermark if it advanced.
    pub fn observe(&mut self, source: usize, ts: Timestamp) -> Option<Timestamp> {
        self.sources[source].observe(ts);
        self.recompute()
    }

    /// Records a marker of source `source` (see [`BoundedOutOfOrderness::progress`]);
    /// returns the new pipeline watermark if it advanced.
    pub fn progress(&mut self, source: usize, ts: Timestamp) -> Option<Timestamp> {
        self.sources[source].progress(ts);
        self.recompute()
    }

    /// Makes source `source` follow its upstream's watermark markers (see
    /// [`BoundedOutOfOrderness::upstream`]); called before anything is observed.
    pub fn follow_upstream(&mut self, source: usize) {
        self.sources[source] = BoundedOutOfOrderness::upstream();
    }

    /// Marks source `source` as ended; returns the new watermark if it advanced.
    pub fn end(&mut self, source: usize) -> Option<Timestamp> {
        self.sources[source].end();
        self.recompute()
    }

    /// Marks source `source` idle (or active again); returns the new watermark if it advanced.
    pub fn set_idle(&mut self, source: usize, idle: bool) -> Option<Timestamp> {
        self.sources[source].idle = idle;
        self.recompute()
    }

    /// The generator of source `source`.
    ///
    /// # Panics
    ///
    /// If there is no source `source`.
    pub fn source(&self, source: usize) -> &BoundedOutOfOrderness {
        &self.sources[source]
    }

    /// Puts back checkpointed watermarks: each source's, and the pipeline's.
    pub fn restore(&mut self, sources: &[Option<Timestamp>], current: Timestamp) {
        for (generator, seen) in self.sources.iter_mut().zip(sources) {
            if let Some(seen) = seen {
                generator.watermark = *seen;
            }
        }
        self.current = current;
    }

    /// Whether every source has ended (true also when there are none).
    pub fn all_ended(&self) -> bool {
        self.sources.iter().all(BoundedOutOfOrderness::is_ended)
    }

    fn combined(&self) -> Timestamp {
        let active = self.sources.iter().filter(|s| !s.ended && !s.idle);
        if let Some(min) = active.map(|s| s.watermark).min() {
            return min;
        }
        // Nothing active: the idle ones' largest watermark, or the end once all ended.
        self.sources
            .iter()
            .filter(|s| !s.ended)
            .map(|s| s.watermark)
            .max()
            .unwrap_or(END_OF_TIME)
    }

    fn recompute(&mut self) -> Option<Timestamp> {
        let combined = self.combined();
        (combined > self.current).then(|| {
            self.current = combined;
            combined
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_that_follows_its_upstream_moves_only_with_the_markers() {
        let mut w = PipelineWatermark::new(vec![
            BoundedOutOfOrderness::upstream(),
            BoundedOutOfOrderness::new(10),
        ]);
        w.observe(1, 1_000);
        assert_eq!(
            w.observe(0, 5_000),
            None,
            "a record's timestamp does not move it"
        );
        assert_eq!(
            w.progress(0, 400),
            Some(400),
            "the upstream's watermark, as it is"
        );
        assert_eq!(w.progress(0, 300), None, "never back");
        assert_eq!(
            w.progress(0, 2_000),
            Some(989),
            "the other input holds it back"
        );
        assert_eq!(w.source(0).seen(), 2_000);
        w.progress(1, 1_500);
        assert_eq!(
            w.current(),
            1_489,
            "a repartition marker still trails by the bound"
        );
    }

    #[test]
    fn a_record_at_the_newest_timestamp_is_not_late_at_zero_out_of_orderness() {
        let mut wm = PipelineWatermark::new(vec![BoundedOutOfOrderness::new(0)]);
        assert_eq!(wm.observe(0, 1_000), Some(999));
        assert!(1_000 > wm.current(), "a second record at 1000 is on time");
        assert!(999 <= wm.current(), "one at 999 is late");
    }

    #[test]
    fn single_source_follows_max_minus_bound_minus_one_millisecond() {
        let mut wm = PipelineWatermark::new(vec![BoundedOutOfOrderness::new(5_000)]);
        assert_eq!(wm.current(), MIN_WATERMARK);
        assert_eq!(wm.observe(0, 10_000), Some(4_999));
        assert_eq!(
            wm.observe(0, 9_000),
            None,
            "an older record never moves it back"
        );
        assert_eq!(wm.observe(0, 10_000), None, "no advance, no event");
        assert_eq!(wm.observe(0, 12_000), Some(6_999));
        assert_eq!(wm.end(0), Some(END_OF_TIME));
        assert!(wm.all_ended());
    }

    #[test]
    fn minimum_over_sources_and_ended_sources_stop_holding_back() {
        let mut wm = PipelineWatermark::new(vec![
            BoundedOutOfOrderness::new(0),
            BoundedOutOfOrderness::new(1_000),
        ]);
        assert_eq!(wm.observe(0, 50_000), None, "source 1 has seen nothing yet");
        assert_eq!(wm.observe(1, 20_000), Some(18_999));
        assert_eq!(wm.observe(0, 60_000), None);
        assert_eq!(wm.end(1), Some(59_999));
        assert_eq!(wm.end(0), Some(END_OF_TIME));
    }

    #[test]
    fn idle_sources_stop_holding_back_until_they_deliver_again() {
        let mut wm = PipelineWatermark::new(vec![
            BoundedOutOfOrderness::new(0),
            BoundedOutOfOrderness::new(0),
            BoundedOutOfOrderness::new(0),
        ]);
        wm.observe(0, 100);
        wm.observe(1, 50);
        assert_eq!(wm.current(), MIN_WATERMARK, "source 2 has seen nothing");
        assert_eq!(wm.set_idle(2, true), Some(49));
        assert_eq!(wm.set_idle(1, true), Some(99));
        assert_eq!(
            wm.set_idle(0, true),
            None,
            "all idle: the largest, still 99"
        );
        wm.set_idle(2, false);
        assert_eq!(wm.observe(2, 30), None, "active again, but never backwards");
        assert_eq!(wm.current(), 99);
    }
}
