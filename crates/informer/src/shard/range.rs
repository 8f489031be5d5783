//! Hash ranges: the 64-bit FNV-1a hash the API server shards on, contiguous ranges of it, and
//! the `shardRange(...)` selector (KEP-5866) that asks the server for one range.

use std::fmt;

/// `2^64`: the exclusive end of the hash space, as the API server writes it.
pub const HASH_SPACE_END: u128 = 1 << 64;

/// The field the host shards every kind on: a namespace's objects stay together, so the
/// objects a namespaced owner owns reach the replica that reconciles it.
pub const SHARD_FIELD: &str = "object.metadata.namespace";

/// 64-bit FNV-1a of `value`: `hash/fnv` `New64a`, which `k8s.io/apimachinery/pkg/sharding`
/// `HashField` uses. Hand-written: six lines, and the `fnv` crate's hasher is not
/// specified to stay FNV-1a across its `Hasher` API.
pub fn fnv1a64(value: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    value.bytes().fold(OFFSET, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME))
}

/// The shard hash of a queue key `namespace/name` (or `name` for a cluster-scoped object, whose
/// namespace is empty): the hash of its namespace, as the server computes it for
/// [`SHARD_FIELD`].
pub fn key_hash(key: &str) -> u64 {
    fnv1a64(key.rsplit_once('/').map_or("", |(namespace, _)| namespace))
}

/// A half-open range `[start, end)` of the hash space; `end` may be `2^64`. Never empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HashRange {
    start: u128,
    end: u128,
}

/// Why a range could not be built or parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Not `0x<16 hex digits>-0x<16 hex digits>` (or `0x10000000000000000` as the end).
    #[error("not a hash range: {0:?}")]
    Syntax(String),
    /// Empty, reversed, or past `2^64`.
    #[error("invalid hash range [{start:#x}, {end:#x})")]
    Bounds {
        /// Inclusive start.
        start: u128,
        /// Exclusive end.
        end: u128,
    },
}

impl HashRange {
    /// The whole hash space.
    pub const FULL: Self = Self { start: 0, end: HASH_SPACE_END };

    /// `[start, end)`; an error if empty or past `2^64`.
    pub fn new(start: u128, end: u128) -> Result<Self, Error> {
        if start < end && end <= HASH_SPACE_END { Ok(Self { start, end }) } else { Err(Error::Bounds { start, end }) }
    }

    /// The first hash of the range.
    pub fn start(&self) -> u128 {
        self.start
    }

    /// The end of the range (exclusive; may be `2^64`).
    pub fn end(&self) -> u128 {
        self.end
    }

    /// Whether `hash` falls in the range.
    pub fn contains(&self, hash: u64) -> bool {
        (self.start..self.end).contains(&u128::from(hash))
    }

    /// How many hashes the range holds.
    pub fn width(&self) -> u128 {
        self.end - self.start
    }

    /// Whether the two ranges share a hash.
    pub fn overlaps(&self, other: &Self) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// The selector that asks the API server for this range of [`SHARD_FIELD`]; the server
    /// echoes it back, byte for byte, in `ListMeta.shardInfo.selector`.
    pub fn selector(&self) -> String {
        format!("shardRange({SHARD_FIELD}, '{}', '{}')", hex_bound(self.start), hex_bound(self.end))
    }

    /// Parses what [`Display`](fmt::Display) writes (`0x…-0x…`), as stored in a member's Lease.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let syntax = || Error::Syntax(text.to_owned());
        let (start, end) = text.split_once('-').ok_or_else(syntax)?;
        let bound = |s: &str| {
            let digits = s.strip_prefix("0x").filter(|d| d.len() == 16 || *s == hex_bound(HASH_SPACE_END));
            digits.and_then(|d| u128::from_str_radix(d, 16).ok()).ok_or_else(syntax)
        };
        Self::new(bound(start)?, bound(end)?)
    }
}

impl fmt::Display for HashRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", hex_bound(self.start), hex_bound(self.end))
    }
}

/// A bound as the API server's parser wants it: `0x` and 16 lowercase hex digits, or
/// `0x10000000000000000` for `2^64`.
fn hex_bound(value: u128) -> String {
    format!("0x{value:016x}")
}

/// Splits the hash space into `members` contiguous ranges, in order: member `i` of `n` gets
/// `[⌊i·2^64/n⌋, ⌊(i+1)·2^64/n⌋)`. Every member computes the same split from the same sorted
/// member list. Empty for no members.
pub fn split(members: usize) -> Vec<HashRange> {
    let n = members as u128;
    (0..n).map(|i| HashRange { start: i * HASH_SPACE_END / n, end: (i + 1) * HASH_SPACE_END / n }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Computed by `k8s.io/apimachinery@v0.37.2/pkg/sharding.HashField` (Go, from the module cache).
    #[test]
    fn the_hash_matches_the_api_servers() {
        for (value, hash) in [
            ("", 0xcbf2_9ce4_8422_2325_u64),
            ("abc", 0xe71f_a219_0541_574b),
            ("default", 0xebad_a516_8620_c5fe),
            ("kube-system", 0xdf65_c7bc_1d82_b35e),
            ("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 0x9375_4b72_48a0_0eb9),
        ] {
            assert_eq!(fnv1a64(value), hash, "{value:?}");
        }
    }

    #[test]
    fn a_key_hashes_as_its_namespace() {
        assert_eq!(key_hash("team-a/web"), fnv1a64("team-a"));
        assert_eq!(key_hash("cluster-wide"), fnv1a64(""));
    }

    #[test]
    fn selectors_are_what_the_api_server_parses_and_echoes() {
        let [first, second] = split(2)[..] else { panic!("two ranges") };
        assert_eq!(
            first.selector(),
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')"
        );
        assert_eq!(
            second.selector(),
            "shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')"
        );
    }

    #[test]
    fn ranges_round_trip_through_their_text() {
        for range in split(3) {
            assert_eq!(HashRange::parse(&range.to_string()), Ok(range));
        }
        for bad in ["", "0x0-0x1", "0x8000000000000000-0x0000000000000000", "0x0000000000000000-0x20000000000000000"] {
            assert!(HashRange::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    proptest! {
        #[test]
        fn a_split_covers_the_hash_space_once_in_contiguous_ranges(n in 1usize..64, hash: u64) {
            let ranges = split(n);
            prop_assert_eq!(ranges.len(), n);
            prop_assert_eq!(ranges[0].start, 0);
            prop_assert_eq!(ranges[n - 1].end, HASH_SPACE_END);
            for pair in ranges.windows(2) {
                prop_assert_eq!(pair[0].end, pair[1].start);
                prop_assert!(!pair[0].overlaps(&pair[1]));
            }
            prop_assert_eq!(ranges.iter().filter(|r| r.contains(hash)).count(), 1);
        }
    }
}
