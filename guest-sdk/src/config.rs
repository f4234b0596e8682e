//! Typed config from the host's text key/value pairs.
//!
//! The pipeline file and `--config KEY=VALUE` give text, but UDF authors want numbers,
//! booleans and durations. Each value is a serde deserializer that reads the text as
//! JSON where the target asks for "anything" or a non-text type (so `17`, `true`,
//! `[1, 2]` work), and as the raw text where the target wants a string, so a `String`
//! field given `007` gets `"007"` and an enum field given `processing` gets that variant.

use serde::de::value::{BorrowedStrDeserializer, MapDeserializer};
use serde::de::{DeserializeOwned, Deserializer, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::Value;

use crate::result::Result;

/// Deserializes `T` from config entries; for repeated keys the last one wins.
pub(crate) fn from_entries<T: DeserializeOwned>(entries: &[(String, String)]) -> Result<T> {
    let mut unique: Vec<(&str, ConfigValue<'_>)> = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let value = ConfigValue(value);
        match unique.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => unique.push((key, value)),
        }
    }
    let map = MapDeserializer::<_, serde_json::Error>::new(unique.into_iter());
    serde_path_to_error::deserialize(map).map_err(|e| {
        let path = e.path().to_string();
        if path.is_empty() || path == "." || path == "?" {
            anyhow::anyhow!("invalid config: {}", e.into_inner())
        } else {
            anyhow::anyhow!("invalid config `{path}`: {}", e.into_inner())
        }
    })
}

/// One config value's text.
#[derive(Clone, Copy)]
struct ConfigValue<'a>(&'a str);

impl<'a> ConfigValue<'a> {
    fn json(self) -> Option<Value> {
        serde_json::from_str(self.0).ok()
    }
}

impl<'de> IntoDeserializer<'de, serde_json::Error> for ConfigValue<'de> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> Deserializer<'de> for ConfigValue<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.json() {
            Some(value) => value.deserialize_any(visitor),
            None => visitor.visit_borrowed_str(self.0),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_borrowed_str(self.0)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_borrowed_str(self.0)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_borrowed_str(self.0)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_borrowed_str(self.0)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        // A present key is `Some`, even if empty: leave the key out for `None`.
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.json() {
            // `{"Variant": ...}` or `"Variant"` written as JSON.
            Some(value @ (Value::Object(_) | Value::String(_))) => {
                value.deserialize_enum(name, variants, visitor)
            }
            _ => BorrowedStrDeserializer::<serde_json::Error>::new(self.0)
                .deserialize_enum(name, variants, visitor),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 bytes byte_buf unit
        unit_struct seq tuple tuple_struct map struct ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::Duration;
    use serde::Deserialize;

    fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        Event,
        Processing,
    }

    fn five_minutes() -> Duration {
        Duration::from_mins(5)
    }

    #[derive(Deserialize, Debug, PartialEq)]
    struct Config {
        #[serde(default = "five_minutes")]
        window: Duration,
        limit: u32,
        ratio: f64,
        enabled: bool,
        name: String,
        code: String,
        mode: Mode,
        tags: Vec<String>,
        maybe: Option<i64>,
    }

    #[test]
    fn values_are_json_when_wanted_and_text_otherwise() {
        let cfg: Config = from_entries(&entries(&[
            ("limit", "17"),
            ("ratio", "1.5"),
            ("enabled", "true"),
            ("name", "clicks"),
            ("code", "007"),
            ("mode", "processing"),
            ("tags", r#"["a", "b"]"#),
            ("unknown", "ignored"),
        ]))
        .unwrap();
        assert_eq!(
            cfg,
            Config {
                window: Duration::from_mins(5),
                limit: 17,
                ratio: 1.5,
                enabled: true,
                name: "clicks".into(),
                code: "007".into(),
                mode: Mode::Processing,
                tags: vec!["a".into(), "b".into()],
                maybe: None,
            }
        );
    }

    #[test]
    fn durations_options_and_repeated_keys() {
        #[derive(Deserialize)]
        struct C {
            window: Duration,
            timeout: Duration,
            maybe: Option<i64>,
            mode: Mode,
        }
        let c: C = from_entries(&entries(&[
            ("window", "1m"),
            ("window", "2h"),
            ("timeout", "250"),
            ("maybe", "-3"),
            ("mode", "\"event\""),
        ]))
        .unwrap();
        assert_eq!(c.window, Duration::from_hours(2));
        assert_eq!(c.timeout.as_millis(), 250);
        assert_eq!(c.maybe, Some(-3));
        assert_eq!(c.mode, Mode::Event);
    }

    #[test]
    fn errors_name_the_key() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct C {
            window: Duration,
            limit: Option<u32>,
        }
        let err = from_entries::<C>(&entries(&[("window", "5 parsecs")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid config `window`: invalid duration \"5 parsecs\""),
            "{err}"
        );
        let err = from_entries::<C>(&entries(&[("window", "1s"), ("limit", "many")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid config `limit`: invalid type: string \"many\""),
            "{err}"
        );
        let err = from_entries::<C>(&[]).unwrap_err().to_string();
        assert_eq!(err, "invalid config: missing field `window`");
        let err = from_entries::<Mode>(&entries(&[("mode", "x")]))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("invalid config"), "{err}");
    }

    #[test]
    fn unknown_enum_variant() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct C {
            mode: Mode,
        }
        let err = from_entries::<C>(&entries(&[("mode", "wall")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`mode`") && err.contains("unknown variant `wall`"),
            "{err}"
        );
    }
}
