//! What a run does when a UDF call fails, and how it says so.
//!
//! - A record or timer the UDF rejects itself (`dead-letters.reject`) goes to the
//!   dead-letter output with the UDF's reason; the run goes on. It is not a failure.
//! - A new UDF version that fails within its probation (any failure, a state it cannot
//!   read included) is rolled back to the version it replaced, which takes the failed
//!   call again.
//! - Any other failure on a record or timer follows `[udf] on_error`: the end of the run
//!   (`fail`, the default), the dead-letter output (`dead-letter`), or the same call
//!   again after a wait (`retry`), then one of the two. A key's state that the UDF
//!   cannot read (written by another version, as another type) is such a failure, but
//!   is never retried: it fails the run, or goes to the dead letters.
//! - A failure of `init` ends the run.
//!
//! A run that ends names the UDF and the record (source, line or offset) or timer it
//! failed on; a dead letter carries the same message as its reason.

use crate::failures::{Handling, Site};
use crate::inputs::Pending;
use crate::runner::Runner;
use crate::udf::short_hash;
use weir_core::time::timers::TimeDomain;
use weir_core::time::{display, Timestamp};
use weir_engine::operator::{Activity, KeyedOperator, OperatorError};
use weir_engine::runtime::{CallError, ElementRef};
use weir_io::sink::DeadLetter;
use weir_io::source::SourceRecord;
use weir_pipeline::{AfterRetries, OnUdfError};

/// Where a record came from, for messages.
pub(crate) struct Origin {
    /// Its input.
    pub input: usize,
    /// Its number in the input (1-based).
    pub number: u64,
    /// Its line in a file (none for a Kafka message).
    pub line: Option<u64>,
    /// Its byte offset in a file, or its Kafka offset.
    pub offset: u64,
    /// Its key.
    pub key: Vec<u8>,
}

impl Runner {
    /// The error that ends the run at `pending`, naming it.
    pub(crate) fn fail_at(
        &self,
        (input, pending): &(usize, Pending),
        error: OperatorError,
    ) -> anyhow::Error {
        let origin = Origin {
            input: *input,
            number: pending.number,
            line: pending.record.line,
            offset: pending.record.offset,
            key: pending.key().to_vec(),
        };
        self.describe(&error, Some(origin))
    }

