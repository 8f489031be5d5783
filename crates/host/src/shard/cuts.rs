//! Balanced cuts: where the hash space is split between the members so that each gets about
//! the same number of namespaces, since equal slices of 2^64 do not split similar names.
//!
//! FNV-1a of names that differ only in their last bytes lands close together (`bench-0` …
//! `bench-99` all fall in one quarter of the space), so the members' ranges are cut at
//! quantiles of the hashes of the namespaces that exist. One member (the coordinator) computes
//! the cuts and publishes them; the others use them only when they were computed for the
//! membership they see, so all members agree on one split.

use std::fmt;

use super::range::{HASH_SPACE_END, HashRange, fnv1a64, split};

/// The cuts for one membership: `bounds[i]` is where member `i + 1`'s range starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cuts {
    /// [`members_digest`] of the membership these cuts were computed for.
    digest: u64,
    /// Strictly increasing interior bounds, `members - 1` of them, each in `(0, 2^64)`.
    bounds: Vec<u128>,
}

/// Why a published text is not cuts.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not shard cuts: {0:?}")]
pub struct ParseError(String);

/// A digest of the sorted member identities: cuts apply only to the membership they name.
pub fn members_digest(sorted: &[&str]) -> u64 {
    fnv1a64(&sorted.join("\n"))
}

impl Cuts {
    /// Equal slices of the hash space (what [`split`] gives): when no namespace can be listed.
    pub fn equal(digest: u64, members: usize) -> Self {
        let bounds = split(members).iter().skip(1).map(HashRange::start).collect();
        Self { digest, bounds }
    }

    /// Cuts that give each of `members` about the same number of `hashes` (namespace hashes;
    /// duplicates and order do not matter). Each bound falls halfway between two neighbouring
    /// hashes, so a new namespace is as likely to land on either side.
    pub fn balanced(digest: u64, members: usize, hashes: &[u64]) -> Self {
        let mut sorted = hashes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() < members.max(1) {
            return Self::equal(digest, members);
        }
        let count = sorted.len();
        let mut bounds = Vec::with_capacity(members.saturating_sub(1));
        let mut previous = 0u128;
        for i in 1..members {
            // The first hash of member i's share; the bound sits between it and the one before.
            let first = i * count / members;
            let (low, high) = (u128::from(sorted[first - 1]), u128::from(sorted[first]));
            let bound = (low + high).div_ceil(2).max(low + 1);
            // Keep the bounds strictly increasing and leave room for every later member.
            let bound = bound.max(previous + 1).min(HASH_SPACE_END - (members - i) as u128);
            bounds.push(bound);
            previous = bound;
        }
        Self { digest, bounds }
    }

    /// Whether these cuts were computed for the membership with this digest.
    pub fn fits(&self, digest: u64) -> bool {
        self.digest == digest
    }

    /// The members' ranges, in the order of their sorted identities.
    pub fn ranges(&self) -> Vec<HashRange> {
        let starts = std::iter::once(0).chain(self.bounds.iter().copied());
        let ends = self.bounds.iter().copied().chain(std::iter::once(HASH_SPACE_END));
        starts.zip(ends).filter_map(|(start, end)| HashRange::new(start, end).ok()).collect()
    }

    /// How many of `hashes` each range holds.
    pub fn shares(&self, hashes: &[u64]) -> Vec<usize> {
        let ranges = self.ranges();
        let mut counts = vec![0; ranges.len()];
        for hash in hashes {
            if let Some(i) = ranges.iter().position(|r| r.contains(*hash)) {
                counts[i] += 1;
            }
        }
        counts
    }

    /// Whether some member holds clearly more than its share of `hashes`: more than a quarter
    /// above the even share, and at least two namespaces above it. The slack keeps a few new
    /// namespaces from moving every range (each move pauses the ranges it touches).
    pub fn unbalanced(&self, hashes: &[u64]) -> bool {
        let shares = self.shares(hashes);
        let members = shares.len().max(1);
        let even = hashes.len().div_ceil(members);
        shares.iter().any(|&share| share > even + (even / 4).max(2))
    }

