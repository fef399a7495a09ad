//! Reading SQL text outside its quotes and comments: where a statement
//! starts, and a simple query's statements.

/// `sql` from its first character that is not a blank or in a comment.
pub(super) fn skip_blank(sql: &str) -> &str {
    let mut s = sql;
    loop {
        let t = s.trim_start();
        if let Some(r) = t.strip_prefix("--") {
            s = r.find('\n').map_or("", |i| &r[i + 1..]);
        } else if let Some(r) = t.strip_prefix("/*") {
            s = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else {
            return t;
        }
    }
}

/// Walks SQL text yielding the characters outside quotes and comments.
pub(super) struct Scanner<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(s: &'a str) -> Self {
        Scanner { s, at: 0 }
    }

    pub(super) fn next_code(&mut self) -> Option<(usize, char)> {
        loop {
            let rest = &self.s[self.at..];
            let c = rest.chars().next()?;
            let i = self.at;
            if rest.starts_with("--") {
                self.at += rest.find('\n').map_or(rest.len(), |n| n + 1);
            } else if let Some(body) = rest.strip_prefix("/*") {
                self.at += body.find("*/").map_or(rest.len(), |n| n + 4);
            } else if c == '\'' || c == '"' {
                let mut j = 1;
                loop {
                    match rest[j..].find(c) {
                        None => {
                            j = rest.len();
                            break;
                        }
                        Some(n) => {
                            j += n + 1;
                            // A doubled quote stays inside.
                            if rest[j..].starts_with(c) {
                                j += 1;
                            } else {
                                break;
                            }
                        }
                    }
                }
                self.at += j;
            } else if c == '$' {
                // `$tag$ ... $tag$` (not `$1`).
                let tag_end = rest[1..]
                    .find(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
                    .map(|n| n + 1);
                match tag_end {
                    Some(e)
                        if rest[e..].starts_with('$')
                            && !rest[1..e].starts_with(|ch: char| ch.is_ascii_digit()) =>
                    {
                        let tag = &rest[..=e];
                        self.at += rest[tag.len()..]
                            .find(tag)
                            .map_or(rest.len(), |n| tag.len() + n + tag.len());
                    }
                    _ => {
                        self.at += 1;
                        return Some((i, c));
                    }
                }
            } else {
                self.at += c.len_utf8();
                return Some((i, c));
            }
        }
    }
}

/// A simple query's statements: `sql` split at the semicolons outside
/// quotes and comments, blank pieces dropped. (DuckDB's parser judges each
/// piece; a piece cut wrongly fails to parse, it cannot pass the guard.)
pub fn split(sql: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = Scanner::new(sql);
    while let Some((i, c)) = it.next_code() {
        if c == ';' {
            let piece = &sql[start..i];
            if !skip_blank(piece).is_empty() {
                out.push(piece);
            }
            start = i + 1;
        }
    }
    let piece = &sql[start..];
    if !skip_blank(piece).is_empty() {
        out.push(piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_split_outside_quotes_and_comments() {
        assert_eq!(
            split("select ';' ; select 2 -- a;b\n; /* ; */ select $$;$$;"),
            vec!["select ';' ", " select 2 -- a;b\n", " /* ; */ select $$;$$"]
        );
        assert_eq!(split(" ; ;"), Vec::<&str>::new());
        assert_eq!(split("select $1; select 2"), vec!["select $1", " select 2"]);
    }
}
