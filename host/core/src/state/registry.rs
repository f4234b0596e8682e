//! Names and kinds of the states a UDF declares.
//!
//! A UDF declares its states by name; the registry hands out small ids in declaration
//! order. Because ids are looked up by name, a recreated or upgraded instance that
//! declares the same names reaches the same state. A state may be declared with a
//! time-to-live ([`StateTtl`]); the last declaration of a name sets it.

use crate::time::timers::TimeDomain;
use crate::time::Timestamp;
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

/// What starts a state entry's time-to-live again (the WIT `ttl-refresh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlRefresh {
    /// Writing the entry (Flink's `OnCreateAndWrite`).
    OnWrite,
    /// Reading it too (Flink's `OnReadAndWrite`).
    OnReadAndWrite,
}

/// A state's time-to-live (the WIT `state-ttl`, Flink's `StateTtlConfig`): each entry
/// lives `millis` after its stamp, the time of the call that last wrote it (or read it,
/// with [`TtlRefresh::OnReadAndWrite`]), on the clock of `domain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateTtl {
    /// How long an entry lives, in milliseconds; more than 0.
    pub millis: i64,
    /// Which clock it follows: the watermark, or processing time.
    pub domain: TimeDomain,
    /// What starts it again.
    pub refresh: TtlRefresh,
}

impl StateTtl {
    /// When an entry stamped `stamp` expires.
    pub fn expiry(&self, stamp: Timestamp) -> Timestamp {
        stamp.saturating_add(self.millis)
    }

    /// Whether an entry stamped `stamp` has expired once `domain`'s clock reads `now`.
    pub fn is_expired(&self, stamp: Timestamp, now: Timestamp) -> bool {
        now >= self.expiry(stamp)
    }

    /// Whether reads restamp what they read.
    pub fn refreshed_on_read(&self) -> bool {
        self.refresh == TtlRefresh::OnReadAndWrite
    }

    /// How checkpoints and status show it: `600000ms event-time on-write`.
    pub fn label(&self) -> String {
        let refresh = match self.refresh {
            TtlRefresh::OnWrite => "on-write",
            TtlRefresh::OnReadAndWrite => "on-read-and-write",
        };
        format!("{}ms {} {refresh}", self.millis, self.domain.label())
    }
}

/// What a declaration did to a state's entries' stamps (see [`StateRegistry::declare`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampChange {
    /// Nothing: the state had a time-to-live before and still has one, or had none and
    /// still has none.
    Unchanged,
    /// The state gained a time-to-live: its entries need stamps.
    Added,
    /// The state lost its time-to-live: its entries' stamps must go.
    Dropped,
    /// The state's time-to-live moved to the other clock: its entries' stamps, times on
    /// the old clock, start again now.
    Moved,
}

impl StampChange {
    /// What becomes of the stamps of a state whose time-to-live follows clock `before`
    /// (`None`: it had none) when it follows `after`.
    pub fn between(before: Option<TimeDomain>, after: Option<TimeDomain>) -> StampChange {
        match (before, after) {
            (None, Some(_)) => StampChange::Added,
            (Some(_), None) => StampChange::Dropped,
            (Some(a), Some(b)) if a != b => StampChange::Moved,
            _ => StampChange::Unchanged,
        }
    }
}

/// One declared state.
#[derive(Debug, Clone)]
struct Declared {
    name: String,
    kind: StateKind,
    ttl: Option<StateTtl>,
}

/// The states a UDF has declared, by name and by id. Ids are handed out in declaration
/// order from 0 and never reused.
#[derive(Debug, Default, Clone)]
pub struct StateRegistry {
    by_name: HashMap<String, StateId>,
    declared: Vec<Declared>,
}

