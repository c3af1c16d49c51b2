//! Include and exclude lists of account, stream and consumer names.
//!
//! Patterns are regular expressions (the `regex` crate's syntax), matched
//! against the whole name, as prometheus-nats-exporter's and
//! kafka-lag-exporter's allow and deny lists are: `orders-.*` takes
//! `orders-eu` but not `old-orders-eu`. A name is kept when it matches some
//! include pattern (or none are given) and no exclude pattern: exclude wins.

use regex::Regex;

/// One pattern from the command line, anchored to the whole name.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    text: String,
    regex: Regex,
}

impl Pattern {
    /// Whether `name` matches the whole pattern.
    pub(crate) fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }

    /// The one name this pattern matches, when it has no special
    /// characters (so that the server can be asked for that name alone).
    pub(crate) fn exact(&self) -> Option<&str> {
        let special = |c: char| "\\.+*?()|[]{}^$".contains(c);
        (!self.text.contains(special)).then_some(self.text.as_str())
    }
}

/// Parses a pattern for a flag: a regular expression matched against the
/// whole name; the error is one line.
pub(crate) fn parse_pattern(text: &str) -> Result<Pattern, String> {
    match Regex::new(&format!("^(?:{text})$")) {
        Ok(regex) => Ok(Pattern {
            text: text.to_string(),
            regex,
        }),
        Err(e) => {
            // The regex crate explains over several lines, the reason last.
            let message = e.to_string();
            let why = message
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid")
                .trim()
                .trim_start_matches("error: ");
            Err(format!("'{text}' is not a valid regular expression: {why}"))
        }
    }
}

/// The include and exclude patterns of one kind of name.
#[derive(Debug, Clone, Default)]
pub(crate) struct NameFilter {
    /// Names to keep; empty keeps every name.
    pub(crate) include: Vec<Pattern>,
    /// Names to leave out, even when included.
    pub(crate) exclude: Vec<Pattern>,
}

impl NameFilter {
    /// Whether `name` is kept: included (or no include given) and not excluded.
    pub(crate) fn keeps(&self, name: &str) -> bool {
        self.keeps_any(&[name])
    }

    /// Whether a thing known by several `names` (an account's name tag and
    /// its public key) is kept: some name included, or no include given,
    /// and no name excluded.
    pub(crate) fn keeps_any(&self, names: &[&str]) -> bool {
        let any = |patterns: &[Pattern]| {
            patterns
                .iter()
                .any(|p| names.iter().any(|name| p.matches(name)))
        };
        (self.include.is_empty() || any(&self.include)) && !any(&self.exclude)
    }

    /// Whether every name is kept.
    pub(crate) fn keeps_all(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }

    /// The one name kept, when a single include pattern names it exactly.
    pub(crate) fn only(&self) -> Option<&str> {
        match self.include.as_slice() {
            [one] => one.exact().filter(|name| self.keeps(name)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(include: &[&str], exclude: &[&str]) -> NameFilter {
        let parse = |p: &[&str]| p.iter().map(|t| parse_pattern(t).unwrap()).collect();
        NameFilter {
            include: parse(include),
            exclude: parse(exclude),
        }
    }

    #[test]
    fn whole_names_match_and_exclude_wins() {
        let f = filter(&[], &[]);
        assert!(f.keeps("anything") && f.keeps_all() && f.only().is_none());
        let f = filter(&["orders-.*", "audit"], &[]);
        assert!(f.keeps("orders-eu") && f.keeps("audit"));
        // Anchored: a pattern is not found inside a longer name.
        assert!(!f.keeps("old-orders-eu") && !f.keeps("audit2") && !f.keeps("xaudit"));
        let f = filter(&["orders-.*"], &["orders-test.*"]);
        assert!(f.keeps("orders-eu") && !f.keeps("orders-test-1"));
        // Exclude alone keeps everything else.
        let f = filter(&[], &["_INBOX.*", "tmp"]);
        assert!(f.keeps("orders") && !f.keeps("tmp") && !f.keeps("_INBOX_x"));
        // Alternation stays inside the anchors.
        let f = filter(&["a|b"], &[]);
        assert!(f.keeps("a") && f.keeps("b") && !f.keeps("ab"));
        // `$` in account names such as `$G` is a regex character: escaped it is exact.
        let f = filter(&["\\$G"], &[]);
        assert!(f.keeps("$G") && !f.keeps("G"));
        // Known by two names: either may be included, neither excluded.
        let f = filter(&["ACME"], &[]);
        assert!(f.keeps_any(&["ACME", "PUBKEY"]) && f.keeps_any(&["x", "ACME"]));
        let f = filter(&[], &["ACME"]);
        assert!(!f.keeps_any(&["ACME", "PUBKEY"]) && !f.keeps_any(&["PUBKEY", "ACME"]));
    }

    #[test]
    fn exact_names_only_without_special_characters() {
        assert_eq!(filter(&["ACME"], &[]).only(), Some("ACME"));
        assert_eq!(filter(&["team_1-eu"], &[]).only(), Some("team_1-eu"));
        assert_eq!(filter(&["ACME", "OTHER"], &[]).only(), None);
        assert_eq!(filter(&["AC.E"], &[]).only(), None);
        assert_eq!(filter(&["ACME"], &["ACME"]).only(), None);
    }

    #[test]
    fn bad_patterns_are_one_line() {
        for bad in ["(", "[a-", "*x", "a{2,1}"] {
            let e = parse_pattern(bad).unwrap_err();
            assert_eq!(e.lines().count(), 1, "{e}");
            assert!(e.starts_with(&format!("'{bad}' is not a valid regular expression: ")));
        }
    }
}
