//! `key=value` lines (docs/debugfs.md): pairs separated by single spaces, unknown keys kept and
//! ignored by whoever does not need them. A value may be a JSON-quoted string (`"a b"`); a bare
//! word after a pair continues that pair's value (a `comm` with a space in it), and bare words
//! before the first pair are the line's leading words (`process pid=4411 ...` in a crash dump).

use serde_json::{Map, Value};

/// One parsed line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kv {
    /// Words before the first `key=value`.
    pub words: Vec<String>,
    /// The pairs, in order.
    pub pairs: Vec<(String, String)>,
    /// The line as read.
    pub line: String,
}

impl Kv {
    /// Parses one line.
    pub fn parse(line: &str) -> Kv {
        let mut kv = Kv {
            line: line.trim_end().to_string(),
            ..Kv::default()
        };
        for tok in tokens(line) {
            match tok.split_once('=') {
                Some((k, v)) if !k.is_empty() && !k.contains('"') => {
                    kv.pairs.push((k.to_string(), unquote(v)))
                }
                _ => match kv.pairs.last_mut() {
                    Some((_, v)) => {
                        v.push(' ');
                        v.push_str(&tok);
                    }
                    None => kv.words.push(tok),
                },
            }
        }
        kv
    }

    /// The value of `key` (the first one).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key` as a number (decimal, or hex with `0x`).
    pub fn num(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(parse_num)
    }

    /// The value of `key`, or `-`.
    pub fn or_dash(&self, key: &str) -> &str {
        self.get(key).unwrap_or("-")
    }

    /// A JSON object of every pair; decimal numbers become numbers.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in &self.pairs {
            m.insert(k.clone(), scalar(v));
        }
        Value::Object(m)
    }
}

/// A decimal string as a JSON number, anything else as a string.
pub fn scalar(v: &str) -> Value {
    if !v.is_empty() && v.len() < 20 && v.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(n) = v.parse::<u64>() {
            return Value::from(n);
        }
    }
    if let Some(d) = v.strip_prefix('-') {
        if !d.is_empty() && d.len() < 19 && d.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = v.parse::<i64>() {
                return Value::from(n);
            }
        }
    }
    Value::from(v)
}

/// `123` or `0x7b`.
pub fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Splits on spaces, keeping a `"..."` (with JSON escapes) inside one token.
pub fn tokens(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_q = false;
    let mut esc = false;
    for c in line.trim_end_matches(['\n', '\r']).chars() {
        if in_q {
            cur.push(c);
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_q = false;
            }
        } else if c == ' ' || c == '\t' {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            if c == '"' {
                in_q = true;
            }
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Removes JSON quotes (and unescapes) when `s` is a quoted string; otherwise returns it.
pub fn unquote(s: &str) -> String {
    if s.len() >= 2 && s.starts_with('"') && s.ends_with('"') {
        if let Ok(Value::String(v)) = serde_json::from_str::<Value>(s) {
            return v;
        }
    }
    s.to_string()
}

/// Parses every non-empty line of a text.
pub fn lines(text: &str) -> Vec<Kv> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(Kv::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_words_and_continuations() {
        let k = Kv::parse("process pid=4411 comm=Web Content client=5 note=\"a b\"");
        assert_eq!(k.words, vec!["process"]);
        assert_eq!(k.get("comm"), Some("Web Content"));
        assert_eq!(k.get("note"), Some("a b"));
        assert_eq!(k.num("pid"), Some(4411));
        assert_eq!(parse_num("0x10"), Some(16));
        assert_eq!(
            k.to_json().to_string(),
            r#"{"pid":4411,"comm":"Web Content","client":5,"note":"a b"}"#
        );
    }
}
