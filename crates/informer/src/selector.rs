//! A parser for the label selector string syntax (`a=b,c!=d,e in (f,g),!h`) into kube-core's
//! [`Selector`]; kube-core builds selectors from `LabelSelector` but has no string parser.

use std::collections::BTreeSet;

use kube::core::{Expression, Selector};

/// Errors from [`parse_label_selector`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    /// The selector string does not follow the label selector grammar.
    #[error("invalid label selector {selector:?} at byte {at}: {reason}")]
    Invalid {
        /// The input.
        selector: String,
        /// Byte offset of the problem.
        at: usize,
        /// What was expected.
        reason: &'static str,
    },
}

/// Parses a label selector in the apimachinery `labels.Parse` syntax: equality (`=`, `==`, `!=`),
/// set-based (`in`, `notin`), existence (`key`, `!key`), requirements joined by `,`.
/// The numeric `gt`/`lt` operators are not supported (kube-core's `Expression` lacks them).
/// The empty string selects everything.
pub fn parse_label_selector(input: &str) -> Result<Selector, SelectorError> {
    let mut p = Parser { s: input, pos: 0 };
    let mut exprs = Vec::new();
    p.skip_ws();
    if p.at_end() {
        return Ok(Selector::default());
    }
    loop {
        exprs.push(p.requirement()?);
        p.skip_ws();
        if p.at_end() {
            break;
        }
        p.expect(',', "expected ',' between requirements")?;
    }
    Ok(exprs.into_iter().collect())
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err<T>(&self, reason: &'static str) -> Result<T, SelectorError> {
        Err(SelectorError::Invalid { selector: self.s.to_owned(), at: self.pos, reason })
    }

    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }

    fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }

    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.s.len() - trimmed.len();
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn expect(&mut self, c: char, reason: &'static str) -> Result<(), SelectorError> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            Ok(())
        } else {
            self.err(reason)
        }
    }

    /// A label key or value: letters, digits, `-`, `_`, `.`, `/`.
    fn word(&mut self) -> &str {
        self.skip_ws();
        let start = self.pos;
        let len = self
            .rest()
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
            .unwrap_or(self.rest().len());
        self.pos += len;
        &self.s[start..self.pos]
    }

    fn requirement(&mut self) -> Result<Expression, SelectorError> {
        self.skip_ws();
        if self.peek() == Some('!') {
            self.pos += 1;
            let key = self.word().to_owned();
            if key.is_empty() {
                return self.err("expected a key after '!'");
            }
            return Ok(Expression::DoesNotExist(key));
        }
        let key = self.word().to_owned();
        if key.is_empty() {
            return self.err("expected a label key");
        }
        self.skip_ws();
        let rest = self.rest().to_owned();
        if rest.is_empty() || rest.starts_with(',') {
            return Ok(Expression::Exists(key));
        }
        for (op, len) in [("==", 2), ("!=", 2), ("=", 1)] {
            if rest.starts_with(op) {
                self.pos += len;
                let value = self.word().to_owned();
                return Ok(if op == "!=" { Expression::NotEqual(key, value) } else { Expression::Equal(key, value) });
            }
        }
        let op = self.word().to_owned();
        let values = match op.as_str() {
            "in" | "notin" => self.value_set()?,
            "" if rest.starts_with(['<', '>']) => return self.err("gt/lt operators are not supported"),
            _ => return self.err("expected '=', '==', '!=', 'in' or 'notin'"),
        };
        Ok(if op == "in" { Expression::In(key, values) } else { Expression::NotIn(key, values) })
    }

    fn value_set(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        self.expect('(', "expected '(' after in/notin")?;
        let mut values = BTreeSet::new();
        loop {
            values.insert(self.word().to_owned());
            self.skip_ws();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some(')') => {
                    self.pos += 1;
                    return Ok(values);
                }
                _ => return self.err("expected ',' or ')' in value set"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::core::SelectorExt;
    use rstest::rstest;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[rstest]
    #[case("", &[], true)]
    #[case("app=web", &[("app", "web")], true)]
    #[case("app==web", &[("app", "db")], false)]
    #[case("app!=web", &[], true)]
    #[case("app!=web", &[("app", "web")], false)]
    #[case("env in (prod, staging)", &[("env", "staging")], true)]
    #[case("env in (prod,staging)", &[], false)]
    #[case("env notin (prod)", &[], true)]
    #[case("env notin (prod)", &[("env", "prod")], false)]
    #[case("tier", &[("tier", "x")], true)]
    #[case("!tier", &[("tier", "x")], false)]
    #[case(" app = web , !legacy, example.com/team in (a) ", &[("app", "web"), ("example.com/team", "a")], true)]
    fn selectors_match_like_apimachinery(#[case] selector: &str, #[case] on: &[(&str, &str)], #[case] expected: bool) {
        let parsed = parse_label_selector(selector).unwrap();
        assert_eq!(parsed.matches(&labels(on)), expected, "{selector}");
    }

    #[rstest]
    #[case("app=web,")]
    #[case("=web")]
    #[case("env in prod")]
    #[case("env in (prod")]
    #[case("replicas > 3")]
    #[case("app web")]
    #[case("!")]
    fn malformed_selectors_are_rejected(#[case] selector: &str) {
        assert!(parse_label_selector(selector).is_err(), "{selector}");
    }

    #[test]
    fn a_parsed_selector_prints_back_in_the_same_syntax() {
        let parsed = parse_label_selector("a=b,c notin (d,e),!f").unwrap();
        assert_eq!(parsed.to_string(), "a=b,c notin (d,e),!f");
    }
}
