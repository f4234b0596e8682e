//! Typed keyed state over the host's byte store, encoded with `postcard`.
//!
//! Handles are declared in `init` and used without a context: the host scopes every
//! call to the key being processed. Using one outside `process_element` / `on_timer`
//! traps in the host.
//!
//! State outlives a UDF version: a new version swapped into a running pipeline reads what
//! the old one wrote. A value state whose type changes declares a [schema
//! version](ValueState::schema) and how to [migrate](ValueState::migrate_from) values
//! written under an earlier one; they are converted when first read. A value that cannot
//! be decoded is a [`StateDecodeError`]: the host sends the element to the dead-letter
//! output instead of stopping the pipeline.

use std::marker::PhantomData;
use std::sync::Arc;

use anyhow::anyhow;
use serde::{de::DeserializeOwned, Serialize};

use crate::backend::Active;
use crate::host_calls::{Backend, CachedValue, ValueView};
use crate::result::Result;

/// Postcard's output appended to a `Vec`, byte strings copied whole. (Postcard's own
/// `to_extend` writes a byte string or string through `Extend`, a byte at a time in
/// wasm: a value holding 2 KiB of bytes cost ~2,400 guest instructions to encode.)
struct AppendTo(Vec<u8>);

impl postcard::ser_flavors::Flavor for AppendTo {
    type Output = Vec<u8>;

    #[inline(always)]
    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.0.push(byte);
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Vec<u8>> {
        Ok(self.0)
    }
}

/// `value` in postcard, appended to `out`.
fn postcard_into<T: Serialize + ?Sized>(value: &T, out: Vec<u8>) -> postcard::Result<Vec<u8>> {
    postcard::serialize_with_flavor(value, AppendTo(out))
}

fn encode<T: Serialize + ?Sized>(name: &str, value: &T) -> Result<Vec<u8>> {
    // Starting with room for a typical value saves the growth steps of an empty Vec,
    // which showed up in profiles of small states.
    postcard_into(value, Vec::with_capacity(64))
        .map_err(|e| anyhow!("state `{name}`: cannot encode value: {e}"))
}

/// A state's value (a value state's value, a list's item, a map's value) as stored:
/// behind the schema tag and the schema version, whatever the version (see
/// [`SCHEMA_TAG`]), appended to `out`.
fn encode_value_into<T: Serialize>(
    name: &str,
    schema: u8,
    value: &T,
    mut out: Vec<u8>,
) -> Result<Vec<u8>> {
    out.extend_from_slice(&SCHEMA_TAG);
    out.push(schema);
    postcard_into(value, out).map_err(|e| anyhow!("state `{name}`: cannot encode value: {e}"))
}

/// A value state's value as stored.
fn encode_value<T: Serialize>(name: &str, schema: u8, value: &T) -> Result<Vec<u8>> {
    // Starting with room for a typical value saves the growth steps of an empty Vec.
    encode_value_into(name, schema, value, Vec::with_capacity(64))
}

/// A value state's value kept decoded by the backend (see [`ValueState::modify`]).
struct Decoded<T> {
    /// `None` only while [`ValueState::modify`]'s closure has cleared it.
    value: Option<T>,
    schema: u8,
    /// Shared with the state handle, so keeping a value allocates only its box.
    name: Arc<str>,
}

impl<T: Serialize + 'static> CachedValue for Decoded<T> {
    fn encode_into(&self, out: Vec<u8>) -> Result<Vec<u8>> {
        let value = self
            .value
            .as_ref()
            .ok_or_else(|| anyhow!("state `{}`: a cleared value was kept", self.name))?;
        encode_value_into(&self.name, self.schema, value, out)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// A stored state value could not be read as the declared type: it was written by
/// another version of the UDF, as another type. Returned (inside the `anyhow` chain) by
/// state reads; the host routes the element to the dead-letter output.
#[derive(Debug)]
pub struct StateDecodeError(pub String);

impl std::fmt::Display for StateDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StateDecodeError {}

fn decode<T: DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<T> {
    // Leftover bytes mean the value was written as another type.
    let decoded = match postcard::take_from_bytes(bytes) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(format!("{} bytes left over", rest.len())),
        Err(e) => Err(e.to_string()),
    };
    decoded.map_err(|e| {
        anyhow::Error::new(StateDecodeError(format!(
            "state `{name}`: cannot decode stored value as {} ({e}); was it written with another type?",
            std::any::type_name::<T>()
        )))
    })
}

