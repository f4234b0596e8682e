//! What the host hands a UDF: the init context, elements, timers, and the per-call
//! context giving access to timers, clocks and logging.

use std::any::type_name;

use anyhow::{anyhow, Context as _};
use serde::de::{Deserialize, DeserializeOwned};

use crate::backend::Active;
use crate::host_calls::{Backend, LogLevel, StateKind};
use crate::output::Output;
use crate::result::Result;
use crate::state::{ListState, MapState, ValueState};
use crate::time::TimeDomain;
use crate::ttl::StateTtl;

/// Logging methods, the same on [`InitContext`] and [`Context`]; the host prefixes lines
/// with the UDF's name and the current key.
macro_rules! log_methods {
    () => {
        /// Logs `message` at `level`.
        pub fn log(&self, level: LogLevel, message: impl AsRef<str>) {
            Active::log(level, message.as_ref())
        }
        /// Logs at trace level.
        pub fn log_trace(&self, message: impl AsRef<str>) {
            self.log(LogLevel::Trace, message)
        }
        /// Logs at debug level.
        pub fn log_debug(&self, message: impl AsRef<str>) {
            self.log(LogLevel::Debug, message)
        }
        /// Logs at info level.
        pub fn log_info(&self, message: impl AsRef<str>) {
            self.log(LogLevel::Info, message)
        }
        /// Logs at warn level.
        pub fn log_warn(&self, message: impl AsRef<str>) {
            self.log(LogLevel::Warn, message)
        }
        /// Logs at error level.
        pub fn log_error(&self, message: impl AsRef<str>) {
            self.log(LogLevel::Error, message)
        }
    };
}

/// Passed to [`ProcessFunction::init`](crate::ProcessFunction::init): the config, the
/// input names, and the place to declare states and outputs.
pub struct InitContext {
    config: Vec<(String, String)>,
    inputs: Vec<String>,
}

impl InitContext {
    pub(crate) fn new(config: Vec<(String, String)>, inputs: Vec<String>) -> Self {
        InitContext { config, inputs }
    }

    /// Gives the input names back to the adapter, which resolves element inputs with them.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub(crate) fn into_inputs(self) -> Vec<String> {
        self.inputs
    }

    /// The config as a typed struct. Each value is read as JSON when it parses as JSON
    /// (so `17`, `true`, `1.5` become numbers and booleans) and as text otherwise; a
    /// field of type `String` always gets the text as written. Errors name the key.
    pub fn config<T: DeserializeOwned>(&self) -> Result<T> {
        crate::config::from_entries(&self.config)
    }

    /// The raw text of config entry `key` (the last one, if repeated).
    pub fn config_value(&self, key: &str) -> Option<&str> {
        self.config
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All config entries, in the host's order.
    pub fn config_entries(&self) -> &[(String, String)] {
        &self.config
    }

    /// The names of the connected inputs; [`Element::input_index`] indexes this.
    pub fn inputs(&self) -> &[String] {
        &self.inputs
    }

    fn declare_state(&mut self, name: &str, kind: StateKind, ttl: Option<StateTtl>) -> Result<u32> {
        Active::declare_state(name, kind, ttl)
            .map_err(|e| anyhow!("cannot declare state `{name}`: {e}"))
    }

    /// Declares a value state: one `T` per key.
    pub fn value_state<T>(&mut self, name: &str) -> Result<ValueState<T>> {
        let id = self.declare_state(name, StateKind::Value, None)?;
        Ok(ValueState::new(id, name))
    }

    /// Declares a value state whose value expires `ttl` after it was last written (see
    /// [`StateTtl`]).
    pub fn value_state_with_ttl<T>(&mut self, name: &str, ttl: StateTtl) -> Result<ValueState<T>> {
        let id = self.declare_state(name, StateKind::Value, Some(ttl))?;
        Ok(ValueState::new(id, name))
    }

    /// Declares a list state: an ordered list of `T` per key.
    pub fn list_state<T>(&mut self, name: &str) -> Result<ListState<T>> {
        let id = self.declare_state(name, StateKind::List, None)?;
        Ok(ListState::new(id, name))
    }

    /// Declares a list state whose items each expire `ttl` after they were last written
    /// (see [`StateTtl`]).
    pub fn list_state_with_ttl<T>(&mut self, name: &str, ttl: StateTtl) -> Result<ListState<T>> {
        let id = self.declare_state(name, StateKind::List, Some(ttl))?;
        Ok(ListState::new(id, name))
    }

    /// Declares a map state: a map from `K` to `V` per key.
    pub fn map_state<K, V>(&mut self, name: &str) -> Result<MapState<K, V>> {
        let id = self.declare_state(name, StateKind::Map, None)?;
        Ok(MapState::new(id, name))
    }

    /// Declares a map state whose entries each expire `ttl` after they were last written
    /// (see [`StateTtl`]).
    pub fn map_state_with_ttl<K, V>(
        &mut self,
        name: &str,
        ttl: StateTtl,
    ) -> Result<MapState<K, V>> {
        let id = self.declare_state(name, StateKind::Map, Some(ttl))?;
        Ok(MapState::new(id, name))
    }

    /// Declares the main output (`main`).
    pub fn main_output<T>(&mut self) -> Result<Output<T>> {
        self.output("main")
    }

    /// Declares output `name` (a side output unless it is `main`); the pipeline must
    /// route it to a sink.
    pub fn output<T>(&mut self, name: &str) -> Result<Output<T>> {
        let id = Active::declare_output(name)
            .map_err(|e| anyhow!("cannot declare output `{name}`: {e}"))?;
        Ok(Output::new(id, name))
    }

    log_methods!();
}

