//! State time-to-live, declared with a state and enforced by the host.

use crate::duration::Duration;
use crate::time::TimeDomain;

/// A state's time-to-live, Flink's `StateTtlConfig`: every entry of the state (its value,
/// each list item, each map entry) lives `ttl` after the time of the call that last wrote
/// it, or read it too with [`refreshed_on_read`](Self::refreshed_on_read). An expired
/// entry is never returned; the host removes it between calls, without calling the UDF,
/// and checkpoints do not keep it.
///
/// - [`event_time`](Self::event_time): a call's time is its element's or timer's
///   timestamp, or the watermark if that is later; the entry expires once the watermark
///   reaches that time + `ttl`.
/// - [`processing_time`](Self::processing_time): a call's time is the host's processing
///   time; the entry expires once processing time reaches that time + `ttl`.
///
/// ```no_run
/// # use weir_sdk::prelude::*;
/// # use weir_sdk::StateTtl;
/// # fn init(ctx: &mut InitContext) -> Result<()> {
/// // Joined rows, kept ten minutes of event time to recognise duplicates.
/// let joined: ValueState<()> =
///     ctx.value_state_with_ttl("joined", StateTtl::event_time(Duration::from_mins(10)))?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateTtl {
    ttl: Duration,
    domain: TimeDomain,
    refreshed_on_read: bool,
}

impl StateTtl {
    /// Entries live `ttl` of event time after the call that last wrote them.
    pub fn event_time(ttl: Duration) -> Self {
        StateTtl {
            ttl,
            domain: TimeDomain::EventTime,
            refreshed_on_read: false,
        }
    }

    /// Entries live `ttl` of processing time after the call that last wrote them.
    pub fn processing_time(ttl: Duration) -> Self {
        StateTtl {
            ttl,
            domain: TimeDomain::ProcessingTime,
            refreshed_on_read: false,
        }
    }

    /// Reads start an entry's time-to-live again too (Flink's `OnReadAndWrite`): a
    /// value get, a list get, a map get of that entry, a map iteration.
    pub fn refreshed_on_read(self) -> Self {
        StateTtl {
            refreshed_on_read: true,
            ..self
        }
    }

    /// How long an entry lives.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Which clock it follows.
    pub fn domain(&self) -> TimeDomain {
        self.domain
    }

    /// Whether reads start it again.
    pub fn is_refreshed_on_read(&self) -> bool {
        self.refreshed_on_read
    }
}