/// The first bytes of every stored value, then the schema version's byte, then the
/// postcard body.
///
/// Every value carries it, schema 0 too, so that a body is never mistaken for a tag. The
/// SDKs' first state format (before December 2026) wrote schema-0 values untagged, and
/// a value state read any value that began with these bytes as tagged: ~1 in 8,192 `i64`
/// timestamps, and some `Vec`s and structs, were read as "schema version N, no
/// migration". A stored value that does not begin with the tag was written untagged in
/// that format and is read as schema 0. One written untagged that began with the tag
/// cannot be told from a tagged one: it is read as tagged, a state decode error (never a
/// wrong value) naming the state, as value states of that format read it.
const SCHEMA_TAG: [u8; 2] = [0xfe, 0xed];

/// The schema version a stored value was written under, and its body. Bytes without the
/// tag are a schema-0 value written untagged in the SDKs' first state format.
fn split_schema(bytes: &[u8]) -> (u8, &[u8]) {
    match bytes {
        [0xfe, 0xed, version, body @ ..] => (*version, body),
        _ => (0, bytes),
    }
}

/// Turns a value stored under an earlier schema version into the current type.
type Migration<T> = Box<dyn Fn(&[u8]) -> Result<T>>;

/// How a state's values (a value state's value, a list's items, a map's values) are
/// stored: the schema version they are written under, and how to read the earlier ones.
/// One implementation for the three kinds of state.
struct Versions<T> {
    name: Arc<str>,
    /// The schema version values are written under (0 when none was declared).
    schema: u8,
    migrations: Vec<(u8, Migration<T>)>,
}

impl<T> Versions<T> {
    fn new(name: &str) -> Self {
        Versions {
            name: name.into(),
            schema: 0,
            migrations: Vec::new(),
        }
    }

    fn migrate_from<Old: DeserializeOwned>(
        &mut self,
        version: u8,
        convert: impl Fn(Old) -> T + 'static,
    ) {
        let name = self.name.clone();
        self.migrations.push((
            version,
            Box::new(move |bytes| decode::<Old>(&name, bytes).map(&convert)),
        ));
    }
}

impl<T: Serialize + DeserializeOwned> Versions<T> {
    /// Decodes stored bytes: the value, and whether it was migrated from an earlier
    /// schema version (and should be written back).
    fn read(&self, bytes: &[u8]) -> Result<(T, bool)> {
        let (version, body) = split_schema(bytes);
        if version == self.schema {
            return decode(&self.name, body).map(|v| (v, false));
        }
        match self.migrations.iter().find(|(from, _)| *from == version) {
            Some((_, migrate)) => migrate(body).map(|v| (v, true)),
            None => Err(anyhow::Error::new(StateDecodeError(format!(
                "state `{}`: the stored value has schema version {version}, this version of the UDF reads version {} and has no migration from {version}",
                self.name, self.schema
            )))),
        }
    }

    /// The value as stored under the current schema.
    fn encode(&self, value: &T) -> Result<Vec<u8>> {
        encode_value(&self.name, self.schema, value)
    }
}

/// One `T` per key (Flink's `ValueState`).
pub struct ValueState<T> {
    id: u32,
    versions: Versions<T>,
    _type: PhantomData<fn() -> T>,
}

impl<T> ValueState<T> {
    pub(crate) fn new(id: u32, name: &str) -> Self {
        ValueState {
            id,
            versions: Versions::new(name),
            _type: PhantomData,
        }
    }

    /// Writes values under schema `version` (1 to 255): raise it when `T` changes, and
    /// say with [`migrate_from`](Self::migrate_from) how to read the earlier versions.
    /// Without a schema, values are written under version 0.
    pub fn schema(mut self, version: u8) -> Self {
        self.versions.schema = version;
        self
    }

    /// Reads values written under schema `version` (0 for values written before the
    /// state had a schema) as `Old`, and converts them with `convert`. A converted value
    /// is written back under the current schema when it is first read, so each key is
    /// migrated once, lazily.
    pub fn migrate_from<Old: DeserializeOwned>(
        mut self,
        version: u8,
        convert: impl Fn(Old) -> T + 'static,
    ) -> Self {
        self.versions.migrate_from(version, convert);
        self
    }

    /// The name the state was declared with.
    pub fn name(&self) -> &str {
        &self.versions.name
    }

    /// Removes the current key's value.
    pub fn clear(&self) {
        Active::clear(self.id)
    }
}

