//! Names and kinds of the states a UDF declares.
//!
//! A UDF declares its states by name; the registry hands out small ids in declaration
//! order. Because ids are looked up by name, a recreated or upgraded instance that
//! declares the same names reaches the same state.

use std::collections::HashMap;

/// A declared state's id (the WIT `state-id`).
pub type StateId = u32;

/// The shape of a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    /// One value per key (Flink's `ValueState`).
    Value,
    /// A list per key (`ListState`).
    List,
    /// A map of bytes to bytes per key (`MapState`).
    Map,
}

impl StateKind {
    /// The kind's name as checkpoints record it (`Value`, `List`, `Map`): checkpoints
    /// written by earlier versions name it so too.
    pub fn label(self) -> &'static str {
        match self {
            StateKind::Value => "Value",
            StateKind::List => "List",
            StateKind::Map => "Map",
        }
    }
}

/// The states a UDF has declared, by name and by id. Ids are handed out in declaration
/// order from 0 and never reused.
#[derive(Debug, Default, Clone)]
pub struct StateRegistry {
    by_name: HashMap<String, StateId>,
    declared: Vec<(String, StateKind)>,
}

impl StateRegistry {
    /// Declares `name` as a state of `kind`, or returns its id if already declared so.
    pub fn declare(&mut self, name: &str, kind: StateKind) -> Result<StateId, String> {
        if name.is_empty() {
            return Err("a state needs a non-empty name".into());
        }
        if let Some(&id) = self.by_name.get(name) {
            let declared = self.declared[id as usize].1;
            return if declared == kind {
                Ok(id)
            } else {
                Err(format!(
                    "state {name:?} is a {declared:?} state, declared again as {kind:?}"
                ))
            };
        }
        let id = StateId::try_from(self.declared.len()).map_err(|_| "too many states")?;
        self.declared.push((name.to_string(), kind));
        self.by_name.insert(name.to_string(), id);
        Ok(id)
    }

    /// The name and kind of a declared state.
    pub fn get(&self, id: StateId) -> Option<(&str, StateKind)> {
        self.declared
            .get(id as usize)
            .map(|(name, kind)| (name.as_str(), *kind))
    }

    /// The id and kind of the state declared as `name`.
    pub fn find(&self, name: &str) -> Option<(StateId, StateKind)> {
        let id = *self.by_name.get(name)?;
        Some((id, self.declared[id as usize].1))
    }

    /// How many states are declared.
    pub fn len(&self) -> usize {
        self.declared.len()
    }

    /// Whether no state is declared.
    pub fn is_empty(&self) -> bool {
        self.declared.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_name_same_id_and_kind_is_checked() {
        let mut registry = StateRegistry::default();
        let clicks = registry.declare("clicks", StateKind::Value).unwrap();
        let seen = registry.declare("seen", StateKind::Map).unwrap();
        assert_ne!(clicks, seen);
        assert_eq!(
            registry.declare("clicks", StateKind::Value).unwrap(),
            clicks
        );
        let err = registry.declare("clicks", StateKind::List).unwrap_err();
        assert!(err.contains("\"clicks\" is a Value state"), "{err}");
        assert!(registry.declare("", StateKind::Value).is_err());
        assert_eq!(registry.get(seen), Some(("seen", StateKind::Map)));
    }
}