/// One input record, with the key and event time the host extracted.
pub struct Element<'a> {
    input: &'a str,
    input_index: u32,
    // Borrowed from the batch buffer on the batched path, owned on the per-call path.
    key: std::borrow::Cow<'a, [u8]>,
    value: std::borrow::Cow<'a, [u8]>,
    timestamp: i64,
}

impl<'a> Element<'a> {
    pub(crate) fn new(
        input: &'a str,
        input_index: u32,
        key: impl Into<std::borrow::Cow<'a, [u8]>>,
        value: impl Into<std::borrow::Cow<'a, [u8]>>,
        timestamp: i64,
    ) -> Self {
        Element {
            input,
            input_index,
            key: key.into(),
            value: value.into(),
            timestamp,
        }
    }

    /// The name of the input the element came from.
    pub fn input(&self) -> &str {
        self.input
    }

    /// The index of that input in [`InitContext::inputs`].
    pub fn input_index(&self) -> u32 {
        self.input_index
    }

    /// The key (UTF-8 text for JSON string and number keys).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The key as text.
    pub fn key_str(&self) -> Result<&str> {
        key_str(&self.key)
    }

    /// The record's bytes (a JSON document for the JSON sources).
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The record decoded from JSON. `T` may borrow from the record (`&str`,
    /// `&RawValue`) to avoid copies. Errors name the input, the type and the field.
    pub fn json<'de, T: Deserialize<'de>>(&'de self) -> Result<T> {
        // Parsed without tracking the path first: tracking it costs on every field, and
        // a record that fails is parsed again, with it, for the message.
        let mut de = serde_json::Deserializer::from_slice(&self.value);
        if let Ok(value) = T::deserialize(&mut de) {
            if de.end().is_ok() {
                return Ok(value);
            }
        }
        let mut de = serde_json::Deserializer::from_slice(&self.value);
        let parsed = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| e.to_string())
            .and_then(|v| de.end().map(|()| v).map_err(|e| e.to_string()));
        parsed.map_err(|e| {
            const SHOWN: usize = 200;
            let text = String::from_utf8_lossy(&self.value[..self.value.len().min(SHOWN)]);
            let more = if self.value.len() > SHOWN { "..." } else { "" };
            anyhow!(
                "input `{}`: record is not a valid {}: {e} (record: {text}{more})",
                self.input,
                short_type_name::<T>()
            )
        })
    }

    /// The event time of the record, in milliseconds since the epoch.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }
}

/// A timer that fired.
pub struct Timer<'a> {
    domain: TimeDomain,
    timestamp: i64,
    // Borrowed from the batch buffer on the batched path.
    key: std::borrow::Cow<'a, [u8]>,
}

impl<'a> Timer<'a> {
    pub(crate) fn new(
        domain: TimeDomain,
        timestamp: i64,
        key: impl Into<std::borrow::Cow<'a, [u8]>>,
    ) -> Self {
        Timer {
            domain,
            timestamp,
            key: key.into(),
        }
    }

    /// When the timer was set to fire.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// Which clock it follows.
    pub fn domain(&self) -> TimeDomain {
        self.domain
    }

    /// The key it was registered for (the current key).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The key as text.
    pub fn key_str(&self) -> Result<&str> {
        key_str(&self.key)
    }
}

/// The context of one `process_element` or `on_timer` call: the current key and time,
/// the timers of that key, the clocks, and logging. State handles and outputs need no
/// context: the host scopes them to the current key.
pub struct Context<'a> {
    key: &'a [u8],
    timestamp: i64,
}

