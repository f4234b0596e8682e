//! The run loop: a [`Runner`] opens what the plan names, then reads, merges and
//! processes until every input has ended or it is asked to stop.

use crate::checkpointing::{Checkpoints, Cut};
use crate::control::{RunControl, RunState};
use crate::failures::{Handling, Site, UdfFailures};
use crate::inputs::{Inputs, Pending, Read};
use crate::options::{CommandLineMistake, RunFailure, RunOptions};
use crate::report::{peak_rss_bytes, progress_bar, progress_message, DeadLetterCauses, RunReport};
use crate::steering::{apply_swap, StatusPublisher, UdfVersions};
use crate::udf::load_udf;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_checkpoint::aligned::OnStop;
use weir_core::identity::UdfIdentity;
use weir_core::time::{display, wall_clock_ms};
use weir_engine::operator::{Activity, KeyedOperator, OperatorCounters, OperatorError};
use weir_engine::runtime::ProcessFunction;
use weir_engine::runtime::{ElementRef, InitInfo};
use weir_engine::stage::{KeyedStage, ShardResult};
use weir_io::sink::DeadLetters;
use weir_pipeline::PipelineSpec;

/// How long a root stage stopping in step waits before it asks again whether the
/// graph's last epoch is complete.
const STOP_WAIT_POLL: Duration = Duration::from_millis(2);

/// One run of a pipeline, from opening its sources to its report.
pub(crate) struct Runner {
    pub(crate) pipeline: String,
    /// The run was stopped before its input ended, or before the end of input's timers
    /// had all fired.
    pub(crate) interrupted: bool,
    /// A stop request ended the firing of the end of input's timers
    /// ([`OperatorError::Stopped`]); the run stops as soon as that reaches its loop.
    pub(crate) stopped_in_timers: bool,
    /// Set when a stop came while a record's failed call waited to be retried: what
    /// failed. The run then ends without a checkpoint (see [`Runner::stop_before_retry`]).
    pub(crate) stopped_before_retry: Option<String>,
    pub(crate) inputs: Inputs,
    /// The pipeline's keyed stage: its shards, their threads and shared sinks.
    pub(crate) stage: KeyedStage,
    /// The shard the run drives on its own between two runs of records (see
    /// [`Runner::each_shard`]): 0 except while it goes through them.
    pub(crate) active: usize,
    /// The UDF's outputs, in id order (each routed to the sink at the same index).
    pub(crate) outputs: Vec<String>,
    pub(crate) dead_letters: DeadLetters,
    /// Records of this run whose key or event time could not be decoded (each went to
    /// the dead letters).
    pub(crate) undecodable: u64,
    pub(crate) checkpoints: Checkpoints,
    /// The UDF version running, and the one a swap replaced.
    pub(crate) udf: UdfVersions,
    /// What the UDF's `init` is given (again, when a new version is swapped in).
    pub(crate) init_info: InitInfo,
    /// Set when run under a `RunControl` (`weir serve`, `weir dev`).
    pub(crate) control: Option<Arc<RunControl>>,
    pub(crate) status: StatusPublisher,
    /// What `[udf] on_error` says, and the failures the run survived so far.
    pub(crate) failures: UdfFailures,
    /// The watermark last handed to the sinks, when an output feeds another stage
    /// (`None` otherwise: no sink wants it).
    pub(crate) forwarded: Option<weir_core::time::Timestamp>,
    /// Rollbacks so far: a shard's failure from the parallel part that a rollback (for
    /// another shard's) came after was made by the version rolled back.
    pub(crate) rollbacks: u64,
}

