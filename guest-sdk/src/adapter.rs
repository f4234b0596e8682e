//! Connects a [`ProcessFunction`] to the component's exports (used by [`crate::export!`]).
//!
//! The generated `Guest` trait has static methods, so the adapter keeps the instance
//! in a slot that the `export!` macro defines in the UDF crate, one per UDF type.

use std::marker::PhantomData;

use crate::backend::Active;
use crate::batch::Path;
use crate::bindings::exports::weir::udf::batch::Guest as BatchGuest;
use crate::bindings::exports::weir::udf::cached_batch::Guest as CachedBatchGuest;
use crate::bindings::exports::weir::udf::process_function::Guest;
use crate::bindings::weir::udf::types;
use crate::context::{Context, Element, InitContext, Timer};
// The trait stays at the crate root: guest backtraces name it `weir_sdk::ProcessFunction`.
use crate::host_calls::Backend;
use crate::time::TimeDomain;
use crate::ProcessFunction;

/// A live UDF instance and the input names its elements refer to.
pub struct Instance<T> {
    udf: T,
    inputs: Vec<String>,
}

/// Storage for the one instance of `Udf`; implemented by `export!`.
pub trait Slot: 'static {
    /// The exported UDF type.
    type Udf: ProcessFunction;
    /// Runs `f` on the slot.
    fn with<R>(f: impl FnOnce(&mut Option<Instance<Self::Udf>>) -> R) -> R;
}

/// Implements the generated `Guest` trait for the UDF stored in `S`.
pub struct Adapter<S>(PhantomData<S>);

fn error(e: anyhow::Error) -> types::Error {
    // A value of another type in a state is the host's to route, not a failure.
    let kind = if e.chain().any(|c| c.is::<crate::state::StateDecodeError>()) {
        types::ErrorKind::StateDecode
    } else {
        types::ErrorKind::Failed
    };
    types::Error {
        message: format!("{e:#}"),
        kind,
    }
}

fn failed(message: String) -> types::Error {
    types::Error {
        message,
        kind: types::ErrorKind::Failed,
    }
}

/// A call's result for the host: a [`Reject`](crate::reject::Reject) becomes the
/// `dead-letters.reject` import and a successful return (the host then takes the call
/// back and writes the dead letter); any other error is the call's error.
fn finish_call(result: crate::result::Result<()>) -> Result<(), types::Error> {
    match result {
        Err(e) => match crate::reject::Reject::find(&e) {
            Some(rejection) => {
                crate::bindings::weir::udf::dead_letters::reject(rejection.reason());
                Ok(())
            }
            None => Err(error(e)),
        },
        Ok(()) => Ok(()),
    }
}

fn not_initialized() -> types::Error {
    failed("weir-sdk: called before a successful init".to_owned())
}

impl<S: Slot> Guest for Adapter<S> {
    fn init(ctx: types::InitContext) -> Result<(), types::Error> {
        let mut init = InitContext::new(ctx.config, ctx.inputs);
        let result = S::Udf::init(&mut init);
        Active::call_finished();
        let udf = result.map_err(error)?;
        let inputs = init.into_inputs();
        S::with(|slot| *slot = Some(Instance { udf, inputs }));
        Ok(())
    }

    fn process_element(element: types::Element) -> Result<(), types::Error> {
        S::with(|slot| {
            let Instance { udf, inputs } = slot.as_mut().ok_or_else(not_initialized)?;
            let input = inputs.get(element.input as usize).ok_or_else(|| {
                failed(format!(
                    "weir-sdk: element from input #{} but only {} inputs are connected",
                    element.input,
                    inputs.len()
                ))
            })?;
            let el = Element::new(
                input,
                element.input,
                element.key,
                element.value,
                element.timestamp,
            );
            let mut ctx = Context::new(el.key(), el.timestamp());
            let result = udf.process_element(&mut ctx, &el);
            Active::call_finished();
            finish_call(result)
        })
    }

    fn on_timer(timer: types::Timer) -> Result<(), types::Error> {
        S::with(|slot| {
            let Instance { udf, .. } = slot.as_mut().ok_or_else(not_initialized)?;
            let domain = match timer.domain {
                types::TimeDomain::EventTime => TimeDomain::EventTime,
                types::TimeDomain::ProcessingTime => TimeDomain::ProcessingTime,
            };
            let timer = Timer::new(domain, timer.timestamp, timer.key);
            let mut ctx = Context::new(timer.key(), timer.timestamp());
            let result = udf.on_timer(&mut ctx, &timer);
            Active::call_finished();
            finish_call(result)
        })
    }
}

impl<S: Slot> BatchGuest for Adapter<S> {
    fn process_batch(batch: Vec<u8>) -> Result<Vec<u8>, types::Error> {
        S::with(|slot| {
            let Instance { udf, inputs } = slot.as_mut().ok_or_else(not_initialized)?;
            crate::batch::run(udf, inputs, batch, Path::Plain).map_err(error)
        })
    }
}

impl<S: Slot> CachedBatchGuest for Adapter<S> {
    fn process_batch(batch: Vec<u8>) -> Result<Vec<u8>, types::Error> {
        S::with(|slot| {
            let Instance { udf, inputs } = slot.as_mut().ok_or_else(not_initialized)?;
            crate::batch::run(udf, inputs, batch, Path::Cached).map_err(error)
        })
    }
}
