//! The host side of the contract's imports: thin adapters from the generated traits to
//! [`Services`](crate::runtime::services::Services). A broken rule of the contract
//! becomes a trap whose message says which rule.

use super::bindings::weir::udf::{dead_letters, logging, output, state, timers, types};
use super::StoreData;
use wasmtime::Result;
use weir_core::state::{StateKind, StateTtl, TtlRefresh};
use weir_core::time::timers::TimeDomain;

fn domain(d: types::TimeDomain) -> TimeDomain {
    match d {
        types::TimeDomain::EventTime => TimeDomain::EventTime,
        types::TimeDomain::ProcessingTime => TimeDomain::ProcessingTime,
    }
}

fn trap(e: anyhow::Error) -> wasmtime::Error {
    wasmtime::Error::msg(format!("{e:#}"))
}

impl types::Host for StoreData {}

fn state_kind(kind: types::StateKind) -> StateKind {
    match kind {
        types::StateKind::Value => StateKind::Value,
        types::StateKind::List => StateKind::List,
        types::StateKind::Map => StateKind::Map,
    }
}

impl StoreData {
    fn declare_state(
        &mut self,
        name: &str,
        kind: types::StateKind,
        ttl: Option<StateTtl>,
    ) -> Result<u32, types::Error> {
        self.host
            .declare_state(name, state_kind(kind), ttl)
            .map_err(|message| types::Error {
                message,
                kind: types::ErrorKind::Failed,
            })
    }
}

impl state::Host for StoreData {
    fn declare(
        &mut self,
        name: String,
        kind: types::StateKind,
    ) -> Result<Result<u32, types::Error>> {
        Ok(self.declare_state(&name, kind, None))
    }

    fn declare_with_ttl(
        &mut self,
        name: String,
        kind: types::StateKind,
        ttl: types::StateTtl,
    ) -> Result<Result<u32, types::Error>> {
        let ttl = StateTtl {
            // Longer than any clock can run: never expires in practice.
            millis: i64::try_from(ttl.millis).unwrap_or(i64::MAX),
            domain: domain(ttl.domain),
            refresh: match ttl.refresh {
                types::TtlRefresh::OnWrite => TtlRefresh::OnWrite,
                types::TtlRefresh::OnReadAndWrite => TtlRefresh::OnReadAndWrite,
            },
        };
        Ok(self.declare_state(&name, kind, Some(ttl)))
    }

    fn value_get(&mut self, state: u32) -> Result<Option<Vec<u8>>> {
        self.host
            .value_get(state)
            .map(|v| v.map(<[u8]>::to_vec))
            .map_err(trap)
    }

    fn value_set(&mut self, state: u32, value: Vec<u8>) -> Result<()> {
        self.host.value_set(state, value).map_err(trap)
    }

    fn list_get(&mut self, state: u32) -> Result<Vec<Vec<u8>>> {
        self.host
            .list_get(state)
            .map(|items| items.into_iter().map(<[u8]>::to_vec).collect())
            .map_err(trap)
    }

    fn list_append(&mut self, state: u32, item: Vec<u8>) -> Result<()> {
        self.host.list_append(state, item).map_err(trap)
    }

    fn list_set(&mut self, state: u32, items: Vec<Vec<u8>>) -> Result<()> {
        self.host.list_set(state, items).map_err(trap)
    }

    fn map_get(&mut self, state: u32, key: Vec<u8>) -> Result<Option<Vec<u8>>> {
        self.host
            .map_get(state, &key)
            .map(|v| v.map(<[u8]>::to_vec))
            .map_err(trap)
    }

    fn map_put(&mut self, state: u32, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.host.map_put(state, key, value).map_err(trap)
    }

    fn map_remove(&mut self, state: u32, key: Vec<u8>) -> Result<()> {
        self.host.map_remove(state, &key).map_err(trap)
    }

    fn map_entries(&mut self, state: u32) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let entries = self.host.map_entries(state).map_err(trap)?;
        Ok(entries
            .into_iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect())
    }

    fn clear(&mut self, state: u32) -> Result<()> {
        self.host.clear(state).map_err(trap)
    }

    fn clear_all(&mut self) -> Result<()> {
        self.host.clear_all().map_err(trap)
    }
}

impl timers::Host for StoreData {
    fn register(&mut self, d: types::TimeDomain, at: i64) -> Result<()> {
        self.host.register_timer(domain(d), at).map_err(trap)
    }

    fn delete(&mut self, d: types::TimeDomain, at: i64) -> Result<()> {
        self.host.delete_timer(domain(d), at).map_err(trap)
    }

    fn current_watermark(&mut self) -> Result<i64> {
        Ok(self.host.current_watermark())
    }

    fn current_processing_time(&mut self) -> Result<i64> {
        Ok(self.host.current_processing_time())
    }
}

impl output::Host for StoreData {
    fn declare(&mut self, name: String) -> Result<Result<u32, types::Error>> {
        Ok(self
            .host
            .declare_output(&name)
            .map_err(|message| types::Error {
                message,
                kind: types::ErrorKind::Failed,
            }))
    }

    fn emit(
        &mut self,
        output: u32,
        value: Vec<u8>,
        key: Option<Vec<u8>>,
        timestamp: Option<i64>,
    ) -> Result<()> {
        self.host.emit(output, value, key, timestamp).map_err(trap)
    }
}

impl dead_letters::Host for StoreData {
    fn reject(&mut self, reason: String) -> Result<()> {
        if self.host.scope.is_none() {
            return Err(wasmtime::Error::msg(
                "dead-letters.reject called outside an element or timer (from init)",
            ));
        }
        self.host.rejected.get_or_insert(reason);
        Ok(())
    }
}

impl logging::Host for StoreData {
    fn log(&mut self, level: types::LogLevel, message: String) -> Result<()> {
        let scope = self.host.scope;
        let key = scope.map_or(&b"-"[..], |s| self.host.keys.entry(s.key).key());
        log(&self.udf, key, level as u8, &message);
        Ok(())
    }
}

/// Writes a UDF's log line with its name and key; `level` counts from trace (0) to error (4).
pub(super) fn log(udf: &str, key: &[u8], level: u8, message: &str) {
    let key = String::from_utf8_lossy(key);
    let key = &*key;
    match level {
        0 => tracing::trace!(target: "weir::udf", udf, key, "{message}"),
        1 => tracing::debug!(target: "weir::udf", udf, key, "{message}"),
        2 => tracing::info!(target: "weir::udf", udf, key, "{message}"),
        3 => tracing::warn!(target: "weir::udf", udf, key, "{message}"),
        _ => tracing::error!(target: "weir::udf", udf, key, "{message}"),
    }
}
