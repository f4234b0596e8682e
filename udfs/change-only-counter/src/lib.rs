//! Clicks per ad in the last `window` of event time, emitted only when the count
//! changes, including when it falls back to 0.
//!
//! Input: `{"ad_id": "...", "clicked_at": "..."}`, keyed by `ad_id` with `clicked_at` as
//! the event time (the host extracts both, so the value is never parsed).
//! Output: `{"ad_id": ..., "clicks": N, "updated_at": "YYYY-MM-DD HH:MM:SS.mmm"}`, keyed
//! by `ad_id` (an upsert stream of the current count).
//!
//! - On a click at `ts`: hold `ts`, set an event-time timer at `ts + window`, and emit the
//!   number of held clicks (at `updated_at = ts`) if it differs from the last emitted one.
//! - On a timer at `T`: drop clicks with `ts <= T - window`, emit (at `updated_at = T`) if
//!   the count changed, and clear the key once no click is held.
//!
//! Config: `window` (default `5m`); `carry` (default none): fields of the click, by
//! name and comma-separated, copied into every count of its ad (the ad's latest click's
//! values), e.g. `carry = "campaign_id"` so that a next stage can key the counts by
//! campaign. Without it the click is never parsed.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use weir_sdk::prelude::*;
use weir_sdk::time::format_millis;

#[derive(Deserialize)]
struct Config {
    #[serde(default = "five_minutes")]
    window: Duration,
    /// Comma-separated field names of the click to copy into the counts.
    #[serde(default)]
    carry: String,
}

fn five_minutes() -> Duration {
    Duration::from_mins(5)
}

/// Everything one ad needs, in a single state so a click is one read and one write.
///
/// Stored under schema 1: the click times as one run of little-endian bytes, which
/// encodes and decodes as a copy, so an ad holding 300 clicks costs about what one
/// holding 3 does (the value is written back after every batch that touches the ad,
/// and a `Vec<i64>` of varints cost ~100 guest instructions per held click each time).
#[derive(Serialize, Deserialize, Default)]
struct Clicks {
    /// Event times of the clicks still in the window, in arrival order.
    #[serde(with = "packed")]
    times: Vec<i64>,
    /// The count last emitted (0 before the first emission).
    emitted: u32,
}

/// What schema 0 (the first version of this UDF) stored: the same fields, the times
/// as a sequence of varints.
#[derive(Deserialize)]
struct ClicksV0 {
    times: Vec<i64>,
    emitted: u32,
}

/// `Vec<i64>` as one byte string of 8-byte little-endian integers.
mod packed {
    use serde::de::{Error, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    // The times' own bytes are the stored bytes: one copy, no loop.
    #[cfg(target_endian = "big")]
    compile_error!("the packed click times are stored little-endian");

    pub fn serialize<S: Serializer>(times: &[i64], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(zerocopy::IntoBytes::as_bytes(times))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<i64>, D::Error> {
        struct Packed;
        impl Visitor<'_> for Packed {
            type Value = Vec<i64>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a byte string of 8-byte little-endian integers")
            }

            fn visit_bytes<E: Error>(self, bytes: &[u8]) -> Result<Vec<i64>, E> {
                if !bytes.len().is_multiple_of(8) {
                    return Err(E::invalid_length(bytes.len(), &self));
                }
                Ok(bytes
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect())
            }
        }
        deserializer.deserialize_bytes(Packed)
    }
}

/// A count as emitted: `{"ad_id": ..., "clicks": N, "updated_at": ...}` and then the
/// carried fields, in name order.
struct ClickCount {
    ad_id: String,
    clicks: u32,
    updated_at: String,
    /// The carried fields of the ad's latest click, as the JSON object the state holds
    /// (none without `carry`).
    carried: Option<String>,
}

impl Serialize for ClickCount {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeMap as _};
        let carried = match &self.carried {
            Some(text) => fields(None, text.as_bytes()).map_err(S::Error::custom)?,
            None => Vec::new(),
        };
        let mut map = serializer.serialize_map(Some(3 + carried.len()))?;
        map.serialize_entry("ad_id", &self.ad_id)?;
        map.serialize_entry("clicks", &self.clicks)?;
        map.serialize_entry("updated_at", &self.updated_at)?;
        for (name, value) in &carried {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// The members of the JSON object `json`, or only those `names` lists, in name order
/// (the last of duplicates), each value's text as it stands: parsed without building
/// the values, so a click costs little more than a scan of its bytes.
fn fields<'de>(
    names: Option<&[String]>,
    json: &'de [u8],
) -> serde_json::Result<Vec<(Cow<'de, str>, &'de RawValue)>> {
    struct Pick<'n>(Option<&'n [String]>);
    impl<'de> Visitor<'de> for Pick<'_> {
        type Value = Vec<(Cow<'de, str>, &'de RawValue)>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found: Self::Value = Vec::new();
            while let Some(Field(name)) = map.next_key()? {
                if self.0.is_none_or(|names| names.iter().any(|n| *n == name)) {
                    found.push((name, map.next_value()?));
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            // In name order, the last of each name.
            found.reverse();
            found.sort_by(|a, b| a.0.cmp(&b.0));
            found.dedup_by(|later, first| later.0 == first.0);
            Ok(found)
        }
    }
    /// A member's name, borrowed unless it holds escapes.
    struct Field<'de>(Cow<'de, str>);
    impl<'de> Deserialize<'de> for Field<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Name;
            impl<'de> Visitor<'de> for Name {
                type Value = Cow<'de, str>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a member name")
                }
                fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                    Ok(Cow::Borrowed(v))
                }
                fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                    Ok(Cow::Owned(v.to_owned()))
                }
            }
            d.deserialize_str(Name).map(Field)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    let found = de.deserialize_map(Pick(names))?;
    de.end()?;
    Ok(found)
}

