//! Keys hashed once, outside the queue's lock: the lock is the queue's only point of contention,
//! so SipHash (kept for its flood resistance: keys are object names users choose) runs before it
//! is taken, and the map under it only reads the stored hash.

use std::{
    borrow::Borrow,
    collections::HashMap,
    hash::{BuildHasherDefault, Hash, Hasher},
};

/// A key and its hash.
#[derive(Clone)]
pub(super) struct Hashed<K> {
    pub(super) hash: u64,
    pub(super) key: K,
}

/// A map over pre-hashed keys; look up with [`Probe`].
pub(super) type HashedMap<K, V> = HashMap<Hashed<K>, V, BuildHasherDefault<StoredHash>>;

/// A borrowed key and its hash, to look up a [`HashedMap`] without cloning the key.
pub(super) struct Probe<'a, K>(pub(super) u64, pub(super) &'a K);

/// What `Hashed` and `Probe` have in common; `HashedMap` lookups go through it.
pub(super) trait Lookup<K> {
    fn hash(&self) -> u64;
    fn key(&self) -> &K;
}

impl<K> Lookup<K> for Hashed<K> {
    fn hash(&self) -> u64 {
        self.hash
    }
    fn key(&self) -> &K {
        &self.key
    }
}

impl<K> Lookup<K> for Probe<'_, K> {
    fn hash(&self) -> u64 {
        self.0
    }
    fn key(&self) -> &K {
        self.1
    }
}

impl<'a, K: 'a> Borrow<dyn Lookup<K> + 'a> for Hashed<K> {
    fn borrow(&self) -> &(dyn Lookup<K> + 'a) {
        self
    }
}

impl<K: Eq> PartialEq for dyn Lookup<K> + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.hash() == other.hash() && self.key() == other.key()
    }
}
impl<K: Eq> Eq for dyn Lookup<K> + '_ {}
impl<K> Hash for dyn Lookup<K> + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(Lookup::hash(self));
    }
}

impl<K: Eq> PartialEq for Hashed<K> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.key == other.key
    }
}
impl<K: Eq> Eq for Hashed<K> {}
impl<K> Hash for Hashed<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// Passes the stored hash through (it is already a SipHash output).
#[derive(Default)]
pub(super) struct StoredHash(u64);

impl Hasher for StoredHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `Hashed` and `Lookup`; fold anything else in anyway.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }
    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}
