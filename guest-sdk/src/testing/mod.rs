//! An in-memory Weir host for unit-testing UDFs natively with `cargo test`, no wasm.
//!
//! [`TestHost`] drives a [`ProcessFunction`] with the engine's rules: it calls `init`,
//! scopes state and timers to the key of each element or timer, fires event-time timers
//! when the watermark advances and processing-time timers when its clock does, and
//! records what the UDF emits and logs. Timers fire through the engine's own timer
//! service (`weir-core`), so timers due at the same time fire in the engine's order
//! (`docs/pipeline.md`, "Timers"). What differs: you move the watermark and the clock
//! yourself, and every element and timer is its own call (the engine may batch them,
//! with the same effects).
//!
//! ```ignore
//! let mut host = TestHost::<MyUdf>::builder().config("window", "5m").build()?;
//! host.process("main", "ad-1", &json!({"ad_id": "ad-1"}), 1_000)?;
//! host.advance_watermark(400_000)?;
//! assert_eq!(host.outputs("main"), vec![Emitted::new(json!({...}), 1_000).with_key("ad-1")]);
//! ```

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;

use anyhow::anyhow;

pub use crate::backend::world::{Emitted, LogLine};
use crate::backend::world::{Phase, World};
use crate::backend::{native, Active};
use crate::context::{Context, Element, InitContext, Timer};
// The trait stays at the crate root: guest backtraces name it `weir_sdk::ProcessFunction`.
use crate::host_calls::Backend;
use crate::result::Result;
use crate::time::TimeDomain;
use crate::ProcessFunction;

/// An element's value as a test gives it: a `serde_json::Value`, or the raw bytes of the
/// record (`&str`/`String` of JSON text, `&[u8]`, `Vec<u8>`), passed to the UDF as is.
pub trait ElementValue {
    /// The record's bytes.
    fn into_bytes(self) -> Vec<u8>;
}

impl ElementValue for &serde_json::Value {
    fn into_bytes(self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a JSON value always serializes")
    }
}
impl ElementValue for serde_json::Value {
    fn into_bytes(self) -> Vec<u8> {
        (&self).into_bytes()
    }
}
impl ElementValue for &str {
    fn into_bytes(self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}
impl ElementValue for &String {
    fn into_bytes(self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}
impl ElementValue for String {
    fn into_bytes(self) -> Vec<u8> {
        self.into()
    }
}
impl ElementValue for &[u8] {
    fn into_bytes(self) -> Vec<u8> {
        self.to_vec()
    }
}
impl ElementValue for Vec<u8> {
    fn into_bytes(self) -> Vec<u8> {
        self
    }
}

/// Configures a [`TestHost`]: config entries, input names and the starting clock.
pub struct TestHostBuilder<T> {
    config: Vec<(String, String)>,
    inputs: Vec<String>,
    processing_time: i64,
    _udf: PhantomData<fn() -> T>,
}

impl<T: ProcessFunction> TestHostBuilder<T> {
    /// Adds a config entry, as `[udf.config]` or `--config KEY=VALUE` would (text; a
    /// later entry for the same key wins).
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.push((key.into(), value.into()));
        self
    }

    /// Names the connected inputs (default: `["main"]`).
    pub fn inputs<I, S>(mut self, inputs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.inputs = inputs.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the processing-time clock's start (default: 0).
    pub fn processing_time(mut self, now: i64) -> Self {
        self.processing_time = now;
        self
    }

    /// Creates the host and calls the UDF's `init`.
    pub fn build(self) -> Result<TestHost<T>> {
        let world = Rc::new(RefCell::new(World::new(self.processing_time)));
        let udf = init::<T>(&world, &self.config, &self.inputs)?;
        Ok(TestHost {
            udf,
            config: self.config,
            inputs: self.inputs,
            world,
            rejected: Vec::new(),
        })
    }
}

fn init<T: ProcessFunction>(
    world: &Rc<RefCell<World>>,
    config: &[(String, String)],
    inputs: &[String],
) -> Result<T> {
    let mut ctx = InitContext::new(config.to_vec(), inputs.to_vec());
    let _installed = native::install(world.clone());
    world.borrow_mut().phase = Phase::Init;
    let result = T::init(&mut ctx);
    world.borrow_mut().end_call(result.is_ok());
    Active::call_finished();
    result
}

/// How many timers may fire in one advance before the TestHost calls it a loop.
const FIRING_LIMIT: u64 = 1_000_000;

/// An in-memory host running one UDF instance. See the [module docs](self).
pub struct TestHost<T: ProcessFunction> {
    udf: T,
    config: Vec<(String, String)>,
    inputs: Vec<String>,
    world: Rc<RefCell<World>>,
    rejected: Vec<Rejected>,
}

/// An element or timer the UDF rejected ([`Reject`](crate::reject::Reject)): the host sends it
/// to the dead-letter output with the reason and takes back everything its call did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The key of the element or timer.
    pub key: Vec<u8>,
    /// Its timestamp.
    pub timestamp: i64,
    /// The UDF's reason.
    pub reason: String,
}

impl<T: ProcessFunction> TestHost<T> {
    /// A builder with no config, one input named `main` and processing time 0.
    pub fn builder() -> TestHostBuilder<T> {
        TestHostBuilder {
            config: Vec::new(),
            inputs: vec!["main".to_owned()],
            processing_time: 0,
            _udf: PhantomData,
        }
    }