/// The process function; see the crate docs.
pub struct ChangeOnlyCounter {
    window: i64,
    clicks: ValueState<Clicks>,
    /// The fields `carry` names, and the state that holds the ad's latest click's
    /// values of them as a JSON object (`None` without `carry`: no such state).
    carry: Option<(Vec<String>, ValueState<String>)>,
    out: Output<ClickCount>,
}

impl ChangeOnlyCounter {
    /// Emits the held count if it differs from the last emitted one.
    fn emit_if_changed(&self, ctx: &Context, clicks: &mut Clicks, at: i64) -> Result<()> {
        let count = u32::try_from(clicks.times.len())?;
        if count == clicks.emitted {
            return Ok(());
        }
        clicks.emitted = count;
        let carried = match &self.carry {
            Some((_, carried)) => Some(carried.get()?.unwrap_or_else(|| "{}".to_owned())),
            None => None,
        };
        let record = ClickCount {
            ad_id: ctx.current_key_str()?.to_owned(),
            clicks: count,
            updated_at: format_millis(at),
            carried,
        };
        self.out
            .emit_record(Record::new(record).with_key(ctx.current_key()))
    }
}

/// Keeps the `names` fields of `click` in `carried` (a JSON object, in name order), if
/// they changed.
fn carry_fields(names: &[String], carried: &ValueState<String>, click: &Element) -> Result<()> {
    let values = match fields(Some(names), click.value()) {
        Ok(values) => values,
        // Not an object: the SDK's parse says where and why.
        Err(_) => {
            click.json::<BTreeMap<&str, &RawValue>>()?;
            bail!("the click is not a JSON object");
        }
    };
    let mut text = String::with_capacity(64);
    text.push('{');
    for (index, (name, value)) in values.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        text.push_str(&serde_json::to_string(name)?);
        text.push(':');
        text.push_str(value.get());
    }
    text.push('}');
    if carried.get()?.as_deref() != Some(text.as_str()) {
        carried.set(&text)?;
    }
    Ok(())
}

impl ProcessFunction for ChangeOnlyCounter {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        let cfg: Config = ctx.config()?;
        let window = cfg.window.as_millis();
        ensure!(
            window > 0,
            "config `window` must be longer than 0, got {}",
            cfg.window
        );
        let fields: Vec<String> = cfg
            .carry
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect();
        let carry = match fields.is_empty() {
            true => None,
            false => Some((fields, ctx.value_state("carried")?)),
        };
        Ok(ChangeOnlyCounter {
            window,
            carry,
            clicks: ctx
                .value_state("clicks")?
                .schema(1)
                .migrate_from(0, |old: ClicksV0| Clicks {
                    times: old.times,
                    emitted: old.emitted,
                }),
            out: ctx.main_output()?,
        })
    }

    // `modify` changes the ad's state in place: a click costs the same whether the ad
    // holds 3 clicks or 3,000.
    fn process_element(&mut self, ctx: &mut Context, click: &Element) -> Result<()> {
        let ts = click.timestamp();
        ctx.register_event_timer(ts.saturating_add(self.window));
        if let Some((fields, carried)) = &self.carry {
            carry_fields(fields, carried, click)?;
        }
        self.clicks.modify(|clicks| {
            let clicks = clicks.get_or_insert_with(Clicks::default);
            clicks.times.push(ts);
            self.emit_if_changed(ctx, clicks, ts)
        })
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: &Timer) -> Result<()> {
        let now = timer.timestamp();
        let expired = now.saturating_sub(self.window);
        self.clicks.modify(|state| {
            let Some(clicks) = state else {
                return Ok(());
            };
            clicks.times.retain(|&ts| ts > expired);
            self.emit_if_changed(ctx, clicks, now)?;
            if clicks.times.is_empty() {
                *state = None;
                if let Some((_, carried)) = &self.carry {
                    carried.clear();
                }
            }
            Ok(())
        })
    }
}

weir_sdk::export!(ChangeOnlyCounter);
