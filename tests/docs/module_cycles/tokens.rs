//! The tokens of Rust source that matter to its module graph: names,
//! `::`, braces; comments and literals left out.

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Star,
    Semi,
    Other,
}

/// The code's tokens, comments and literals left out.
pub(super) fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && raw_string_at(&chars, i) {
            i = skip_raw_string(&chars, i);
        } else if c == 'b' && next == Some('"') {
            i = skip_string(&chars, i + 1);
        } else if c == '"' {
            i = skip_string(&chars, i);
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == ':' && next == Some(':') {
            out.push(Token::PathSep);
            i += 2;
        } else {
            out.push(match c {
                '{' => Token::Open,
                '}' => Token::Close,
                ',' => Token::Comma,
                '*' => Token::Star,
                ';' => Token::Semi,
                c if c.is_whitespace() => {
                    i += 1;
                    continue;
                }
                _ => Token::Other,
            });
            i += 1;
        }
    }
    out
}

fn raw_string_at(chars: &[char], i: usize) -> bool {
    let mut j = i + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    chars.get(j) == Some(&'"')
        && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
}

fn skip_raw_string(chars: &[char], i: usize) -> usize {
    let mut j = i + 1;
    let mut hashes = 0;
    while chars[j] == '#' {
        hashes += 1;
        j += 1;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
            return j + 1 + hashes;
        }
        j += 1;
    }
    j
}

fn skip_string(chars: &[char], i: usize) -> usize {
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            _ => j += 1,
        }
    }
    j
}

/// The paths of a use tree or expression path starting at `at`, expanded
/// (`a::{b, c::d}` gives `a::b` and `a::c::d`), and the index after it.
pub(super) fn paths_at(
    tokens: &[Token],
    at: usize,
    prefix: &[String],
    out: &mut Vec<Vec<String>>,
) -> usize {
    let mut path = prefix.to_vec();
    let mut i = at;
    loop {
        match tokens.get(i) {
            Some(Token::Ident(name)) => {
                if name != "self" || path.is_empty() {
                    path.push(name.clone());
                }
                i += 1;
            }
            Some(Token::Open) => {
                i += 1;
                loop {
                    match tokens.get(i) {
                        Some(Token::Close) => return i + 1,
                        Some(Token::Comma) => i += 1,
                        None => return i,
                        _ => i = paths_at(tokens, i, &path, out),
                    }
                }
            }
            Some(Token::Star) => {
                out.push(path);
                return i + 1;
            }
            _ => {
                out.push(path);
                return i;
            }
        }
        if tokens.get(i) == Some(&Token::PathSep) {
            i += 1;
        } else {
            if let Some(Token::Ident(word)) = tokens.get(i) {
                if word == "as" {
                    i += 2;
                }
            }
            out.push(path);
            return i;
        }
    }
}

/// True if the item ending `before` carries `#[cfg(test)]`: test code may
/// use any module.
pub(super) fn test_only(before: &[Token]) -> bool {
    let item_start = before
        .iter()
        .rposition(|t| matches!(t, Token::Semi | Token::Open | Token::Close))
        .map_or(0, |p| p + 1);
    before[item_start..].windows(3).any(|w| {
        w[0] == Token::Ident("cfg".into())
            && w[1] == Token::Other
            && w[2] == Token::Ident("test".into())
    })
}