impl<'a> Context<'a> {
    pub(crate) fn new(key: &'a [u8], timestamp: i64) -> Self {
        Context { key, timestamp }
    }

    /// The key being processed.
    pub fn current_key(&self) -> &'a [u8] {
        self.key
    }

    /// The key being processed, as text.
    pub fn current_key_str(&self) -> Result<&'a str> {
        key_str(self.key)
    }

    /// The timestamp of the element or timer being processed.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The event-time watermark (`i64::MIN` before the first record, `i64::MAX` once all
    /// inputs have ended).
    pub fn current_watermark(&self) -> i64 {
        Active::current_watermark()
    }

    /// The host's wall clock, in milliseconds since the epoch.
    pub fn current_processing_time(&self) -> i64 {
        Active::current_processing_time()
    }

    /// Registers an event-time timer for the current key. Timers are unique per (key,
    /// domain, timestamp); one at or before the watermark fires at its next advance.
    pub fn register_event_timer(&self, timestamp: i64) {
        Active::register_timer(TimeDomain::EventTime, timestamp)
    }

    /// Deletes an event-time timer of the current key (a no-op if there is none).
    pub fn delete_event_timer(&self, timestamp: i64) {
        Active::delete_timer(TimeDomain::EventTime, timestamp)
    }

    /// Registers a processing-time timer for the current key.
    pub fn register_processing_timer(&self, timestamp: i64) {
        Active::register_timer(TimeDomain::ProcessingTime, timestamp)
    }

    /// Deletes a processing-time timer of the current key (a no-op if there is none).
    pub fn delete_processing_timer(&self, timestamp: i64) {
        Active::delete_timer(TimeDomain::ProcessingTime, timestamp)
    }

    /// Registers a timer in `domain`.
    pub fn register_timer(&self, domain: TimeDomain, timestamp: i64) {
        Active::register_timer(domain, timestamp)
    }

    /// Deletes a timer in `domain`.
    pub fn delete_timer(&self, domain: TimeDomain, timestamp: i64) {
        Active::delete_timer(domain, timestamp)
    }

    /// Clears every state of the current key (its timers stay).
    pub fn clear_all_state(&self) {
        Active::clear_all()
    }

    /// Emits `value` to `output`, without a key, at the current timestamp; the same as
    /// [`Output::emit`].
    pub fn emit<T: serde::Serialize>(&self, output: &Output<T>, value: &T) -> Result<()> {
        output.emit(value)
    }

    log_methods!();
}

fn key_str(key: &[u8]) -> Result<&str> {
    std::str::from_utf8(key).with_context(|| format!("key is not UTF-8 text: {key:?}"))
}

/// `Vec<my_udf::Order>` rather than `alloc::vec::Vec<my_udf::Order>`: paths of std types
/// are noise in error messages.
fn short_type_name<T>() -> String {
    type_name::<T>()
        .replace("alloc::vec::", "")
        .replace("alloc::string::", "")
        .replace("core::option::", "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Order<'a> {
        id: u32,
        item: &'a str,
    }

    #[test]
    fn element_json_borrows_and_reports_the_failing_field() {
        let el = Element::new(
            "orders",
            0,
            b"1".to_vec(),
            br#"{"id": 1, "item": "tea"}"#.to_vec(),
            5,
        );
        let order: Order = el.json().unwrap();
        assert_eq!(order.item, "tea");

        let el = Element::new(
            "orders",
            0,
            b"1".to_vec(),
            br#"{"id": "x", "item": "tea"}"#.to_vec(),
            5,
        );
        let err = el.json::<Order>().unwrap_err().to_string();
        assert!(err.contains("input `orders`"), "{err}");
        assert!(err.contains("Order"), "{err}");
        assert!(err.contains("id: invalid type: string \"x\""), "{err}");

        let el = Element::new(
            "orders",
            0,
            b"1".to_vec(),
            br#"{"id": 1, "item": "tea"} x"#.to_vec(),
            5,
        );
        let err = el.json::<Order>().unwrap_err().to_string();
        assert!(err.contains("trailing characters"), "{err}");
    }

    #[test]
    fn keys_as_text() {
        let el = Element::new("main", 0, vec![0xff], b"{}".to_vec(), 5);
        assert!(el.key_str().unwrap_err().to_string().contains("not UTF-8"));
        let t = Timer::new(TimeDomain::EventTime, 3, b"k".to_vec());
        assert_eq!(t.key_str().unwrap(), "k");
    }
}
