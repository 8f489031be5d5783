//! Rust source as tokens: enough to find `mod` items, `use` trees and paths, in code and docs.
//!
//! Hand-written, with std alone, so that the host's test can include the check by `#[path]`
//! without a dev-dependency. `syn` (already in the lock file) parses code fully but gives doc
//! comments as strings, whose intra-doc links would still need this; moving to it is left to
//! the runtime restructure of issue 47.

/// A token of Rust source: a word (identifier, keyword, number), `::`, a string literal or one
/// other character; `doc` when it is in a doc comment (whose intra-doc links are paths too).
#[derive(Debug)]
pub struct Token<'a> {
    /// The token's text; a string literal's with its quotes.
    pub text: &'a str,
    /// Its byte offset in the source.
    pub at: usize,
    /// Whether it is in a doc comment.
    pub doc: bool,
}

/// The tokens of `source`, without plain comments, char literals and lifetimes.
pub fn tokens(source: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    lex(source, 0, source.len(), false, &mut out);
    out
}

/// Pushes the tokens of `s[i..end]` onto `out`; inside a doc comment (`doc`), comments and
/// literals are not told apart from other text.
fn lex<'a>(s: &'a str, mut i: usize, end: usize, doc: bool, out: &mut Vec<Token<'a>>) {
    let b = s.as_bytes();
    while i < end {
        let rest = &b[i..end];
        let start = i;
        let width = s[i..].chars().next().map_or(1, char::len_utf8);
        if rest[0].is_ascii_alphanumeric() || rest[0] == b'_' {
            while i < end && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let hashes = b[i..end].iter().take_while(|c| **c == b'#').count();
            let raw = matches!(&s[start..i], "r" | "br" | "cr") && b.get(i + hashes) == Some(&b'"');
            if !doc && (raw || (matches!(&s[start..i], "b" | "c") && b.get(i) == Some(&b'"'))) {
                let close = format!("\"{}", "#".repeat(hashes));
                let after = i + hashes + 1;
                i = if raw {
                    s[after..end].find(&close).map_or(end, |j| after + j + close.len())
                } else {
                    quoted(b, i, end)
                };
            }
        } else if !doc && rest.starts_with(b"//") {
            i = s[i..end].find('\n').map_or(end, |j| i + j);
            if (rest.starts_with(b"///") && !rest.starts_with(b"////")) || rest.starts_with(b"//!") {
                lex(s, start + 3, i, true, out);
            }
            continue;
        } else if !doc && rest.starts_with(b"/*") {
            let mut nesting = 0;
            while i < end {
                if b[i..end].starts_with(b"/*") {
                    (nesting, i) = (nesting + 1, i + 2);
                } else if b[i..end].starts_with(b"*/") {
                    (nesting, i) = (nesting - 1, i + 2);
                    if nesting == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            let is_doc = (rest.starts_with(b"/**") && !rest.starts_with(b"/**/") && !rest.starts_with(b"/***"))
                || rest.starts_with(b"/*!");
            if is_doc {
                lex(s, start + 3, i.saturating_sub(2).max(start + 3), true, out);
            }
            continue;
        } else if !doc && rest[0] == b'"' {
            i = quoted(b, i, end);
        } else if !doc && rest[0] == b'\'' {
            let next = s[i + 1..].chars().next().map_or(1, char::len_utf8);
            i = if rest.get(1) == Some(&b'\\') {
                b.get(i + 3..end).and_then(|r| r.iter().position(|c| *c == b'\'')).map_or(end, |j| i + 4 + j)
            } else if rest.get(1 + next) == Some(&b'\'') {
                i + 2 + next
            } else {
                i + 1
            };
            continue;
        } else if rest.starts_with(b"::") {
            i += 2;
        } else if rest[0].is_ascii_whitespace() {
            i += 1;
            continue;
        } else {
            i += width;
        }
        out.push(Token { text: &s[start..i], at: start, doc });
    }
}

/// The end of the `"…"` literal whose opening quote is at `b[i]`.
fn quoted(b: &[u8], mut i: usize, end: usize) -> usize {
    i += 1;
    while i < end && b[i] != b'"' {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    (i + 1).min(end)
}