impl<T: Serialize + DeserializeOwned> ValueState<T> {
    /// The current key's value, if any. A value written under an earlier schema version
    /// is migrated (and written back); one that cannot be read is a [`StateDecodeError`].
    pub fn get(&self) -> Result<Option<T>> {
        let migrated = Active::value_view(self.id, |view| match view {
            ValueView::Absent => Ok(None),
            ValueView::Bytes(bytes) => self.versions.read(bytes).map(Some),
            ValueView::Decoded(value) => self.versions.read(&value.encode()?).map(Some),
        })?;
        match migrated {
            Some((value, true)) => {
                self.set(&value)?;
                Ok(Some(value))
            }
            Some((value, false)) => Ok(Some(value)),
            None => Ok(None),
        }
    }

    /// Replaces the current key's value.
    pub fn set(&self, value: &T) -> Result<()> {
        Active::value_set_owned(self.id, self.versions.encode(value)?);
        Ok(())
    }
}

impl<T: Serialize + DeserializeOwned + 'static> ValueState<T> {
    /// Reads the current key's value, lets `f` change it in place, and keeps the result:
    /// `Some` is the new value, `None` clears it. The fast way to update a collection
    /// held in a value (a `Vec` of click times, an order's items): on the batched path
    /// the SDK keeps the decoded value between calls, so the update costs what `f`
    /// does, not what decoding and encoding the whole value would. Nothing is written
    /// if `f` fails. `get` and `set` decode and encode the value on every call.
    ///
    /// ```ignore
    /// self.clicks.modify(|clicks| {
    ///     clicks.get_or_insert_with(Clicks::default).times.push(ts);
    ///     Ok(())
    /// })?;
    /// ```
    pub fn modify<R>(&self, f: impl FnOnce(&mut Option<T>) -> Result<R>) -> Result<R> {
        if let Some(mut kept) = Active::value_take(self.id) {
            let current = kept
                .as_any_mut()
                .downcast_mut::<Decoded<T>>()
                .filter(|d| d.schema == self.versions.schema);
            let Some(decoded) = current else {
                // Kept by a handle of another type: go the long way.
                Active::value_restore(self.id, kept, false);
                return self.modify_stored(f);
            };
            return match f(&mut decoded.value) {
                Ok(r) if decoded.value.is_none() => {
                    Active::clear(self.id);
                    Ok(r)
                }
                Ok(r) => {
                    Active::value_keep(self.id, kept)?;
                    Ok(r)
                }
                Err(e) => {
                    Active::value_restore(self.id, kept, true);
                    Err(e)
                }
            };
        }
        self.modify_stored(f)
    }

    /// [`modify`](Self::modify) of a value the backend holds as bytes (or not at all).
    fn modify_stored<R>(&self, f: impl FnOnce(&mut Option<T>) -> Result<R>) -> Result<R> {
        let mut value = self.get()?;
        let was_set = value.is_some();
        let r = f(&mut value)?;
        match value {
            None if !was_set => {}
            Some(value) => Active::value_keep(
                self.id,
                Box::new(Decoded {
                    value: Some(value),
                    schema: self.versions.schema,
                    name: self.versions.name.clone(),
                }),
            )?,
            None => Active::clear(self.id),
        }
        Ok(r)
    }
}

/// An ordered list of `T` per key (Flink's `ListState`).
///
/// Items have schema versions like a value state's value: each item is stored under the
/// list's [schema](Self::schema), and items written under an earlier one are
/// [migrated](Self::migrate_from) when the list is read.
pub struct ListState<T> {
    id: u32,
    versions: Versions<T>,
    _type: PhantomData<fn() -> T>,
}

impl<T> ListState<T> {
    pub(crate) fn new(id: u32, name: &str) -> Self {
        ListState {
            id,
            versions: Versions::new(name),
            _type: PhantomData,
        }
    }

    /// Writes items under schema `version` (1 to 255): raise it when `T` changes, and
    /// say with [`migrate_from`](Self::migrate_from) how to read the earlier versions.
    pub fn schema(mut self, version: u8) -> Self {
        self.versions.schema = version;
        self
    }

    /// Reads items written under schema `version` (0: before the list had a schema) as
    /// `Old`, and converts them with `convert`. A list with converted items is written
    /// back whole under the current schema when it is read, so each key migrates once.
    pub fn migrate_from<Old: DeserializeOwned>(
        mut self,
        version: u8,
        convert: impl Fn(Old) -> T + 'static,
    ) -> Self {
        self.versions.migrate_from(version, convert);
        self
    }

    /// The name the state was declared with.
    pub fn name(&self) -> &str {
        &self.versions.name
    }

    /// Removes all of the current key's items.
    pub fn clear(&self) {
        Active::clear(self.id)
    }
}

