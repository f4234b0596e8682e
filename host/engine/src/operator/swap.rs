//! Swapping a keyed operator's function for a new version between two calls: the two
//! halves of a swap (so that one across the shards is all-or-nothing), the probation that
//! keeps the old version for a number of calls, and the rollback to it.

use super::{Activity, KeyedOperator, OperatorError};
use crate::runtime::{InitInfo, ProcessFunction};

/// A new version [prepared](KeyedOperator::prepare_swap) in an operator (initialised
/// against its host) and not yet put to work: half of a swap across the shards.
pub struct PreparedSwap {
    function: Box<dyn ProcessFunction>,
    /// The time-to-live of each state before the new version's `init` declared them.
    previous_ttls: Vec<Option<weir_core::state::StateTtl>>,
}

/// A new function version on trial: the one it replaced, kept until enough calls passed.
pub(super) struct Probation {
    previous: Box<dyn ProcessFunction>,
    calls_left: u64,
    /// The time-to-live of each state as the previous version declared it, to declare
    /// again on a rollback (the new version's declarations replaced them).
    previous_ttls: Vec<Option<weir_core::state::StateTtl>>,
}

impl KeyedOperator {
    /// Replaces the function with a new version, between two calls. The new version's
    /// `init` runs against the live host (its states are matched by name); if it fails,
    /// or declares an output the pipeline has no sink for, nothing changes. The old
    /// version is kept for `probation_calls` calls, for [`rollback`](Self::rollback)
    /// (0: not kept at all).
    ///
    /// The run calls this when its `RunControl` has a swap queued (`weir serve`, `weir
    /// dev`, a group's member), between two runs of records: no key is in a call, and
    /// no batch is open.
    pub fn swap_function(
        &mut self,
        function: Box<dyn ProcessFunction>,
        info: &InitInfo,
        probation_calls: u64,
    ) -> Result<(), OperatorError> {
        let prepared = self.prepare_swap(function, info)?;
        self.commit_swap(prepared, probation_calls);
        Ok(())
    }

    /// The first half of a swap: initialises `function` against the live host (its
    /// `init` declares its states and outputs) without putting it to work. The run
    /// prepares a new version in every shard, then [commits](Self::commit_swap) it in all
    /// of them, or [aborts](Self::abort_swap) it in all if any refused, so that a swap
    /// is all-or-nothing across the shards. A refusal (a failing `init`, an output
    /// without a sink) leaves the operator as it was.
    pub fn prepare_swap(
        &mut self,
        mut function: Box<dyn ProcessFunction>,
        info: &InitInfo,
    ) -> Result<PreparedSwap, OperatorError> {
        let outputs = self.host.outputs.len();
        let previous_ttls = self.host.states.ttls();
        self.host.declaring = true;
        let result = function.init(&mut self.host, info);
        self.host.declaring = false;
        let added: Vec<String> = self.host.outputs.drain(outputs..).collect();
        let refused = match result {
            Err(error) => Some(OperatorError::Udf {
                activity: Activity::Init,
                error,
            }),
            Ok(()) if !added.is_empty() => Some(OperatorError::Unrouted(added)),
            Ok(()) => None,
        };
        if let Some(error) = refused {
            self.restore_ttls(previous_ttls);
            return Err(error);
        }
        Ok(PreparedSwap {
            function,
            previous_ttls,
        })
    }

    /// The second half of a swap: puts a [prepared](Self::prepare_swap) version to work,
    /// on probation for `probation_calls` (0: none, the old version is dropped).
    pub fn commit_swap(&mut self, prepared: PreparedSwap, probation_calls: u64) {
        let PreparedSwap {
            function,
            previous_ttls,
        } = prepared;
        let previous = std::mem::replace(&mut self.function, function);
        self.probation = (probation_calls > 0).then_some(Probation {
            previous,
            calls_left: probation_calls,
            previous_ttls,
        });
        // The old version may have been slow; the new one starts from the configured size.
        self.batch_limit = self.batch_limit.max(1);
    }

    /// Drops a [prepared](Self::prepare_swap) version that another shard refused: the
    /// states get back the time-to-live the running version declared.
    pub fn abort_swap(&mut self, prepared: PreparedSwap) {
        self.restore_ttls(prepared.previous_ttls);
    }

    /// Declares every state again with the time-to-live in `ttls` (by state id) where a
    /// newer declaration changed it.
    fn restore_ttls(&mut self, ttls: Vec<Option<weir_core::state::StateTtl>>) {
        for (id, ttl) in ttls.into_iter().enumerate() {
            let id = id as u32;
            if self.host.states.ttl(id) != ttl {
                if let Some((name, kind)) = self.host.states.get(id) {
                    let name = name.to_string();
                    let redeclared = self.host.declare_state(&name, kind, ttl);
                    debug_assert!(redeclared.is_ok(), "the same name and kind again");
                }
            }
        }
    }

    /// Whether a swapped-in version is still on probation. The run asks when a UDF call
    /// has failed: on probation it rolls back, whatever the failure (a state the new
    /// version cannot decode included); otherwise the failure ends the run, except a
    /// state that cannot be decoded, which sends the record to the dead letters.
    pub fn in_probation(&self) -> bool {
        self.probation.is_some()
    }

    /// How many calls the version swapped in last must still pass before its probation
    /// is over; `None` when no version is on probation. The run publishes it in its
    /// status, where `weir deploy --wait` reads what probation decided.
    pub fn probation_calls_left(&self) -> Option<u64> {
        self.probation.as_ref().map(|p| p.calls_left)
    }

    /// Goes back to the version a swap replaced, if it is still kept; the failed version
    /// is returned (to be dropped). State and timers are left as the failed version left
    /// them after its last successful call (a failed call changes nothing). The run calls this when a version on probation fails, then takes the failed
    /// call again with the old version (see [`retry_timer`](Self::retry_timer) and
    /// [`register_timer_again`](Self::register_timer_again) for a failed timer).
    pub fn rollback(&mut self) -> Option<Box<dyn ProcessFunction>> {
        let probation = self.probation.take()?;
        // The old version's instance is not initialised again: its states' time-to-live
        // goes back to what it declared.
        self.restore_ttls(probation.previous_ttls);
        Some(std::mem::replace(&mut self.function, probation.previous))
    }

    /// Counts calls against the probation; once it is over the old version is dropped.
    pub(super) fn passed_calls(&mut self, calls: u64) {
        if let Some(probation) = &mut self.probation {
            probation.calls_left = probation.calls_left.saturating_sub(calls);
            if probation.calls_left == 0 {
                self.probation = None;
            }
        }
    }
}
