//! Reading SQL text: names, quotes, parentheses and arguments.

pub(super) fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier `s` starts with (empty when none).
pub(super) fn word(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// A call's arguments: `s` split at the commas outside parentheses,
/// brackets, quotes and comments.
pub(super) fn split_args(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start, mut i) = (0usize, 0usize, 0usize);
    let b = s.as_bytes();
    while i < b.len() {
        let skip = quoted_len(&s[i..]);
        if skip > 0 {
            i += skip;
            continue;
        }
        match b[i] {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if !s[start..].trim().is_empty() || !out.is_empty() {
        out.push(&s[start..]);
    }
    out
}

/// Whether `s` holds any of `words`, in any case: a cheap look before a
/// walk that only a text naming one of them needs.
pub(super) fn mentions_any(s: &str, words: &[&str]) -> bool {
    words.iter().any(|w| contains_ignore_case(s, w))
}

pub(super) fn contains_ignore_case(s: &str, needle: &str) -> bool {
    s.as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// The length of `prefix` when `s` starts with it in any case, at a word
/// boundary.
pub(super) fn strip_ci(s: &str, prefix: &str) -> Option<usize> {
    let head = s.as_bytes().get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix.as_bytes())
        .then_some(prefix.len())
}

/// The index in `s` of the parenthesis closing one already open.
pub(super) fn closing(s: &str) -> Option<usize> {
    let mut depth = 1usize;
    let mut i = 0;
    while i < s.len() {
        let skip = quoted_len(&s[i..]);
        if skip > 0 {
            i += skip;
            continue;
        }
        match s.as_bytes()[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The length of the quoted string, quoted identifier or comment `s`
/// starts with; 0 when it starts with code.
pub(super) fn quoted_len(s: &str) -> usize {
    let b = s.as_bytes();
    match b.first() {
        Some(&q @ (b'\'' | b'"')) => {
            let mut i = 1;
            while i < b.len() {
                if b[i] == q {
                    if b.get(i + 1) == Some(&q) {
                        i += 2;
                        continue;
                    }
                    return i + 1;
                }
                i += 1;
            }
            b.len()
        }
        Some(b'-') if b.get(1) == Some(&b'-') => s.find('\n').map_or(s.len(), |n| n + 1),
        Some(b'/') if b.get(1) == Some(&b'*') => s[2..].find("*/").map_or(s.len(), |n| n + 4),
        _ => 0,
    }
}
