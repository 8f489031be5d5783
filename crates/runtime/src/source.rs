//! A plugin given as source: its files, run on a language engine its config names.
//!
//! A source version travels through the host as one byte string, a [`bundle`] of its files,
//! so that everything that handles a component's bytes (hashing, telling versions apart,
//! fingerprints, canaries) handles a source the same way; the runtime opens it when the plugin's
//! config names an `engine` ([`EngineRef`]). The format is this crate's own: eight magic bytes,
//! then per file, sorted by path, its path and contents, each prefixed by its length (u32, little
//! endian). Its sha256 is the version's.

use std::fmt;
use std::str::FromStr;

/// The first bytes of a [`bundle`]: unlike a component's (`\0asm`), so neither is taken for the
/// other.
pub const MAGIC: [u8; 8] = *b"\0kwsrc\x01\0";

/// One file of a source plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Relative to the plugin's root, `/`-separated (e.g. `namespace_defaults.py`).
    pub path: String,
    /// Its bytes.
    pub contents: Vec<u8>,
}

/// Why bytes are not a source bundle.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSource {
    /// They do not start with [`MAGIC`].
    #[error("not a source bundle")]
    NotABundle,
    /// They end inside a length or a file.
    #[error("the source bundle is cut short")]
    Truncated,
    /// A path is not UTF-8, empty, absolute, has a `..` part, or repeats an earlier one.
    #[error("the source bundle has an invalid or repeated path {0:?}")]
    Path(String),
    /// No file at all.
    #[error("the source bundle holds no file")]
    Empty,
}

/// Whether `bytes` are a [`bundle`].
pub fn is_bundle(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// The bundle of `files`, sorted by path: the same files give the same bytes.
pub fn bundle(files: &[SourceFile]) -> Vec<u8> {
    let mut sorted: Vec<&SourceFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut out = MAGIC.to_vec();
    for file in sorted {
        for part in [file.path.as_bytes(), &file.contents] {
            out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

/// The files of a [`bundle`].
pub fn unbundle(bytes: &[u8]) -> Result<Vec<SourceFile>, InvalidSource> {
    fn take<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], InvalidSource> {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or(InvalidSource::Truncated)?;
        let len = u32::from_le_bytes(*len) as usize;
        let (part, tail) = tail.split_at_checked(len).ok_or(InvalidSource::Truncated)?;
        *rest = tail;
        Ok(part)
    }
    let mut rest = bytes.strip_prefix(&MAGIC[..]).ok_or(InvalidSource::NotABundle)?;
    let mut files: Vec<SourceFile> = Vec::new();
    while !rest.is_empty() {
        let path = take(&mut rest)?;
        let path = std::str::from_utf8(path).map_err(|_| InvalidSource::Path(String::from_utf8_lossy(path).into()))?;
        let bad = path.is_empty() || path.starts_with('/') || path.split('/').any(|p| p == ".." || p.is_empty());
        if bad || files.iter().any(|f| f.path == path) {
            return Err(InvalidSource::Path(path.to_owned()));
        }
        let path = path.to_owned();
        files.push(SourceFile { path, contents: take(&mut rest)?.to_vec() });
    }
    if files.is_empty() {
        return Err(InvalidSource::Empty);
    }
    Ok(files)
}

/// The engine a source plugin runs on, as its config names it: `<language>@<major>.<minor>`
/// (e.g. `python@0.3`), the language and its SDK's version; the host takes the newest patch
/// release it carries.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EngineRef {
    /// `python` or `js`.
    pub language: String,
    /// The SDK's major version.
    pub major: u32,
    /// The SDK's minor version.
    pub minor: u32,
}

/// An engine name that is not `<language>@<major>.<minor>`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("engine {0:?} is not <language>@<major>.<minor>, e.g. python@0.3")]
pub struct InvalidEngineRef(String);

impl FromStr for EngineRef {
    type Err = InvalidEngineRef;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidEngineRef(s.to_owned());
        let (language, version) = s.split_once('@').ok_or_else(invalid)?;
        let (major, minor) = version.split_once('.').ok_or_else(invalid)?;
        let language_ok =
            !language.is_empty() && language.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !language_ok {
            return Err(invalid());
        }
        Ok(Self {
            language: language.to_owned(),
            major: major.parse().map_err(|_| invalid())?,
            minor: minor.parse().map_err(|_| invalid())?,
        })
    }
}

impl TryFrom<String> for EngineRef {
    type Error = InvalidEngineRef;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<EngineRef> for String {
    fn from(engine: EngineRef) -> Self {
        engine.to_string()
    }
}

impl fmt::Display for EngineRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}.{}", self.language, self.major, self.minor)
    }
}

/// What kind of source error a plugin's source has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceErrorKind {
    /// It does not parse.
    Syntax,
    /// It imports a module the engine does not hold.
    Import,
    /// Its top level raised.
    Exception,
}

impl SourceErrorKind {
    /// The engine's word for it (`syntax`, `import`, anything else an exception).
    pub fn parse(kind: &str) -> Self {
        match kind {
            "syntax" => Self::Syntax,
            "import" => Self::Import,
            _ => Self::Exception,
        }
    }
}

impl fmt::Display for SourceErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Syntax => "syntax error",
            Self::Import => "import error",
            Self::Exception => "exception at import",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, contents: &str) -> SourceFile {
        SourceFile { path: path.into(), contents: contents.into() }
    }

    #[test]
    fn a_bundle_gives_back_its_files_sorted_and_the_same_files_give_the_same_bytes() {
        let (a, b) = (file("a.py", "x = 1\n"), file("pkg/b.py", ""));
        let bytes = bundle(&[b.clone(), a.clone()]);
        assert!(is_bundle(&bytes) && !is_bundle(b"\0asm\x0d\0\x01\0"));
        assert_eq!(bytes, bundle(&[a.clone(), b.clone()]));
        assert_eq!(unbundle(&bytes).unwrap(), [a, b]);
    }

    #[test]
    fn a_bundle_cut_short_or_with_a_path_leaving_its_root_is_refused() {
        let bytes = bundle(&[file("a.py", "x = 1\n")]);
        assert_eq!(unbundle(&bytes[..bytes.len() - 1]), Err(InvalidSource::Truncated));
        assert_eq!(unbundle(b"\0asm\x0d\0\x01\0"), Err(InvalidSource::NotABundle));
        assert_eq!(unbundle(&MAGIC), Err(InvalidSource::Empty));
        for path in ["../a.py", "/a.py", "a//b.py", ""] {
            assert_eq!(unbundle(&bundle(&[file(path, "")])), Err(InvalidSource::Path(path.into())), "{path}");
        }
    }

    #[test]
    fn an_engine_is_named_by_language_and_sdk_major_minor() {
        let python: EngineRef = "python@0.3".parse().unwrap();
        assert_eq!((python.language.as_str(), python.major, python.minor), ("python", 0, 3));
        assert_eq!(python.to_string(), "python@0.3");
        for bad in ["python", "python@0", "python@0.x", "@0.3", "Python@0.3", "python@0.3.1"] {
            assert!(bad.parse::<EngineRef>().is_err(), "{bad}");
        }
    }
}
