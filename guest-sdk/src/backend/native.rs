//! The native backend: forwards every call to the [`World`] of the `TestHost` that is
//! currently calling into the UDF on this thread.

use std::cell::RefCell;
use std::rc::Rc;

use super::world::World;
use crate::host_calls::LogLevel;
use crate::host_calls::{Backend, StateKind};
use crate::time::TimeDomain;
use crate::ttl::StateTtl;

pub(crate) struct Native;

thread_local! {
    static CURRENT: RefCell<Option<Rc<RefCell<World>>>> = const { RefCell::new(None) };
}

/// Makes `world` the target of backend calls until the guard drops; guards nest, so
/// several `TestHost`s can live on one thread.
pub(crate) fn install(world: Rc<RefCell<World>>) -> Installed {
    Installed {
        previous: CURRENT.replace(Some(world)),
    }
}

pub(crate) struct Installed {
    previous: Option<Rc<RefCell<World>>>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        CURRENT.set(self.previous.take());
    }
}

fn with<R>(f: impl FnOnce(&mut World) -> R) -> R {
    let world = CURRENT.with_borrow(|w| w.clone()).unwrap_or_else(|| {
        panic!(
            "weir-sdk: no host is running; natively, state, timer, output and log calls \
             only work while weir_sdk::testing::TestHost is calling the UDF"
        )
    });
    let mut world = world.borrow_mut();
    f(&mut world)
}

impl Backend for Native {
    fn declare_state(name: &str, kind: StateKind, ttl: Option<StateTtl>) -> Result<u32, String> {
        with(|w| w.declare_state(name, kind, ttl))
    }
    fn value_get(state: u32) -> Option<Vec<u8>> {
        with(|w| w.value_get(state))
    }
    fn value_set(state: u32, value: &[u8]) {
        with(|w| w.value_set(state, value))
    }
    fn list_get(state: u32) -> Vec<Vec<u8>> {
        with(|w| w.list_get(state))
    }
    fn list_append(state: u32, item: &[u8]) {
        with(|w| w.list_append(state, item))
    }
    fn list_set(state: u32, items: &[Vec<u8>]) {
        with(|w| w.list_set(state, items))
    }
    fn map_get(state: u32, key: &[u8]) -> Option<Vec<u8>> {
        with(|w| w.map_get(state, key))
    }
    fn map_put(state: u32, key: &[u8], value: &[u8]) {
        with(|w| w.map_put(state, key, value))
    }
    fn map_remove(state: u32, key: &[u8]) {
        with(|w| w.map_remove(state, key))
    }
    fn map_entries(state: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
        with(|w| w.map_entries(state))
    }
    fn clear(state: u32) {
        with(|w| w.clear(state))
    }
    fn clear_all() {
        with(|w| w.clear_all())
    }
    fn register_timer(domain: TimeDomain, at: i64) {
        with(|w| w.register_timer(domain, at))
    }
    fn delete_timer(domain: TimeDomain, at: i64) {
        with(|w| w.delete_timer(domain, at))
    }
    fn current_watermark() -> i64 {
        with(|w| w.watermark)
    }
    fn current_processing_time() -> i64 {
        with(|w| w.processing_time)
    }
    fn declare_output(name: &str) -> Result<u32, String> {
        with(|w| w.declare_output(name))
    }
    fn emit(output: u32, value: &[u8], key: Option<&[u8]>, timestamp: Option<i64>) {
        with(|w| w.emit(output, value, key, timestamp))
    }
    fn log(level: LogLevel, message: &str) {
        with(|w| w.log(level, message))
    }
}
