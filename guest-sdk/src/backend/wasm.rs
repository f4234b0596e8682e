//! The component backend: each call is the generated import, nothing more.

use super::{Backend, StateKind};
use crate::__private::bindings::weir::udf::{logging, output, state, timers, types};
use crate::{LogLevel, TimeDomain};

pub(crate) struct Wasm;

#[inline]
fn domain(d: TimeDomain) -> types::TimeDomain {
    match d {
        TimeDomain::EventTime => types::TimeDomain::EventTime,
        TimeDomain::ProcessingTime => types::TimeDomain::ProcessingTime,
    }
}

impl Backend for Wasm {
    fn declare_state(name: &str, kind: StateKind) -> Result<u32, String> {
        let kind = match kind {
            StateKind::Value => types::StateKind::Value,
            StateKind::List => types::StateKind::List,
            StateKind::Map => types::StateKind::Map,
        };
        state::declare(name, kind).map_err(|e| e.message)
    }
    #[inline]
    fn value_get(s: u32) -> Option<Vec<u8>> {
        state::value_get(s)
    }
    #[inline]
    fn value_set(s: u32, value: &[u8]) {
        state::value_set(s, value)
    }
    #[inline]
    fn list_get(s: u32) -> Vec<Vec<u8>> {
        state::list_get(s)
    }
    #[inline]
    fn list_append(s: u32, item: &[u8]) {
        state::list_append(s, item)
    }
    #[inline]
    fn list_set(s: u32, items: &[Vec<u8>]) {
        state::list_set(s, items)
    }
    #[inline]
    fn map_get(s: u32, key: &[u8]) -> Option<Vec<u8>> {
        state::map_get(s, key)
    }
    #[inline]
    fn map_put(s: u32, key: &[u8], value: &[u8]) {
        state::map_put(s, key, value)
    }
    #[inline]
    fn map_remove(s: u32, key: &[u8]) {
        state::map_remove(s, key)
    }
    #[inline]
    fn map_entries(s: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
        state::map_entries(s)
    }
    #[inline]
    fn clear(s: u32) {
        state::clear(s)
    }
    #[inline]
    fn clear_all() {
        state::clear_all()
    }
    #[inline]
    fn register_timer(d: TimeDomain, at: i64) {
        timers::register(domain(d), at)
    }
    #[inline]
    fn delete_timer(d: TimeDomain, at: i64) {
        timers::delete(domain(d), at)
    }
    #[inline]
    fn current_watermark() -> i64 {
        timers::current_watermark()
    }
    #[inline]
    fn current_processing_time() -> i64 {
        timers::current_processing_time()
    }
    fn declare_output(name: &str) -> Result<u32, String> {
        output::declare(name).map_err(|e| e.message)
    }
    #[inline]
    fn emit(out: u32, value: &[u8], key: Option<&[u8]>, timestamp: Option<i64>) {
        output::emit(out, value, key, timestamp)
    }
    fn log(level: LogLevel, message: &str) {
        let level = match level {
            LogLevel::Trace => types::LogLevel::Trace,
            LogLevel::Debug => types::LogLevel::Debug,
            LogLevel::Info => types::LogLevel::Info,
            LogLevel::Warn => types::LogLevel::Warn,
            LogLevel::Error => types::LogLevel::Error,
        };
        logging::log(level, message)
    }
}