impl<T: Serialize + DeserializeOwned> ListState<T> {
    /// All items of the current key, oldest first; items of an earlier schema version
    /// are migrated (and the list written back).
    pub fn get(&self) -> Result<Vec<T>> {
        let mut migrated = false;
        let items = Active::list_get(self.id)
            .iter()
            .map(|bytes| {
                let (item, converted) = self.versions.read(bytes)?;
                migrated |= converted;
                Ok(item)
            })
            .collect::<Result<Vec<_>>>()?;
        if migrated {
            self.set(&items)?;
        }
        Ok(items)
    }

    /// Appends one item (without reading the others).
    pub fn append(&self, item: &T) -> Result<()> {
        Active::list_append(self.id, &self.versions.encode(item)?);
        Ok(())
    }

    /// Replaces all items; an empty slice clears the list.
    pub fn set(&self, items: &[T]) -> Result<()> {
        let encoded = items
            .iter()
            .map(|item| self.versions.encode(item))
            .collect::<Result<Vec<_>>>()?;
        Active::list_set(self.id, &encoded);
        Ok(())
    }
}

/// A map from `K` to `V` per key (Flink's `MapState`).
///
/// Keys are stored postcard-encoded, and [`entries`](Self::entries) comes in the order of
/// those bytes, which is not `K`'s `Ord` (integers are varints, strings length-prefixed).
/// Values have schema versions like a value state's value (keys do not: a map with
/// another key type is another state).
pub struct MapState<K, V> {
    id: u32,
    versions: Versions<V>,
    _type: PhantomData<fn() -> (K, V)>,
}

impl<K, V> MapState<K, V> {
    pub(crate) fn new(id: u32, name: &str) -> Self {
        MapState {
            id,
            versions: Versions::new(name),
            _type: PhantomData,
        }
    }

    /// Writes values under schema `version` (1 to 255): raise it when `V` changes, and
    /// say with [`migrate_from`](Self::migrate_from) how to read the earlier versions.
    pub fn schema(mut self, version: u8) -> Self {
        self.versions.schema = version;
        self
    }

    /// Reads values written under schema `version` (0: before the map had a schema) as
    /// `Old`, and converts them with `convert`. A converted value is written back under
    /// the current schema when it is read, so each entry migrates once.
    pub fn migrate_from<Old: DeserializeOwned>(
        mut self,
        version: u8,
        convert: impl Fn(Old) -> V + 'static,
    ) -> Self {
        self.versions.migrate_from(version, convert);
        self
    }

    /// The name the state was declared with.
    pub fn name(&self) -> &str {
        &self.versions.name
    }

    /// Removes all of the current key's entries.
    pub fn clear(&self) {
        Active::clear(self.id)
    }
}

impl<K, V> MapState<K, V>
where
    K: Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    fn key(&self, key: &K) -> Result<Vec<u8>> {
        encode(&self.versions.name, key)
    }

    /// The value under `key`, if any (migrated, and written back, if it was written
    /// under an earlier schema version).
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        let key = self.key(key)?;
        let Some(bytes) = Active::map_get(self.id, &key) else {
            return Ok(None);
        };
        let (value, migrated) = self.versions.read(&bytes)?;
        if migrated {
            Active::map_put(self.id, &key, &self.versions.encode(&value)?);
        }
        Ok(Some(value))
    }

    /// Whether `key` has a value (its value is not read).
    pub fn contains_key(&self, key: &K) -> Result<bool> {
        Ok(Active::map_get(self.id, &self.key(key)?).is_some())
    }

    /// Inserts or replaces the value under `key`.
    pub fn put(&self, key: &K, value: &V) -> Result<()> {
        Active::map_put(self.id, &self.key(key)?, &self.versions.encode(value)?);
        Ok(())
    }

    /// Removes `key` (a no-op if absent).
    pub fn remove(&self, key: &K) -> Result<()> {
        Active::map_remove(self.id, &self.key(key)?);
        Ok(())
    }

    /// All entries of the current key, ordered by encoded key bytes; values of an
    /// earlier schema version are migrated (and written back once all are read).
    pub fn entries(&self) -> Result<Vec<(K, V)>> {
        let stored = Active::map_entries(self.id);
        let mut entries = Vec::with_capacity(stored.len());
        let mut migrated = Vec::new();
        for (k, v) in &stored {
            let (value, converted) = self.versions.read(v)?;
            if converted {
                migrated.push((k, self.versions.encode(&value)?));
            }
            entries.push((decode(&self.versions.name, k)?, value));
        }
        // Written back once every entry has been read, so a failed read writes nothing.
        for (k, v) in migrated {
            Active::map_put(self.id, k, &v);
        }
        Ok(entries)
    }
}