impl Runner {
    /// Reads, merges and processes until every input has ended (then fires what is
    /// left and removes the checkpoints) or `options.stop` is set (then checkpoints
    /// and stops without firing pending timers).
    pub(crate) fn run(&mut self, options: &RunOptions) -> anyhow::Result<()> {
        let progress = (options.progress && std::io::stderr().is_terminal()).then(progress_bar);
        let mut chunk: Vec<(usize, Pending)> = Vec::with_capacity(self.inputs.run_size());
        let mut reported = 0;
        let stopped = || {
            options
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed))
        };
        loop {
            self.steer(options);
            self.apply_progress()?;
            // A stop or a checkpoint waits for what was read ahead to be processed, so
            // that the sources' positions are exactly what the state has seen. A stage
            // reading other stages of its graph goes on under a stop, checkpointing at
            // their barriers, until they stopped (`weir_checkpoint::aligned`).
            let stopping = stopped();
            let reading_on = stopping
                && self.checkpoints.in_step()
                && self.inputs.reads_stages()
                && !self.inputs.upstreams_stopped();
            let checkpoint_due = self.checkpoints.is_due(&self.inputs);
            let draining = (stopping && !reading_on) || checkpoint_due;
            if draining && self.inputs.drained() {
                if stopping && !reading_on {
                    match self.checkpoints.on_stop(self.inputs.reads_stages()) {
                        OnStop::Stop => return self.stop(progress),
                        OnStop::Checkpoint => {
                            self.take_checkpoint()?;
                            self.checkpoints.taken_on_stop += 1;
                        }
                        OnStop::Wait => {
                            // Its own part first: a write that failed ends the run here.
                            self.checkpoints.commit_durable(&mut self.inputs)?;
                            std::thread::sleep(STOP_WAIT_POLL);
                        }
                    }
                    continue;
                }
                self.take_checkpoint()?;
            }
            if !draining {
                self.fill()?;
                self.update_idleness()?;
            }
            self.end_drained_inputs()?;
            if self.stopped_in_timers {
                return self.stop(progress);
            }
            if self.inputs.all_ended() {
                break;
            }
            self.forward_watermark()?;
            self.inputs.take_chunk(&mut chunk);
            if chunk.is_empty() {
                // Live input is idle: fire what is due and show what was written.
                self.fire_processing_timers()?;
                self.flush_sinks()?;
                self.dead_letters.flush()?;
                continue;
            }
            // A stop or a checkpoint waits for the queues to drain: no reading ahead then.
            self.process_chunk(&chunk, !draining)?;
            if self.stopped_before_retry.is_some() {
                return self.stop_before_retry(progress);
            }
            for (_, pending) in chunk.drain(..) {
                self.inputs.recycle(pending.record);
            }
            if self
                .stage
                .shards()
                .any(KeyedOperator::has_processing_timers)
            {
                self.fire_processing_timers()?;
            }
            if let Some(bar) = &progress {
                let processed = self.counters().elements;
                if processed - reported >= 65_536 {
                    reported = processed;
                    bar.set_position(processed);
                    let read: Option<Vec<(u64, u64)>> = self
                        .inputs
                        .sources()
                        .iter()
                        .map(|slot| slot.source.bytes_read())
                        .collect();
                    let read = read.map(|all| {
                        all.iter()
                            .fold((0, 0), |(r, t), (read, total)| (r + read, t + total))
                    });
                    bar.set_message(progress_message(
                        processed,
                        bar.elapsed(),
                        read,
                        &display(self.stage.watermark()),
                    ));
                }
            }
        }
        self.each_shard(|run| {
            let finished = run.driven().finish();
            run.fire_through(finished, KeyedOperator::finish)
        })?;
        if self.stopped_in_timers {
            return self.stop(progress);
        }
        let last = self.take_final_section(&stopped)?;
        self.finish_shared_sinks()?;
        self.dead_letters.flush()?;
        // Everything read is in the sinks: sources with a position store of their own
        // (Kafka groups) record the end, so a later `startup = "committed"` goes on from it.
        for slot in self.inputs.sources_mut() {
            let positions = slot.source.positions();
            slot.source.commit(&positions)?;
        }
        // The run is complete: nothing to resume, and a new run starts from scratch. (A
        // stage of several leaves that to the graph, once every stage completed.)
        self.checkpoints.completed(last)?;
        if let Some(bar) = progress {
            bar.finish_and_clear();
        }
        Ok(())
    }

    /// Takes a checkpoint (if checkpoints are on) of everything processed so far. Called
    /// between two runs of records, with every read-ahead queue empty.
    fn take_checkpoint(&mut self) -> anyhow::Result<()> {
        self.take_section(false)
    }

    /// Takes a checkpoint; `finished`: the run completed, and it is a stage's final
    /// section (`weir_checkpoint::aligned`).
    fn take_section(&mut self, finished: bool) -> anyhow::Result<()> {
        self.checkpoints.take(Cut {
            pipeline: &self.pipeline,
            udf: &self.udf.current,
            outputs: &self.outputs,
            stage: &mut self.stage,
            inputs: &mut self.inputs,
            dead_letters: &mut self.dead_letters,
            finished,
        })
    }

    /// A stage of several whose run completed (the end of input's timers fired) takes its
    /// final section in step, once the epoch before it is complete: it stands for the
    /// stage in every later epoch, so the stages still running checkpoint on. Returns
    /// whether it was taken: not under a stop request, once the graph's epochs ended (a
    /// stage failed), nor in a run of one stage.
    fn take_final_section(&mut self, stopped: &dyn Fn() -> bool) -> anyhow::Result<bool> {
        if !self.checkpoints.in_step() {
            return Ok(false);
        }
        // What the end of input emitted goes on before the barrier, while this waits.
        self.flush_sinks()?;
        loop {
            match self.checkpoints.on_complete() {
                OnStop::Stop => return Ok(false),
                _ if stopped() => return Ok(false),
                OnStop::Checkpoint => {
                    self.take_section(true)?;
                    if let Some(last) = self.checkpoints.history.back() {
                        tracing::info!(
                            "stage {:?} completed: its final checkpoint {} stands for it while the other stages run on",
                            self.pipeline,
                            last.epoch
                        );
                    }
                    return Ok(true);
                }
                OnStop::Wait => {
                    self.checkpoints.commit_durable(&mut self.inputs)?;
                    std::thread::sleep(STOP_WAIT_POLL);
                }
            }
        }
    }

    /// Ends the run on a stop request that came while a record's failed call waited to
    /// be retried. Its source has moved past it, so a checkpoint now would lose it: none
    /// is taken, and the run ends as a crash would, with nothing committed after the
    /// last checkpoint. The run that resumes from that checkpoint reads the record again
    /// (the sinks are cut back to it), so it is retried, not dropped.
    fn stop_before_retry(
        &mut self,
        progress: Option<indicatif::ProgressBar>,
    ) -> anyhow::Result<()> {
        self.interrupted = true;
        // A stage of several takes no last checkpoint in step: the others stop without.
        self.checkpoints.give_up();
        // The last checkpoint taken is what the run resumes from: made durable, with the
        // positions it holds committed where sources keep them.
        self.checkpoints.commit_durable(&mut self.inputs)?;
        if let Some(message) = &self.stopped_before_retry {
            tracing::warn!(
                "stopped while waiting to retry: {message}; no checkpoint was taken, so the run that resumes reads this record again"
            );
        }
        if let Some(bar) = progress {
            bar.finish_and_clear();
        }
        Ok(())
    }

    /// Ends the run on a stop request, between two runs of records or between two of
    /// the end of input's timers: like Flink's stop-with-savepoint, pending timers are
    /// not fired; a checkpoint keeps them (they fire when the run resumes), and what
    /// was emitted is written out.
    ///
    /// A stage of several checkpoints only in step with the others: its last checkpoint
    /// was taken already, in step (see [`Runner::run`]), so it stops as a crash would
    /// after it. A root stage that took none since the stop (it stopped during the end
    /// of input's timers, or a stage ended) says so: no epoch completes again, and the
    /// graph resumes from the last one every stage completed.
    fn stop(&mut self, progress: Option<indicatif::ProgressBar>) -> anyhow::Result<()> {
        if self.checkpoints.in_step() {
            self.interrupted = true;
            if !self.inputs.reads_stages() && self.checkpoints.taken_on_stop == 0 {
                self.checkpoints.give_up();
            }
            self.checkpoints.commit_durable(&mut self.inputs)?;
            if let Some(bar) = progress {
                bar.finish_and_clear();
            }
            return Ok(());
        }
        self.take_checkpoint()?;
        self.interrupted = true;
        self.checkpoints.commit_durable(&mut self.inputs)?;
        self.each_shard(|run| {
            run.driven()
                .close_sinks()
                .map_err(|e| run.describe(&e, None))
        })?;
        self.finish_shared_sinks()?;
        self.dead_letters.flush()?;
        if let Some(bar) = progress {
            bar.finish_and_clear();
        }
        Ok(())
    }

    /// Hands a chunk of records to the operator. A record whose call failed is dealt
    /// with as [`Runner::on_failure`] decides: sent to the dead letters (the rest of the
    /// chunk goes on), tried again, or the end of the run, with a message naming it.
    fn process_chunk(
        &mut self,
        chunk: &[(usize, Pending)],
        read_ahead: bool,
    ) -> anyhow::Result<()> {
        let elements: Vec<(usize, ElementRef<'_>)> = chunk
            .iter()
            .map(|(input, p)| {
                let element = ElementRef {
                    input: self.inputs.input(*input).input_index,
                    key: p.key(),
                    group: p.group,
                    value: &p.record.data,
                    timestamp: p.timestamp,
                };
                (*input, element)
            })
            .collect();
        // While the shards work, this thread reads ahead; what it read that needs the
        // operators (records that cannot be decoded, inputs that deliver again) waits.
        let inputs = &mut self.inputs;
        let made_at = self.rollbacks;
        let (results, read) = self.stage.process(&elements, move || {
            let mut read = Vec::new();
            if read_ahead {
                inputs.read_ahead(&mut read)?;
            }
            anyhow::Ok(read)
        });
        for read in read? {
            self.took(read)?;
        }
        // A shard that failed goes on from its failure on its own, as at parallelism 1.
        for (shard, result) in results.into_iter().enumerate() {
            if let Err(failure) = result {
                self.active = shard;
                let outcome = self.process_from(chunk, &elements, Some((failure, made_at)));
                self.active = 0;
                outcome?;
                if self.stopped_before_retry.is_some() {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Hands `elements` (the chunk's) to the operator the run drives and deals with
    /// failures as [`Runner::process_chunk`] says; `failure` is where an earlier attempt
    /// at the whole run already failed (a shard's, in the parallel part), with the count
    /// of rollbacks when it was made.
    fn process_from(
        &mut self,
        chunk: &[(usize, Pending)],
        elements: &[(usize, ElementRef<'_>)],
        mut failure: Option<((usize, OperatorError), u64)>,
    ) -> anyhow::Result<()> {
        let mut start = 0;
        while start < elements.len() {
            let first: Option<(ShardResult, u64)> = failure
                .take()
                .map(|(failed, made_at)| (Err(failed), made_at));
            let Err((index, error)) = self.process_with_rollback(&elements[start..], first) else {
                return Ok(());
            };
            let at = start + index;
            let OperatorError::Udf { activity, .. } = &error else {
                return Err(self.fail_at(&chunk[at], error));
            };
            match activity {
                Activity::Element => {
                    let (input, pending) = &chunk[at];
                    let site = Site::Record {
                        input: *input,
                        number: pending.number,
                    };
                    match self.on_failure(site, &error, Some(&chunk[at])) {
                        Handling::Fail => return Err(self.fail_at(&chunk[at], error)),
                        Handling::DeadLetter(reason) => {
                            self.dead_letter(*input, &pending.record, &reason)?;
                            start = at + 1;
                        }
                        // The failed call left nothing behind: the same record again.
                        Handling::Retry => start = at,
                        Handling::StopBeforeRetry(message) => {
                            self.stopped_before_retry = Some(message);
                            return Ok(());
                        }
                    }
                }
                Activity::Timer { .. } => {
                    self.fire_through(Err(error), KeyedOperator::resume_event_timers)?;
                    start = at + 1;
                }
                Activity::Init => return Err(self.fail_at(&chunk[at], error)),
            }
        }
        Ok(())
    }

    /// Reads ahead on every source whose inputs have room in their queues. Waits for
    /// input only when nothing at all is ready, and then no longer than until the next
    /// processing-time timer.
    fn fill(&mut self) -> anyhow::Result<()> {
        let mut any_ready = self.inputs.any_ready();
        for index in 0..self.inputs.sources().len() {
            while self.inputs.wants_more(index) {
                let wait = if any_ready {
                    Duration::ZERO
                } else {
                    self.idle_wait()
                };
                match self.inputs.read(index, wait)? {
                    Read::Idle => break,
                    read => any_ready |= self.took(read)?,
                }
            }
        }
        Ok(())
    }

    /// Deals with what one read brought: an input that delivers again, a record that
    /// cannot be decoded (to the dead letters). Says whether a record was queued.
    fn took(&mut self, read: Read) -> anyhow::Result<bool> {
        match read {
            Read::Queued { input, resumed } => {
                self.resumed(input, resumed)?;
                return Ok(true);
            }
            Read::Undecodable {
                input,
                record,
                reason,
                resumed,
            } => {
                self.resumed(input, resumed)?;
                self.undecodable += 1;
                self.dead_letter(input, &record, &reason)?;
                self.inputs.recycle(record);
            }
            Read::Marker { input, resumed } => self.resumed(input, resumed)?,
            Read::Idle | Read::End | Read::Stopped => {}
        }
        Ok(false)
    }

    /// An input that was idle delivers again: it holds the watermark back again.
    fn resumed(&mut self, input: usize, resumed: bool) -> anyhow::Result<()> {
        if resumed {
            self.each_shard(|run| {
                let fired = run.driven().set_idle(input, false);
                run.fire_through(fired, KeyedOperator::resume_event_timers)
            })?;
        }
        Ok(())
    }

    /// Applies the watermark markers of inputs whose records read before the marker have
    /// all been processed.
    fn apply_progress(&mut self) -> anyhow::Result<()> {
        for (input, timestamp) in self.inputs.take_progress() {
            self.each_shard(|run| {
                let fired = run.driven().observe_progress(input, timestamp);
                run.fire_through(fired, KeyedOperator::resume_event_timers)
            })?;
        }
        Ok(())
    }

    /// Inputs quiet for their `idle_timeout` stop holding the watermark back until they
    /// deliver again.
    fn update_idleness(&mut self) -> anyhow::Result<()> {
        for input in self.inputs.newly_idle() {
            self.each_shard(|run| {
                let fired = run.driven().set_idle(input, true);
                run.fire_through(fired, KeyedOperator::resume_event_timers)
            })?;
        }
        Ok(())
    }

    /// Ends the inputs that are exhausted and have nothing queued; the watermark may
    /// advance.
    fn end_drained_inputs(&mut self) -> anyhow::Result<()> {
        while let Some(input) = self.inputs.end_next_drained() {
            if self.inputs.all_ended() && !self.checkpoints.in_step() {
                // The last input ended: the final watermark fires every event-time
                // timer now, and no checkpoint follows (a completed run removes
                // them), so the keys those timers release need not be remembered. (A
                // stage of several takes its final section after them.)
                for shard in self.stage.shards_mut() {
                    shard.host_mut().keys_mut().stop_tracking();
                }
            }
            self.each_shard(|run| {
                let fired = run.driven().end_source(input);
                run.fire_through(fired, KeyedOperator::resume_event_timers)
            })?;
        }
        Ok(())
    }

    /// Hands the watermark to the sinks, if it moved and an output feeds another stage:
    /// the downstream stages' inputs follow it.
    fn forward_watermark(&mut self) -> anyhow::Result<()> {
        let Some(forwarded) = self.forwarded else {
            return Ok(());
        };
        let watermark = self.stage.watermark();
        if watermark > forwarded {
            self.stage.watermark_to_sinks(&self.outputs)?;
            self.forwarded = Some(watermark);
        }
        Ok(())
    }

    /// Fires due processing-time timers.
    pub(crate) fn fire_processing_timers(&mut self) -> anyhow::Result<()> {
        let now = wall_clock_ms();
        self.each_shard(|run| {
            if !run.driven().has_processing_timers() {
                return Ok(());
            }
            let fired = run.driven().fire_processing_timers(now);
            run.fire_through(fired, |operator| operator.fire_processing_timers(now))
        })
    }

    /// How long to wait for input when nothing is ready: until the next processing-time
    /// timer, at most 100 ms.
    fn idle_wait(&self) -> Duration {
        // A steered run looks for swaps between waits: keep them short.
        let cap = if self.control.is_some() { 10 } else { 100 };
        match self
            .stage
            .shards()
            .filter_map(KeyedOperator::next_processing_due)
            .min()
        {
            Some(due) => Duration::from_millis((due - wall_clock_ms()).clamp(0, cap) as u64),
            None => Duration::from_millis(cap as u64),
        }
    }

    /// Between two runs of records: applies a pending UDF swap, and publishes the status
    /// a few times a second (only when the run is steered).
    fn steer(&mut self, options: &RunOptions) {
        let Some(control) = &options.control else {
            return;
        };
        if let Some(request) = control.take_swap() {
            let done = request.done.clone();
            let reply = apply_swap(&mut self.stage, &self.init_info, &mut self.udf, request);
            if reply.is_ok() {
                // The status shows the new version, and the records processed before
                // it, before the swap is reported done.
                self.publish_status(control, RunState::Running);
            }
            let _ = done.send(reply);
        }
        if self.status.due() {
            self.publish_status(control, RunState::Running);
        }
    }

    /// Writes the live figures into `control`, the run being in `state`.
    pub(crate) fn publish_status(&mut self, control: &RunControl, state: RunState) {
        let report = self.report();
        self.status.publish(
            control,
            state,
            report,
            &self.stage,
            &self.udf,
            &self.checkpoints,
        );
    }

    /// What the run did so far.
    pub(crate) fn report(&self) -> RunReport {
        let counters = self.counters();
        RunReport {
            pipeline: self.pipeline.clone(),
            udf: self.stage.function_name().to_string(),
            sources: self
                .inputs
                .sources()
                .iter()
                .map(|s| {
                    let read = s.inputs.clone().map(|i| self.inputs.input(i).read).sum();
                    (s.name.clone(), read)
                })
                .collect(),
            outputs: self
                .outputs
                .iter()
                .cloned()
                .zip(counters.emitted.iter().copied())
                .collect(),
            processed: counters.elements,
            dead_letters: self.dead_letters.count(),
            dead_letter_causes: DeadLetterCauses {
                undecodable: self.undecodable,
                rejected: self.failures.rejected,
                failed: self.failures.dead_lettered,
                unreadable_state: self.failures.unreadable_state,
            },
            udf_errors: self.failures.errors,
            udf_retries: self.failures.retries,
            rejected: self.failures.rejected,
            dead_letter_path: self.dead_letters.location().to_string(),
            late: counters.late,
            event_timers: counters.event_timers,
            processing_timers: counters.processing_timers,
            elapsed: Duration::ZERO,
            peak_rss_bytes: None,
            interrupted: self.interrupted,
            stopped_before_retry: self.stopped_before_retry.clone(),
            input_ended: self.inputs.all_ended(),
            resumed_from: self.checkpoints.resumed_from,
            checkpoints: self.checkpoints.taken,
            longest_checkpoint_pause: self.checkpoints.longest_pause,
            state_store: (self.stage.shards())
                .filter_map(|s| s.host().keys().spill_figures())
                .reduce(std::ops::Add::add),
        }
    }

    /// The operator of the shard the run drives on its own now ([`Runner::active`]).
    pub(crate) fn driven(&mut self) -> &mut KeyedOperator {
        self.stage.shard_mut(self.active)
    }

    /// The counters of the run: its shards', summed.
    pub(crate) fn counters(&self) -> OperatorCounters {
        self.stage.counters()
    }

    /// Runs `f` with each shard in turn as the one the run drives ([`Runner::driven`]),
    /// in shard order, stopping at the first error; shard 0 is the one driven
    /// afterwards. At parallelism 1, runs `f` once. The run drives the shards this way
    /// for everything but the runs of records: watermark markers, idleness, ends of
    /// input, processing-time timers, the end of input's timers and closing the sinks.
    pub(crate) fn each_shard(
        &mut self,
        mut f: impl FnMut(&mut Self) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut result = Ok(());
        for shard in 0..self.stage.parallelism() {
            self.active = shard;
            result = f(self);
            if result.is_err() {
                break;
            }
        }
        self.active = 0;
        result
    }

    /// Writes out what every shard's sinks hold (after a failure, so that what was
    /// emitted before it is kept); errors are left to the failure already reported.
    pub(crate) fn flush_after_failure(&mut self) {
        let _ = self.flush_sinks();
    }

    /// Writes out what the sinks hold (every shard's, then the shared ones once), so live
    /// outputs appear while the input is idle.
    fn flush_sinks(&mut self) -> anyhow::Result<()> {
        self.each_shard(|run| run.driven().flush().map_err(|e| run.describe(&e, None)))?;
        self.stage.flush_shared(&self.outputs)
    }

    /// Completes the sinks the shards share, once every shard has closed its own.
    fn finish_shared_sinks(&mut self) -> anyhow::Result<()> {
        self.stage.finish_sinks(&self.outputs)
    }
}

/// Runs a pipeline with its wasm UDF.
pub fn run(spec: &PipelineSpec, options: &RunOptions) -> Result<RunReport, RunFailure> {
    let (function, identity) = load_udf(spec).map_err(|error| RunFailure {
        error,
        report: None,
        command_line: false,
    })?;
    run_with(spec, Box::new(function), identity, options)
}

/// Runs a pipeline with any process function (the wasm one, or a native one in benchmarks).
pub fn run_with(
    spec: &PipelineSpec,
    function: Box<dyn ProcessFunction>,
    identity: UdfIdentity,
    options: &RunOptions,
) -> Result<RunReport, RunFailure> {
    let started = Instant::now();
    let mut runner =
        Runner::open(spec, function, identity, options).map_err(|error| RunFailure {
            command_line: error.downcast_ref::<CommandLineMistake>().is_some(),
            error,
            report: None,
        })?;
    let result = runner.run(options);
    if result.is_err() {
        // What was emitted before the failure is written out, and a sink that cannot
        // take it any more takes it off the counts: the report counts what the sinks hold.
        runner.flush_after_failure();
        let _ = runner.dead_letters.flush();
    }
    if let Some(control) = &options.control {
        let state = match (&result, runner.interrupted) {
            (Err(e), _) => {
                control.update(|s| s.record_error(format!("{e:#}")));
                RunState::Failed
            }
            (Ok(()), true) => RunState::Stopped,
            (Ok(()), false) => RunState::Finished,
        };
        runner.publish_status(control, state);
    }
    let mut report = runner.report();
    report.elapsed = started.elapsed();
    report.peak_rss_bytes = peak_rss_bytes();
    match result {
        Ok(()) => Ok(report),
        Err(error) => Err(RunFailure {
            error,
            report: Some(Box::new(report)),
            command_line: false,
        }),
    }
}