    /// A host with the default builder settings.
    pub fn new() -> Result<Self> {
        Self::builder().build()
    }

    /// Replaces the instance with a fresh one (calling `init` again) while keeping all
    /// state, timers and outputs, as the real host may at any time. Use it to check that
    /// a UDF keeps nothing important in `self`.
    pub fn reinit(&mut self) -> Result<()> {
        self.udf = init::<T>(&self.world, &self.config, &self.inputs)?;
        Ok(())
    }

    /// Runs `f` in the key scope of `key` at `timestamp`, as the host does around each
    /// element and timer.
    fn scoped(
        &mut self,
        key: &[u8],
        timestamp: i64,
        f: impl FnOnce(&mut T, &[String]) -> Result<()>,
    ) -> Result<()> {
        let _installed = native::install(self.world.clone());
        self.world.borrow_mut().expire();
        let saved = self.world.borrow().save();
        self.world.borrow_mut().phase = Phase::Keyed {
            key: key.to_vec(),
            timestamp,
        };
        let result = f(&mut self.udf, &self.inputs);
        let rejection = result
            .as_ref()
            .err()
            .and_then(crate::reject::Reject::find)
            .map(|r| r.reason().to_owned());
        self.world.borrow_mut().end_call(result.is_ok());
        Active::call_finished();
        match rejection {
            Some(reason) => {
                self.world.borrow_mut().restore(saved);
                self.rejected.push(Rejected {
                    key: key.to_vec(),
                    timestamp,
                    reason,
                });
                Ok(())
            }
            None => result,
        }
    }

    /// The elements and timers the UDF rejected so far, in order.
    pub fn rejected(&self) -> &[Rejected] {
        &self.rejected
    }

    /// Feeds one element from `input` (a name given to the builder), with the key and
    /// event timestamp the host would have extracted. Returns the UDF's error, if any.
    pub fn process(
        &mut self,
        input: &str,
        key: impl AsRef<[u8]>,
        value: impl ElementValue,
        timestamp: i64,
    ) -> Result<()> {
        let index = self.inputs.iter().position(|i| i == input).ok_or_else(|| {
            anyhow!(
                "TestHost: unknown input `{input}`; inputs are {:?}",
                self.inputs
            )
        })?;
        let key = key.as_ref();
        let value = value.into_bytes();
        self.scoped(key, timestamp, |udf, inputs| {
            let element =
                Element::new(&inputs[index], index as u32, key.to_vec(), value, timestamp);
            let mut ctx = Context::new(key, timestamp);
            udf.process_element(&mut ctx, &element)
        })
    }

    fn fire(&mut self, domain: TimeDomain, timestamp: i64, key: Vec<u8>) -> Result<()> {
        let timer = Timer::new(domain, timestamp, key);
        // Event-time entries expire by the timer's time, not the watermark's.
        if domain == TimeDomain::EventTime {
            self.world.borrow_mut().event_clock = Some(timestamp);
        }
        let result = self.scoped(timer.key(), timestamp, |udf, _| {
            let mut ctx = Context::new(timer.key(), timestamp);
            udf.on_timer(&mut ctx, &timer)
        });
        self.world.borrow_mut().event_clock = None;
        result
    }

    /// Fires due timers of `domain` one at a time, so that timers registered while
    /// firing are picked up in order too. Returns how many fired.
    fn fire_due(&mut self, domain: TimeDomain, upto: i64) -> Result<u64> {
        let mut fired = 0;
        loop {
            let due = self.world.borrow_mut().pop_due_timer(domain, upto);
            let Some((ts, key)) = due else {
                return Ok(fired);
            };
            if domain == TimeDomain::ProcessingTime {
                let mut world = self.world.borrow_mut();
                world.processing_time = world.processing_time.max(ts);
            }
            self.fire(domain, ts, key)?;
            fired += 1;
            if fired == FIRING_LIMIT {
                panic!(
                    "TestHost: {FIRING_LIMIT} {domain:?} timers fired in one go; the UDF keeps \
                     registering due timers while firing (the host would never finish)"
                );
            }
        }
    }

    /// Advances the watermark to `watermark` if that is later than the current one, then
    /// fires every event-time timer at or before it in the engine's order (timestamp,
    /// then the keys' tie order), including timers registered while firing; then removes
    /// the event-time state entries that expired. Expiry and timers interleave by time,
    /// as in the host: a timer at `t` sees every entry that expires after `t`, however
    /// far the watermark jumped. Timers registered at or before an unchanged watermark
    /// wait for its next advance, as in the host.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<()> {
        {
            let mut world = self.world.borrow_mut();
            if watermark <= world.watermark {
                return Ok(());
            }
            world.watermark = watermark;
        }
        self.fire_due(TimeDomain::EventTime, watermark)?;
        self.world.borrow_mut().expire();
        Ok(())
    }