    /// Parses what [`Display`](fmt::Display) writes, as published in a Lease annotation.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let error = || ParseError(text.to_owned());
        let (digest, bounds) = text.split_once(':').ok_or_else(error)?;
        let digest = u64::from_str_radix(digest, 16).map_err(|_| error())?;
        let bounds = if bounds.is_empty() {
            Vec::new()
        } else {
            bounds
                .split(',')
                .map(|b| u128::from_str_radix(b, 16).map_err(|_| error()))
                .collect::<Result<Vec<_>, _>>()?
        };
        let increasing = bounds.windows(2).all(|pair| pair[0] < pair[1]);
        let inside = bounds.iter().all(|b| *b > 0 && *b < HASH_SPACE_END);
        if increasing && inside { Ok(Self { digest, bounds }) } else { Err(error()) }
    }
}

impl fmt::Display for Cuts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}:", self.digest)?;
        for (i, bound) in self.bounds.iter().enumerate() {
            write!(f, "{}{bound:016x}", if i == 0 { "" } else { "," })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hashes<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<u64> {
        names.into_iter().map(fnv1a64).collect()
    }

    #[test]
    fn similar_namespace_names_are_split_evenly_where_equal_slices_put_them_on_one_member() {
        let names: Vec<String> = (0..100).map(|i| format!("bench-{i}")).collect();
        let hashes = hashes(names.iter().map(String::as_str));
        let equal = Cuts::equal(0, 4);
        assert_eq!(
            equal.shares(&hashes).iter().max(),
            Some(&100),
            "the failure this fixes: {:?}",
            equal.shares(&hashes)
        );
        let balanced = Cuts::balanced(0, 4, &hashes);
        assert_eq!(balanced.shares(&hashes), vec![25, 25, 25, 25]);
        assert!(equal.unbalanced(&hashes) && !balanced.unbalanced(&hashes));
    }

    #[test]
    fn a_few_new_namespaces_do_not_unbalance_the_cuts() {
        let names: Vec<String> = (0..60).map(|i| format!("team-{i}")).collect();
        let cuts = Cuts::balanced(0, 3, &hashes(names.iter().map(String::as_str)));
        let more: Vec<String> = (0..63).map(|i| format!("team-{i}")).collect();
        assert!(!cuts.unbalanced(&hashes(more.iter().map(String::as_str))));
    }

    #[test]
    fn fewer_namespaces_than_members_fall_back_to_equal_slices() {
        assert_eq!(Cuts::balanced(7, 3, &hashes(["default"])), Cuts::equal(7, 3));
    }

    #[test]
    fn cuts_apply_only_to_the_membership_they_were_computed_for() {
        let cuts = Cuts::equal(members_digest(&["a", "b"]), 2);
        assert!(cuts.fits(members_digest(&["a", "b"])));
        assert!(!cuts.fits(members_digest(&["a", "b", "c"])));
    }

    #[test]
    fn malformed_cuts_do_not_parse() {
        for bad in ["", "xyz:", "0:2,1", "0:0", "0:10000000000000000", "0:1,,2"] {
            assert!(Cuts::parse(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(Cuts::parse("00000000000000ff:").map(|c| c.ranges()), Ok(vec![HashRange::FULL]));
    }

    proptest! {
        #[test]
        fn balanced_cuts_cover_the_hash_space_once_and_round_trip(
            members in 1usize..12,
            hashes in proptest::collection::vec(any::<u64>(), 0..200),
            probe: u64,
        ) {
            let cuts = Cuts::balanced(42, members, &hashes);
            let ranges = cuts.ranges();
            prop_assert_eq!(ranges.len(), members);
            prop_assert_eq!(ranges.iter().filter(|r| r.contains(probe)).count(), 1);
            for pair in ranges.windows(2) {
                prop_assert_eq!(pair[0].end(), pair[1].start());
            }
            prop_assert_eq!(Cuts::parse(&cuts.to_string()), Ok(cuts.clone()));
            let mut distinct = hashes.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() >= members {
                let even = distinct.len() / members;
                for share in cuts.shares(&distinct) {
                    prop_assert!(share == even || share == even + 1, "shares {:?}", cuts.shares(&distinct));
                }
            }
        }
    }
}
