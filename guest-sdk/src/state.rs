//! Typed keyed state over the host's byte store, encoded with `postcard`.
//!
//! Handles are declared in `init` and used without a context: the host scopes every
//! call to the key being processed. Using one outside `process_element` / `on_timer`
//! traps in the host.

use std::marker::PhantomData;

use anyhow::anyhow;
use serde::{de::DeserializeOwned, Serialize};

use crate::backend::{Active, Backend};
use crate::Result;

fn encode<T: Serialize + ?Sized>(name: &str, value: &T) -> Result<Vec<u8>> {
    // Starting with room for a typical value saves the growth steps of an empty Vec,
    // which showed up in profiles of small states.
    postcard::to_extend(value, Vec::with_capacity(64))
        .map_err(|e| anyhow!("state `{name}`: cannot encode value: {e}"))
}

fn decode<T: DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<T> {
    // Leftover bytes mean the value was written as another type.
    let decoded = match postcard::take_from_bytes(bytes) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(format!("{} bytes left over", rest.len())),
        Err(e) => Err(e.to_string()),
    };
    decoded.map_err(|e| {
        anyhow!(
            "state `{name}`: cannot decode stored value as {} ({e}); was it written with another type?",
            std::any::type_name::<T>()
        )
    })
}

/// One `T` per key (Flink's `ValueState`).
pub struct ValueState<T> {
    id: u32,
    name: Box<str>,
    _type: PhantomData<fn() -> T>,
}

impl<T> ValueState<T> {
    pub(crate) fn new(id: u32, name: &str) -> Self {
        ValueState {
            id,
            name: name.into(),
            _type: PhantomData,
        }
    }

    /// The name the state was declared with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Removes the current key's value.
    pub fn clear(&self) {
        Active::clear(self.id)
    }
}

impl<T: Serialize + DeserializeOwned> ValueState<T> {
    /// The current key's value, if any.
    pub fn get(&self) -> Result<Option<T>> {
        Active::value_with(self.id, |bytes| match bytes {
            Some(bytes) => decode(&self.name, bytes).map(Some),
            None => Ok(None),
        })
    }

    /// Replaces the current key's value.
    pub fn set(&self, value: &T) -> Result<()> {
        Active::value_set_owned(self.id, encode(&self.name, value)?);
        Ok(())
    }
}

/// An ordered list of `T` per key (Flink's `ListState`).
pub struct ListState<T> {
    id: u32,
    name: Box<str>,
    _type: PhantomData<fn() -> T>,
}

impl<T> ListState<T> {
    pub(crate) fn new(id: u32, name: &str) -> Self {
        ListState {
            id,
            name: name.into(),
            _type: PhantomData,
        }
    }

    /// The name the state was declared with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Removes all of the current key's items.
    pub fn clear(&self) {
        Active::clear(self.id)
    }
}

impl<T: Serialize + DeserializeOwned> ListState<T> {
    /// All items of the current key, oldest first.
    pub fn get(&self) -> Result<Vec<T>> {
        Active::list_get(self.id)
            .iter()
            .map(|bytes| decode(&self.name, bytes))
            .collect()
    }

    /// Appends one item (without reading the others).
    pub fn append(&self, item: &T) -> Result<()> {
        Active::list_append(self.id, &encode(&self.name, item)?);
        Ok(())
    }

    /// Replaces all items; an empty slice clears the list.
    pub fn set(&self, items: &[T]) -> Result<()> {
        let encoded = items
            .iter()
            .map(|item| encode(&self.name, item))
            .collect::<Result<Vec<_>>>()?;
        Active::list_set(self.id, &encoded);
        Ok(())
    }
}

/// A map from `K` to `V` per key (Flink's `MapState`).
///
/// Keys are stored postcard-encoded, and [`entries`](Self::entries) comes in the order of
/// those bytes, which is not `K`'s `Ord` (integers are varints, strings length-prefixed).
pub struct MapState<K, V> {
    id: u32,
    name: Box<str>,
    _type: PhantomData<fn() -> (K, V)>,
}

impl<K, V> MapState<K, V> {
    pub(crate) fn new(id: u32, name: &str) -> Self {
        MapState {
            id,
            name: name.into(),
            _type: PhantomData,
        }
    }

    /// The name the state was declared with.
    pub fn name(&self) -> &str {
        &self.name
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
    /// The value under `key`, if any.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        match Active::map_get(self.id, &encode(&self.name, key)?) {
            Some(bytes) => decode(&self.name, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &K) -> Result<bool> {
        Ok(Active::map_get(self.id, &encode(&self.name, key)?).is_some())
    }

    /// Inserts or replaces the value under `key`.
    pub fn put(&self, key: &K, value: &V) -> Result<()> {
        Active::map_put(
            self.id,
            &encode(&self.name, key)?,
            &encode(&self.name, value)?,
        );
        Ok(())
    }

    /// Removes `key` (a no-op if absent).
    pub fn remove(&self, key: &K) -> Result<()> {
        Active::map_remove(self.id, &encode(&self.name, key)?);
        Ok(())
    }

    /// All entries of the current key, ordered by encoded key bytes.
    pub fn entries(&self) -> Result<Vec<(K, V)>> {
        Active::map_entries(self.id)
            .iter()
            .map(|(k, v)| Ok((decode(&self.name, k)?, decode(&self.name, v)?)))
            .collect()
    }
}
