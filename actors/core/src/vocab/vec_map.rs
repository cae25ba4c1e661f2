//! A map kept as one vector sorted by key, for a gate's few DaemonSets, pods
//! and members: a `BTreeMap` allocates a node of eleven slots for its first
//! entry, per map and per gate, and there are ten thousand gates. It iterates
//! and serializes exactly like the `BTreeMap` it replaced; inserting is linear,
//! so it is for small maps. No crate in the tree offers a sorted vector map
//! (`indexmap` keeps insertion order and a hash table beside the entries).

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A map sorted by key in one vector; see the [module](self).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VecMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap {
            entries: Vec::new(),
        }
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for VecMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Ord, V> VecMap<K, V> {
    pub fn new() -> Self {
        VecMap::default()
    }

    /// An empty map with room for `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        VecMap {
            entries: Vec::with_capacity(n),
        }
    }

    fn find<Q>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|i| &mut self.entries[i].1)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; the previous value, if any.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.grow();
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// The entry of `key`, for [`Entry::or_insert`] and friends.
    pub fn entry(&mut self, key: K) -> Entry<'_, K, V> {
        Entry { map: self, key }
    }

    /// Grown by an eighth (at least one) rather than doubled: a gate's maps
    /// reach their size once and stay there.
    fn grow(&mut self) {
        if self.entries.len() == self.entries.capacity() {
            self.entries.reserve_exact(1 + self.entries.len() / 8);
        }
    }
}

impl<K, V> VecMap<K, V> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator + Clone {
        self.entries.iter().map(|(_, v)| v)
    }

    pub fn into_values(self) -> impl DoubleEndedIterator<Item = V> + ExactSizeIterator {
        self.entries.into_iter().map(|(_, v)| v)
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

/// A key of a [`VecMap`], present or not.
pub struct Entry<'a, K, V> {
    map: &'a mut VecMap<K, V>,
    key: K,
}

impl<'a, K: Ord, V> Entry<'a, K, V> {
    pub fn or_insert(self, value: V) -> &'a mut V {
        let i = match self.map.find(&self.key) {
            Ok(i) => i,
            Err(i) => {
                self.map.grow();
                self.map.entries.insert(i, (self.key, value));
                i
            }
        };
        &mut self.map.entries[i].1
    }
}

/// Like a `BTreeMap`'s: panics when the key is absent.
impl<K, V, Q> std::ops::Index<&Q> for VecMap<K, V>
where
    K: Ord + Borrow<Q>,
    Q: Ord + ?Sized,
{
    type Output = V;

    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("no entry found for key")
    }
}

/// Like a `BTreeMap`'s: for a key given twice, the last value wins.
impl<K: Ord, V> FromIterator<(K, V)> for VecMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut entries: Vec<(K, V)> = iter.into_iter().collect();
        // Stable: equal keys keep their order, so the last one is last.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(K, V)> = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = v,
                _ => out.push((k, v)),
            }
        }
        out.shrink_to_fit();
        VecMap { entries: out }
    }
}

/// Like a `BTreeMap`'s, for literals: `[(k, v), ...].into()`.
impl<K: Ord, V, const N: usize> From<[(K, V); N]> for VecMap<K, V> {
    fn from(entries: [(K, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

impl<K: Ord, V> Extend<(K, V)> for VecMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<K, V> IntoIterator for VecMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a, K, V> IntoIterator for &'a VecMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

impl<K: Serialize, V: Serialize> Serialize for VecMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

/// Read as a `BTreeMap` (for a key given twice, the last value wins), then
/// kept sorted in one vector.
impl<'de, K, V> Deserialize<'de> for VecMap<K, V>
where
    K: Deserialize<'de> + Ord,
    V: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<K, V>::deserialize(deserializer)?;
        Ok(map.into_iter().collect())
    }
}
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::VecMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u8),
        Remove(u8),
        EntryOrInsert(u8, u8),
        GetMut(u8, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..24, any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
            (0u8..24).prop_map(Op::Remove),
            (0u8..24, any::<u8>()).prop_map(|(k, v)| Op::EntryOrInsert(k, v)),
            (0u8..24, any::<u8>()).prop_map(|(k, v)| Op::GetMut(k, v)),
        ]
    }

    proptest! {
        /// Every operation answers as a BTreeMap's does, and the two hold
        /// the same entries in the same order after each.
        #[test]
        fn behaves_like_a_btreemap(
            start in prop::collection::vec((0u8..24, any::<u8>()), 0..12),
            ops in prop::collection::vec(op(), 0..64),
        ) {
            let mut model: BTreeMap<u8, u8> = start.iter().copied().collect();
            let mut map: VecMap<u8, u8> = start.iter().copied().collect();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(map.insert(k, v), model.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(map.remove(&k), model.remove(&k)),
                    Op::EntryOrInsert(k, v) => {
                        prop_assert_eq!(*map.entry(k).or_insert(v), *model.entry(k).or_insert(v))
                    }
                    Op::GetMut(k, v) => {
                        if let Some(x) = map.get_mut(&k) { *x = v; }
                        if let Some(x) = model.get_mut(&k) { *x = v; }
                    }
                }
                prop_assert!(map.iter().eq(model.iter()));
                prop_assert_eq!(map.len(), model.len());
            }
        }
    }

    #[test]
    fn serializes_as_the_btreemap_it_replaced() {
        let pairs = [
            ("b".to_string(), 2),
            ("a".to_string(), 1),
            ("b".to_string(), 3),
        ];
        let map: VecMap<String, i32> = pairs.iter().cloned().collect();
        let model: BTreeMap<String, i32> = pairs.iter().cloned().collect();
        let json = serde_json::to_string(&map).unwrap();
        assert_eq!(json, serde_json::to_string(&model).unwrap());
        assert_eq!(json, r#"{"a":1,"b":3}"#);
        let back: VecMap<String, i32> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, map);
    }
}
