//! The host services without wasm: scoping, kinds, outputs, time-to-live.

use super::*;

#[test]
fn state_is_scoped_to_the_current_key_and_checked_by_kind() {
    let mut host = HostServices::new(0);
    let count = host.declare_state("count", StateKind::Value, None).unwrap();
    let items = host.declare_state("items", StateKind::List, None).unwrap();
    let err = host.value_get(count).unwrap_err().to_string();
    assert!(err.contains("not in init"), "{err}");

    let a = host.keys.intern(b"a");
    let b = host.keys.intern(b"b");
    host.enter(a, 10);
    host.value_set(count, vec![1]).unwrap();
    host.list_append(items, vec![7]).unwrap();
    let err = host.list_get(count).unwrap_err().to_string();
    assert!(err.contains("\"count\" is a Value state"), "{err}");
    host.leave();

    host.enter(b, 11);
    assert_eq!(host.value_get(count).unwrap(), None);
    host.leave();
    assert_eq!(
        host.keys.find(b"b"),
        None,
        "a key left with nothing is released"
    );

    host.enter(a, 12);
    assert_eq!(host.value_get(count).unwrap(), Some(&[1u8][..]));
    assert_eq!(host.list_get(items).unwrap(), [&[7u8][..]]);
    host.clear_all().unwrap();
    host.register_timer(TimeDomain::EventTime, 100).unwrap();
    host.leave();
    assert_eq!(host.keys.find(b"a"), Some(a), "a key with a timer is kept");

    host.enter(a, 13);
    host.delete_timer(TimeDomain::EventTime, 100).unwrap();
    host.delete_timer(TimeDomain::EventTime, 100).unwrap();
    host.leave();
    assert_eq!(host.keys.find(b"a"), None);
}

#[test]
fn outputs_are_declared_in_init_only() {
    let mut host = HostServices::new(0);
    assert!(host
        .declare_output("main")
        .unwrap_err()
        .contains("must be declared in init"));
    host.declaring = true;
    assert_eq!(host.declare_output("main").unwrap(), 0);
    assert_eq!(host.declare_output("late").unwrap(), 1);
    host.declaring = false;
    assert_eq!(
        host.declare_output("late").unwrap(),
        1,
        "looking up a declared output is fine"
    );
    let key = host.keys.intern(b"k");
    host.enter(key, 42);
    host.emit(1, b"{}".to_vec(), None, None).unwrap();
    assert!(host.emit(2, b"{}".to_vec(), None, None).is_err());
    assert_eq!(host.emitted.iter().next().unwrap().1.timestamp, 42);
}

#[test]
fn expired_entries_are_never_returned_and_go_without_a_call() {
    use weir_core::state::{ttl::stamp_of, TtlRefresh};
    let mut host = HostServices::new(0);
    let ttl = StateTtl {
        millis: 100,
        domain: TimeDomain::EventTime,
        refresh: TtlRefresh::OnReadAndWrite,
    };
    let seen = host
        .declare_state("seen", StateKind::Map, Some(ttl))
        .unwrap();
    let a = host.keys.intern(b"a");
    let stamp = |host: &HostServices, k: &[u8]| match host.keys.entry(a).slot(seen) {
        Some(Slot::Map(map)) => map.get(k).map(|v| stamp_of(v)),
        _ => None,
    };
    host.watermark = 1_000;
    host.enter(a, 1_050);
    host.map_put(seen, b"x".to_vec(), b"1".to_vec()).unwrap();
    host.map_put(seen, b"y".to_vec(), b"2".to_vec()).unwrap();
    host.leave();
    assert_eq!(stamp(&host, b"x"), Some(1_050), "the element's time");

    // A late element's read restamps with the watermark; a failed call's does not.
    host.watermark = 1_100;
    host.enter(a, 900);
    assert_eq!(host.map_get(seen, b"x").unwrap(), Some(&b"1"[..]));
    host.undo_call();
    host.leave();
    assert_eq!(stamp(&host, b"x"), Some(1_050), "undone with its call");
    host.enter(a, 900);
    host.map_get(seen, b"x").unwrap();
    host.leave();
    assert_eq!(stamp(&host, b"x"), Some(1_100));

    host.watermark = 1_149;
    assert_eq!(host.expire_state(0), 0, "y lives until 1150");
    host.watermark = 1_150;
    assert_eq!(host.expire_state(0), 1);
    host.enter(a, 1_150);
    assert_eq!(host.map_entries(seen).unwrap(), [(&b"x"[..], &b"1"[..])]);
    host.leave();
    assert_eq!(
        stamp(&host, b"x"),
        Some(1_150),
        "iterating reads every entry"
    );
    let checkpoint = crate::snapshot::encode_full(&host.keys).unwrap();
    host.watermark = 1_249;
    assert_eq!(host.expire_state(0), 0);
    host.watermark = 1_250;
    host.expire_state(0);
    assert_eq!(host.keys.find(b"a"), None, "released with its last entry");

    // Restored, x comes back with its stamp and goes at the same watermark.
    let mut restored = HostServices::new(0);
    restored
        .declare_state("seen", StateKind::Map, Some(ttl))
        .unwrap();
    crate::snapshot::apply(&mut restored, &checkpoint, &[Some(seen.into())]).unwrap();
    restored.watermark = 1_249;
    assert_eq!(restored.expire_state(0), 0);
    restored.watermark = 1_250;
    assert_eq!(restored.expire_state(0), 1);
    assert!(restored.keys.is_empty());
}

#[test]
fn a_time_to_live_added_or_dropped_by_a_new_declaration_stamps_or_unstamps() {
    let mut host = HostServices::new(0);
    let count = host.declare_state("count", StateKind::Value, None).unwrap();
    let a = host.keys.intern(b"a");
    host.enter(a, 10);
    host.value_set(count, b"7".to_vec()).unwrap();
    host.leave();
    let ttl = StateTtl {
        millis: 50,
        domain: TimeDomain::ProcessingTime,
        refresh: weir_core::state::TtlRefresh::OnWrite,
    };
    host.declare_state("count", StateKind::Value, Some(ttl))
        .unwrap();
    let stored = match host.keys.entry(a).slot(count) {
        Some(Slot::Value(v)) => v.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(unstamped(&stored), b"7");
    let stamp = ttl::stamp_of(&stored);
    host.enter(a, 11);
    assert_eq!(host.value_get(count).unwrap(), Some(&b"7"[..]));
    host.leave();
    assert_eq!(host.expire_state(stamp + 49), 0);
    host.declare_state("count", StateKind::Value, None).unwrap();
    assert_eq!(
        host.keys.entry(a).slot(count),
        Some(&Slot::Value(b"7".to_vec())),
        "no time-to-live, no stamp: the value stays"
    );
    host.declare_state("count", StateKind::Value, Some(ttl))
        .unwrap();
    let stamp = match host.keys.entry(a).slot(count) {
        Some(Slot::Value(v)) => ttl::stamp_of(v),
        other => panic!("{other:?}"),
    };
    assert_eq!(host.expire_state(stamp + 50), 1);
    assert_eq!(host.keys.find(b"a"), None);
}
