//! `metadata.uid` in 16 bytes: the API server assigns canonical UUIDs, and a cache of many
//! objects should not spend 60 bytes (a `String` and its text) on each.

use std::fmt;

/// An object's UID: a canonical lowercase UUID kept as its 16 bytes, or any other string as is
/// (the API treats UIDs as opaque strings, so nothing else is rejected).
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Uid {
    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` in lowercase hex, which prints back identically.
    Uuid([u8; 16]),
    /// Anything else, kept verbatim.
    Other(Box<str>),
}

/// Byte offsets of the hyphens in a canonical UUID.
const HYPHENS: [usize; 4] = [8, 13, 18, 23];

impl Uid {
    /// Keeps `s` in 16 bytes when it is a canonical lowercase UUID, else verbatim.
    pub fn new(s: &str) -> Self {
        Self::parse_uuid(s).map_or_else(|| Self::Other(s.into()), Self::Uuid)
    }

    fn parse_uuid(s: &str) -> Option<[u8; 16]> {
        let b = s.as_bytes();
        if b.len() != 36 || HYPHENS.iter().any(|&i| b[i] != b'-') {
            return None;
        }
        let mut digits = b.iter().enumerate().filter(|(i, _)| !HYPHENS.contains(i)).map(|(_, &c)| c);
        let mut out = [0u8; 16];
        for byte in &mut out {
            let (hi, lo) = (digits.next()?, digits.next()?);
            *byte = (hex(hi)? << 4) | hex(lo)?;
        }
        Some(out)
    }
}

/// The value of a lowercase hex digit (uppercase would not print back the same).
fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Other(s) => f.write_str(s),
            Self::Uuid(bytes) => {
                for (i, byte) in bytes.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

impl PartialEq<str> for Uid {
    fn eq(&self, other: &str) -> bool {
        match self {
            Self::Other(s) => &**s == other,
            Self::Uuid(bytes) => Self::parse_uuid(other).as_ref() == Some(bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_canonical_uuid_is_kept_in_sixteen_bytes_and_prints_back() {
        let text = "0f8e2b1c-3d4a-4b5c-8d9e-a0b1c2d3e4f5";
        let uid = Uid::new(text);
        assert!(matches!(uid, Uid::Uuid(_)));
        assert_eq!(uid.to_string(), text);
        assert!(uid == *text);
    }

    #[test]
    fn anything_else_is_kept_verbatim() {
        for text in ["0F8E2B1C-3D4A-4B5C-8D9E-A0B1C2D3E4F5", "uid-1", "", "0f8e2b1c+3d4a-4b5c-8d9e-a0b1c2d3e4f5"] {
            let uid = Uid::new(text);
            assert!(matches!(uid, Uid::Other(_)), "{text}");
            assert_eq!(uid.to_string(), text);
        }
    }

    proptest! {
        #[test]
        fn every_uid_prints_back_exactly_what_it_was_made_from(text in "[0-9a-fA-F-]{0,40}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}") {
            let uid = Uid::new(&text);
            prop_assert_eq!(uid.to_string(), text.clone());
            prop_assert!(uid == *text.as_str());
            prop_assert_eq!(uid, Uid::new(&text));
        }
    }
}