    /// Moves the processing-time clock to `now` (it never goes back), then fires every
    /// processing-time timer at or before the clock in the engine's order, including
    /// overdue ones: the host checks its wall clock between elements in the same way.
    /// The timers due when the clock is read fire as one group; one registered while
    /// they fire comes after them.
    pub fn set_processing_time(&mut self, now: i64) -> Result<()> {
        let now = {
            let mut world = self.world.borrow_mut();
            world.processing_time = world.processing_time.max(now);
            world.expire();
            world.processing_time
        };
        self.fire_due(TimeDomain::ProcessingTime, now).map(drop)
    }

    /// Ends the input as the host does: the watermark goes to `i64::MAX`, firing every
    /// event-time timer; then every processing-time timer fires in timestamp order (the
    /// clock moving to each), then any event-time timer those registered, and so on
    /// until none is left.
    pub fn finish(&mut self) -> Result<()> {
        self.advance_watermark(i64::MAX)?;
        loop {
            let fired = self.fire_due(TimeDomain::ProcessingTime, i64::MAX)?
                + self.fire_due(TimeDomain::EventTime, i64::MAX)?;
            if fired == 0 {
                return Ok(());
            }
        }
    }

    /// Everything emitted to output `name` so far. Panics if the UDF did not declare it.
    pub fn outputs(&self, name: &str) -> Vec<Emitted> {
        self.world.borrow().outputs(name).to_vec()
    }

    /// Like [`outputs`](Self::outputs), and forgets them, for checking step by step.
    pub fn take_outputs(&mut self, name: &str) -> Vec<Emitted> {
        self.world.borrow_mut().take_outputs(name)
    }

    /// The timers not yet fired as `(key, domain, timestamp)`: event-time ones first,
    /// each domain in firing order.
    pub fn pending_timers(&self) -> Vec<(Vec<u8>, TimeDomain, i64)> {
        self.world.borrow().pending_timers()
    }

    /// The current watermark (`i64::MIN` before the first advance).
    pub fn watermark(&self) -> i64 {
        self.world.borrow().watermark
    }

    /// The processing-time clock.
    pub fn processing_time(&self) -> i64 {
        self.world.borrow().processing_time
    }

    /// Whether `key` holds any state, to check that a UDF cleans up after itself.
    pub fn has_state(&self, key: impl AsRef<[u8]>) -> bool {
        self.world.borrow().has_state(key.as_ref())
    }

    /// The stored bytes of value state `name` for `key` (as the host would keep them).
    pub fn state_bytes(&self, key: impl AsRef<[u8]>, name: &str) -> Option<Vec<u8>> {
        self.world.borrow().value_bytes(key.as_ref(), name)
    }

    /// Sets the stored bytes of value state `name` for `key`: state as an earlier version
    /// of the UDF left it, to test a migration.
    pub fn set_state_bytes(&mut self, key: impl AsRef<[u8]>, name: &str, bytes: Vec<u8>) {
        self.world
            .borrow_mut()
            .set_value_bytes(key.as_ref(), name, bytes);
    }

    /// The stored items of list state `name` for `key`, oldest first (as the host would
    /// keep them).
    pub fn list_state_bytes(&self, key: impl AsRef<[u8]>, name: &str) -> Vec<Vec<u8>> {
        self.world.borrow().list_bytes(key.as_ref(), name)
    }

    /// Sets the stored items of list state `name` for `key`: state as an earlier version
    /// of the UDF left it, to test a migration.
    pub fn set_list_state_bytes(&mut self, key: impl AsRef<[u8]>, name: &str, items: Vec<Vec<u8>>) {
        self.world
            .borrow_mut()
            .set_list_bytes(key.as_ref(), name, items);
    }

    /// The stored entries of map state `name` for `key`, in key byte order (as the host
    /// would keep them).
    pub fn map_state_bytes(&self, key: impl AsRef<[u8]>, name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.world.borrow().map_bytes(key.as_ref(), name)
    }

    /// Sets the stored entries of map state `name` for `key`: state as an earlier
    /// version of the UDF left it, to test a migration.
    pub fn set_map_state_bytes(
        &mut self,
        key: impl AsRef<[u8]>,
        name: &str,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
    ) {
        self.world
            .borrow_mut()
            .set_map_bytes(key.as_ref(), name, entries);
    }

    /// The keys that hold any state, sorted by bytes.
    pub fn keys_with_state(&self) -> Vec<Vec<u8>> {
        self.world.borrow().keys_with_state()
    }

    /// Everything the UDF logged so far (also printed to stderr).
    pub fn logs(&self) -> Vec<LogLine> {
        self.world.borrow().logs.clone()
    }

    /// The UDF instance.
    pub fn udf(&self) -> &T {
        &self.udf
    }

    /// The UDF instance, mutably.
    pub fn udf_mut(&mut self) -> &mut T {
        &mut self.udf
    }
}

#[cfg(test)]
mod tests;
