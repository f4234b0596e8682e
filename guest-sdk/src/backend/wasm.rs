//! The component backend: each call is the generated import, unless a batch is running,
//! in which case it goes to the batch's guest-side overlay (see `crate::batch`).

use crate::bindings::weir::udf::{logging, output, state, timers, types};
use crate::host_calls::LogLevel;
use crate::host_calls::{Backend, CachedValue, StateKind, ValueView};
use crate::overlay;
use crate::time::TimeDomain;
use crate::ttl::StateTtl;

pub(crate) struct Wasm;

#[inline]
fn domain(d: TimeDomain) -> types::TimeDomain {
    match d {
        TimeDomain::EventTime => types::TimeDomain::EventTime,
        TimeDomain::ProcessingTime => types::TimeDomain::ProcessingTime,
    }
}

impl Backend for Wasm {
    fn declare_state(name: &str, kind: StateKind, ttl: Option<StateTtl>) -> Result<u32, String> {
        let kind = match kind {
            StateKind::Value => types::StateKind::Value,
            StateKind::List => types::StateKind::List,
            StateKind::Map => types::StateKind::Map,
        };
        let id = match ttl {
            None => state::declare(name, kind),
            Some(ttl) => {
                let wit = types::StateTtl {
                    millis: ttl.ttl().as_millis() as u64,
                    domain: domain(ttl.domain()),
                    refresh: match ttl.is_refreshed_on_read() {
                        true => types::TtlRefresh::OnReadAndWrite,
                        false => types::TtlRefresh::OnWrite,
                    },
                };
                state::declare_with_ttl(name, kind, wit)
            }
        }
        .map_err(|e| e.message)?;
        overlay::declared(id, ttl);
        Ok(id)
    }
    #[inline]
    fn value_get(s: u32) -> Option<Vec<u8>> {
        overlay::with(|o| o.value_get(s)).unwrap_or_else(|| state::value_get(s))
    }
    #[inline]
    fn value_set(s: u32, value: &[u8]) {
        overlay::with(|o| o.value_set(s, value)).unwrap_or_else(|| state::value_set(s, value))
    }
    #[inline]
    fn list_get(s: u32) -> Vec<Vec<u8>> {
        overlay::with(|o| o.list_get(s)).unwrap_or_else(|| state::list_get(s))
    }
    #[inline]
    fn list_append(s: u32, item: &[u8]) {
        overlay::with(|o| o.list_append(s, item)).unwrap_or_else(|| state::list_append(s, item))
    }
    #[inline]
    fn list_set(s: u32, items: &[Vec<u8>]) {
        overlay::with(|o| o.list_set(s, items)).unwrap_or_else(|| state::list_set(s, items))
    }
    #[inline]
    fn map_get(s: u32, key: &[u8]) -> Option<Vec<u8>> {
        overlay::with(|o| o.map_get(s, key)).unwrap_or_else(|| state::map_get(s, key))
    }
    #[inline]
    fn map_put(s: u32, key: &[u8], value: &[u8]) {
        overlay::with(|o| o.map_put(s, key, value)).unwrap_or_else(|| state::map_put(s, key, value))
    }
    #[inline]
    fn map_remove(s: u32, key: &[u8]) {
        overlay::with(|o| o.map_remove(s, key)).unwrap_or_else(|| state::map_remove(s, key))
    }
    #[inline]
    fn map_entries(s: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
        overlay::with(|o| o.map_entries(s)).unwrap_or_else(|| state::map_entries(s))
    }
    #[inline]
    fn clear(s: u32) {
        overlay::with(|o| o.clear(s)).unwrap_or_else(|| state::clear(s))
    }
    #[inline]
    fn clear_all() {
        overlay::with(|o| o.clear_all()).unwrap_or_else(state::clear_all)
    }
    #[inline]
    fn register_timer(d: TimeDomain, at: i64) {
        overlay::with(|o| o.register_timer(d, at))
            .unwrap_or_else(|| timers::register(domain(d), at))
    }
    #[inline]
    fn delete_timer(d: TimeDomain, at: i64) {
        overlay::with(|o| o.delete_timer(d, at)).unwrap_or_else(|| timers::delete(domain(d), at))
    }
    #[inline]
    fn current_watermark() -> i64 {
        overlay::with(|o| o.current_watermark()).unwrap_or_else(timers::current_watermark)
    }
    #[inline]
    fn current_processing_time() -> i64 {
        overlay::with(|o| o.current_processing_time())
            .unwrap_or_else(timers::current_processing_time)
    }
    fn value_view<R>(s: u32, f: impl FnOnce(ValueView<'_>) -> R) -> R {
        let mut f = Some(f);
        if let Some(result) = overlay::with(|o| o.value_view(s, f.take().expect("once"))) {
            return result;
        }
        let bytes = state::value_get(s);
        (f.take().expect("not used by the overlay"))(match &bytes {
            Some(bytes) => ValueView::Bytes(bytes),
            None => ValueView::Absent,
        })
    }
    fn value_take(s: u32) -> Option<Box<dyn CachedValue>> {
        overlay::with(|o| o.value_take(s)).flatten()
    }
    fn value_keep(s: u32, value: Box<dyn CachedValue>) -> anyhow::Result<()> {
        let mut value = Some(value);
        if overlay::with(|o| o.value_keep(s, value.take().expect("once"))).is_none() {
            state::value_set(s, &value.expect("not used by the overlay").encode()?);
        }
        Ok(())
    }
    fn value_restore(s: u32, value: Box<dyn CachedValue>, tainted: bool) {
        let mut value = Some(value);
        if overlay::with(|o| o.value_restore(s, value.take().expect("once"), tainted)).is_none() {
            unreachable!("state #{s}: a decoded value is only handed out inside a batch");
        }
    }
    fn value_set_owned(s: u32, value: Vec<u8>) {
        let mut value = Some(value);
        if overlay::with(|o| o.value_set_owned(s, value.take().expect("once"))).is_none() {
            state::value_set(s, &value.expect("not used by the overlay"));
        }
    }
    fn emit_with<E>(
        out: u32,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut write = Some(write);
        if let Some(result) =
            overlay::with(|o| o.emit_with(out, key, timestamp, write.take().expect("once")))
        {
            return result;
        }
        let mut value = Vec::new();
        (write.take().expect("not used by the overlay"))(&mut value)?;
        output::emit(out, &value, key, timestamp);
        Ok(())
    }
    fn declare_output(name: &str) -> Result<u32, String> {
        output::declare(name).map_err(|e| e.message)
    }
    #[inline]
    fn emit(out: u32, value: &[u8], key: Option<&[u8]>, timestamp: Option<i64>) {
        overlay::with(|o| o.emit(out, value, key, timestamp))
            .unwrap_or_else(|| output::emit(out, value, key, timestamp))
    }
    fn log(level: LogLevel, message: &str) {
        if overlay::with(|o| o.log(level, message)).is_some() {
            return;
        }
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