impl StateRegistry {
    /// Declares `name` as a state of `kind` with time-to-live `ttl` (or none), or
    /// returns its id if already declared so. A state declared before keeps its id and
    /// kind (another kind is an error) and takes the new time-to-live; the
    /// [`StampChange`] says whether its entries must gain or lose their stamps.
    pub fn declare(
        &mut self,
        name: &str,
        kind: StateKind,
        ttl: Option<StateTtl>,
    ) -> Result<(StateId, StampChange), String> {
        if name.is_empty() {
            return Err("a state needs a non-empty name".into());
        }
        if let Some(ttl) = ttl {
            if ttl.millis <= 0 {
                return Err(format!(
                    "state `{name}`: a time-to-live must be longer than 0 ms"
                ));
            }
        }
        if let Some(&id) = self.by_name.get(name) {
            let declared = &mut self.declared[id as usize];
            if declared.kind != kind {
                return Err(format!(
                    "state {name:?} is a {:?} state, declared again as {kind:?}",
                    declared.kind
                ));
            }
            let change =
                StampChange::between(declared.ttl.map(|t| t.domain), ttl.map(|t| t.domain));
            declared.ttl = ttl;
            return Ok((id, change));
        }
        let id = StateId::try_from(self.declared.len()).map_err(|_| "too many states")?;
        self.declared.push(Declared {
            name: name.to_string(),
            kind,
            ttl,
        });
        self.by_name.insert(name.to_string(), id);
        Ok((id, StampChange::Unchanged))
    }

    /// The name and kind of a declared state.
    pub fn get(&self, id: StateId) -> Option<(&str, StateKind)> {
        self.declared
            .get(id as usize)
            .map(|d| (d.name.as_str(), d.kind))
    }

    /// The time-to-live of a declared state, if it has one.
    pub fn ttl(&self, id: StateId) -> Option<StateTtl> {
        self.declared.get(id as usize).and_then(|d| d.ttl)
    }

    /// The time-to-live of every declared state, by id.
    pub fn ttls(&self) -> Vec<Option<StateTtl>> {
        self.declared.iter().map(|d| d.ttl).collect()
    }

    /// Whether any declared state has a time-to-live.
    pub fn any_ttl(&self) -> bool {
        self.declared.iter().any(|d| d.ttl.is_some())
    }

    /// The shortest time-to-live of the states that follow `domain`'s clock.
    pub fn shortest_ttl(&self, domain: TimeDomain) -> Option<i64> {
        self.declared
            .iter()
            .filter_map(|d| d.ttl)
            .filter(|ttl| ttl.domain == domain)
            .map(|ttl| ttl.millis)
            .min()
    }

    /// The id and kind of the state declared as `name`.
    pub fn find(&self, name: &str) -> Option<(StateId, StateKind)> {
        let id = *self.by_name.get(name)?;
        Some((id, self.declared[id as usize].kind))
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
        let (clicks, _) = registry.declare("clicks", StateKind::Value, None).unwrap();
        let (seen, _) = registry.declare("seen", StateKind::Map, None).unwrap();
        assert_ne!(clicks, seen);
        assert_eq!(
            registry.declare("clicks", StateKind::Value, None).unwrap(),
            (clicks, StampChange::Unchanged)
        );
        let err = registry
            .declare("clicks", StateKind::List, None)
            .unwrap_err();
        assert!(err.contains("\"clicks\" is a Value state"), "{err}");
        assert!(registry.declare("", StateKind::Value, None).is_err());
        assert_eq!(registry.get(seen), Some(("seen", StateKind::Map)));
    }

    #[test]
    fn the_last_declaration_sets_the_time_to_live() {
        let ttl = StateTtl {
            millis: 1_000,
            domain: TimeDomain::EventTime,
            refresh: TtlRefresh::OnWrite,
        };
        let mut registry = StateRegistry::default();
        let (seen, _) = registry.declare("seen", StateKind::Map, None).unwrap();
        assert_eq!(registry.ttl(seen), None);
        assert_eq!(
            registry.declare("seen", StateKind::Map, Some(ttl)).unwrap(),
            (seen, StampChange::Added)
        );
        assert_eq!(registry.ttl(seen), Some(ttl));
        let longer = StateTtl {
            millis: 5_000,
            ..ttl
        };
        assert_eq!(
            registry
                .declare("seen", StateKind::Map, Some(longer))
                .unwrap(),
            (seen, StampChange::Unchanged)
        );
        assert_eq!(registry.shortest_ttl(TimeDomain::EventTime), Some(5_000));
        assert_eq!(registry.shortest_ttl(TimeDomain::ProcessingTime), None);
        assert_eq!(
            registry.declare("seen", StateKind::Map, None).unwrap(),
            (seen, StampChange::Dropped)
        );
        assert!(!registry.any_ttl());
        let err = registry
            .declare("seen", StateKind::Map, Some(StateTtl { millis: 0, ..ttl }))
            .unwrap_err();
        assert!(err.contains("longer than 0 ms"), "{err}");
        assert!(ttl.is_expired(9_000, 10_000) && !ttl.is_expired(9_001, 10_000));
    }
}