    /// Processes a run of elements; if a UDF version on probation fails, rolls back to
    /// the previous version and goes on from the failed call with it. `first`, if
    /// given, is what processing `elements` already came to (a shard's run in the
    /// parallel part), so they are not handed over again, with the count of rollbacks
    /// when it was made: if another shard's failure has rolled the version back since,
    /// the failed call is taken again with the old version, as after a rollback.
    pub(crate) fn process_with_rollback(
        &mut self,
        elements: &[(usize, ElementRef<'_>)],
        mut first: Option<(weir_engine::stage::ShardResult, u64)>,
    ) -> Result<(), (usize, OperatorError)> {
        let mut start = 0;
        loop {
            let (result, stale) = match first.take() {
                Some((result, made_at)) => (result, made_at < self.rollbacks),
                None => (self.driven().process_elements(&elements[start..]), false),
            };
            match result {
                Ok(()) => return Ok(()),
                Err((index, error)) => {
                    let index = start + index;
                    // A new version that cannot read the live state fails its probation
                    // too: rolled back, not left to send record after record to the dead
                    // letters.
                    // A rejection is not a failure: it never rolls a version back.
                    let activity = match &error {
                        OperatorError::Udf { activity, error }
                            if (stale || self.driven().in_probation())
                                && !matches!(error, CallError::Rejected(_)) =>
                        {
                            activity.clone()
                        }
                        _ => return Err((index, error)),
                    };
                    if !stale {
                        self.roll_back(&error);
                    }
                    start = match activity {
                        Activity::Timer {
                            domain,
                            timestamp,
                            key,
                        } => {
                            self.driven()
                                .retry_timer(domain, timestamp, &key)
                                .map_err(|e| (index, e))?;
                            index + 1
                        }
                        _ => index,
                    };
                    if start >= elements.len() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Completes an operator call that fires timers (`first` is its result): while a
    /// timer fails in a way the run survives ([`Self::recover_timer`]), recovers and
    /// fires what is still due with `next`.
    pub(crate) fn fire_through(
        &mut self,
        first: Result<(), OperatorError>,
        mut next: impl FnMut(&mut KeyedOperator) -> Result<(), OperatorError>,
    ) -> anyhow::Result<()> {
        let mut result = first;
        while let Err(error) = result {
            if let OperatorError::Stopped = error {
                self.stopped_in_timers = true;
                return Ok(());
            }
            self.recover_timer(error)?;
            if self.stopped_in_timers {
                return Ok(());
            }
            result = next(self.stage.shard_mut(self.active));
        }
        Ok(())
    }

    /// A timer's failure that need not end the run: a new version failing within its
    /// probation is rolled back, and the timer registered again for the old one; else
    /// [`Self::on_failure`] decides (a rejection sends the timer to the dead letters, a
    /// retry registers it again, a failure under `on_error = "fail"` ends the run).
    fn recover_timer(&mut self, error: OperatorError) -> anyhow::Result<()> {
        let OperatorError::Udf {
            activity:
                Activity::Timer {
                    domain,
                    timestamp,
                    key,
                },
            error: call,
        } = &error
        else {
            return Err(self.describe(&error, None));
        };
        let (domain, timestamp, key) = (*domain, *timestamp, key.clone());
        if !self.driven().in_probation() || matches!(call, CallError::Rejected(_)) {
            let site = Site::Timer {
                domain,
                timestamp,
                key: key.clone(),
            };
            return match self.on_failure(site, &error, None) {
                Handling::Fail => Err(self.describe(&error, None)),
                Handling::DeadLetter(reason) => {
                    self.timer_dead_letter(domain, timestamp, &key, &reason)
                }
                Handling::Retry => {
                    self.driven()
                        .register_timer_again(domain, timestamp, &key)?;
                    Ok(())
                }
                // Stopped during the retries: the timer stays pending, in the checkpoint
                // the stop takes, and fires when the run resumes.
                Handling::StopBeforeRetry(_) => {
                    self.driven()
                        .register_timer_again(domain, timestamp, &key)?;
                    self.stopped_in_timers = true;
                    Ok(())
                }
            };
        }
        self.roll_back(&error);
        self.driven()
            .register_timer_again(domain, timestamp, &key)?;
        Ok(())
    }

    /// Goes back to the UDF version before the last swap, and says why.
    fn roll_back(&mut self, error: &OperatorError) {
        let failed = self.udf.current.clone();
        self.rollbacks += 1;
        // One rollback for the whole pipeline: every shard goes back.
        self.stage.rollback();
        if let Some(previous) = self.udf.previous.take() {
            self.udf.current = previous;
        }
        let message = format!(
            "UDF version {} failed within its probation and was rolled back to {}: {error}",
            short_hash(&failed.sha256),
            short_hash(&self.udf.current.sha256)
        );
        tracing::warn!("{message}");
        self.failures.errors += 1;
        if let Some(control) = &self.control {
            control.update(|s| {
                s.udf_errors = self.failures.errors;
                s.record_error(message);
                s.udf_sha256 = self.udf.current.sha256.clone();
            });
        }
    }

    /// Decides what happens after a call on `site` failed with `error` (after probation,
    /// or a rejection at any time), `pending` being the record for a record's call:
    /// counts it, says so in the live status, and waits before a retry.
    pub(crate) fn on_failure(
        &mut self,
        site: Site,
        error: &OperatorError,
        pending: Option<&(usize, Pending)>,
    ) -> Handling {
        let OperatorError::Udf { error: call, .. } = error else {
            return Handling::Fail;
        };
        let key = match (&site, pending) {
            (Site::Timer { key, .. }, _) => key.clone(),
            (_, Some((_, p))) => p.key().to_vec(),
            _ => Vec::new(),
        };
        let message = {
            let origin = pending.map(|(input, p)| Origin {
                input: *input,
                number: p.number,
                line: p.record.line,
                offset: p.record.offset,
                key: p.key().to_vec(),
            });
            format!("{:#}", self.describe(error, origin))
        };
        let handling = match call {
            CallError::Rejected(_) => {
                self.failures.rejected += 1;
                return Handling::DeadLetter(message.clone());
            }
            // A state the UDF cannot read follows `on_error` as Flink fails a job whose
            // state cannot be restored: the end of the run by default. Retrying cannot
            // help (the state is what it is), so a retry policy goes straight to what it
            // does after its retries.
            CallError::StateDecode(reason) => match self.failures.policy {
                OnUdfError::Fail
                | OnUdfError::Retry {
                    then: AfterRetries::Fail,
                    ..
                } => return Handling::Fail,
                _ => {
                    self.failures.unreadable_state += 1;
                    Handling::DeadLetter(self.state_reason(&key, reason))
                }
            },
            _ => match self.failures.policy {
                OnUdfError::Fail => return Handling::Fail,
                OnUdfError::DeadLetter => {
                    self.failures.dead_lettered += 1;
                    Handling::DeadLetter(message.clone())
                }
                OnUdfError::Retry { retries, then, .. } => {
                    let attempts = self.failures.failed_on(site);
                    if attempts <= retries {
                        let wait = self.failures.policy.backoff(attempts);
                        if let Some(quiet) = self.failures.warning_due() {
                            let since = match quiet {
                                0 => String::new(),
                                n => format!(" ({n} retry warnings left out since the last)"),
                            };
                            tracing::warn!(
                                "{}; retry {attempts} of {retries} in {} ms{since}",
                                message.clone(),
                                wait.as_millis()
                            );
                        }
                        // A stop ends the retries: the record (or timer) is left for the
                        // run that resumes, not taken through the rest of them at once.
                        if !self.failures.wait(wait) {
                            return Handling::StopBeforeRetry(message);
                        }
                        self.failures.retries += 1;
                        Handling::Retry
                    } else {
                        match then {
                            AfterRetries::Fail => return Handling::Fail,
                            AfterRetries::DeadLetter => {
                                self.failures.dead_lettered += 1;
                                Handling::DeadLetter(format!(
                                    "{} (and {retries} retries)",
                                    message.clone()
                                ))
                            }
                        }
                    }
                }
            },
        };
        self.failures.errors += 1;
        let last = match &handling {
            Handling::DeadLetter(reason) => reason.clone(),
            _ => message.clone(),
        };
        if let Some(control) = &self.control {
            control.update(|s| {
                s.udf_errors = self.failures.errors;
                s.udf_retries = self.failures.retries;
                s.record_error(last);
            });
        }
        handling
    }

    /// Why a record or timer went to the dead letters because its key's state could not
    /// be read.
    pub(crate) fn state_reason(&self, key: &[u8], message: &str) -> String {
        format!(
            "UDF {:?} version {} cannot read the state of key {:?}: {message}",
            self.udf.current.name,
            short_hash(&self.udf.current.sha256),
            String::from_utf8_lossy(key)
        )
    }

    /// A timer that could not fire because its key's state could not be read.
    fn timer_dead_letter(
        &mut self,
        domain: TimeDomain,
        timestamp: Timestamp,
        key: &[u8],
        reason: &str,
    ) -> anyhow::Result<()> {
        let raw = serde_json::json!({
            "timer": timestamp,
            "domain": domain.label(),
            "key": String::from_utf8_lossy(key),
        })
        .to_string();
        tracing::warn!("{reason}");
        self.dead_letters.write(&DeadLetter {
            source: "timer",
            line: None,
            partition: None,
            offset: 0,
            reason,
            raw: &raw,
        })
    }

    /// A record of `input` that goes to the dead letters, with `reason`.
    pub(crate) fn dead_letter(
        &mut self,
        input: usize,
        record: &SourceRecord,
        reason: &str,
    ) -> anyhow::Result<()> {
        let id = &self.inputs.input(input).id;
        let raw = String::from_utf8_lossy(&record.data);
        let letter = DeadLetter {
            source: &id.source,
            line: record.line,
            partition: id.partition.as_deref(),
            offset: record.offset,
            reason,
            raw: &raw,
        };
        self.dead_letters.write(&letter)
    }

    /// Turns an operator error into a message naming the UDF and where the run was.
    pub(crate) fn describe(&self, error: &OperatorError, origin: Option<Origin>) -> anyhow::Error {
        let udf = self.stage.function_name();
        let at = |o: &Origin| {
            let input = self.inputs.input(o.input);
            let source = self.inputs.source_of(o.input);
            let place = match o.line {
                Some(line) => format!("line {line} of {}", source.source.location()),
                None => format!("offset {} of {}", o.offset, input.name),
            };
            format!("record {} of source {:?} ({place})", o.number, source.name)
        };
        // A rejection is the UDF's own verdict, with its reason; anything else failed.
        let (verb, why) = match error {
            OperatorError::Udf {
                error: CallError::Rejected(reason),
                ..
            } => ("rejected", reason.clone()),
            OperatorError::Udf {
                error: CallError::StateDecode(message),
                activity,
            } => {
                let key = match activity {
                    Activity::Timer { key, .. } => Some(key.as_slice()),
                    _ => origin.as_ref().map(|o| o.key.as_slice()),
                };
                let of_key = key
                    .map(|k| format!(" of key {:?}", String::from_utf8_lossy(k)))
                    .unwrap_or_default();
                (
                    "failed on",
                    format!("cannot read the state{of_key}: {message}"),
                )
            }
            _ => ("failed on", error.to_string()),
        };
        match error {
            OperatorError::Udf {
                activity: Activity::Element,
                ..
            } => {
                let at = origin.as_ref().map(at).unwrap_or_default();
                anyhow::anyhow!("UDF {udf:?} {verb} {at}: {why}")
            }
            OperatorError::Udf {
                activity:
                    Activity::Timer {
                        domain,
                        timestamp,
                        key,
                    },
                ..
            } => {
                let after = origin
                    .as_ref()
                    .map(|o| format!(" (after {})", at(o)))
                    .unwrap_or_default();
                anyhow::anyhow!(
                    "UDF {udf:?} {verb} its {} timer at {} for key {:?}{after}: {why}",
                    domain.label(),
                    display(*timestamp),
                    String::from_utf8_lossy(key)
                )
            }
            _ => anyhow::anyhow!("{error}"),
        }
    }
}
