//! TEMPORARY stand-in (BTreeSet) until the timing wheel lands; same API.
use std::collections::BTreeSet;
pub struct TimingWheel<K> {
    set: BTreeSet<(i64, K)>,
    now: i64,
}
impl<K: Clone + Eq + std::hash::Hash + Ord> TimingWheel<K> {
    pub fn new(now: i64) -> Self {
        Self {
            set: BTreeSet::new(),
            now,
        }
    }
    pub fn insert(&mut self, at: i64, key: K) -> bool {
        self.set.insert((at, key))
    }
    pub fn remove(&mut self, at: i64, key: &K) -> bool {
        self.set.remove(&(at, key.clone()))
    }
    pub fn len(&self) -> usize {
        self.set.len()
    }
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
    pub fn next_due(&self) -> Option<i64> {
        self.set.first().map(|(a, _)| *a)
    }
    pub fn advance(&mut self, now: i64, out: &mut Vec<(i64, K)>) {
        self.now = self.now.max(now);
        while let Some((at, _)) = self.set.first() {
            if *at > now {
                break;
            }
            out.push(self.set.pop_first().unwrap());
        }
    }
    pub fn drain_all(&mut self, out: &mut Vec<(i64, K)>) {
        out.extend(std::mem::take(&mut self.set));
    }
}
