//! A reader of the Prometheus text exposition format (version 0.0.4), as `/metrics` of a
//! postroom process writes it: one sample a line, `name{label="value",…} value [timestamp]`,
//! comments and blank lines skipped. It is strict: a line that is not a sample is an error
//! naming the line, so a page that is not Prometheus text (an HTML error page, a truncated
//! body) is reported rather than read as "no figures".

use std::fmt;

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The metric name.
    pub name: String,
    /// Its labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Series {
    /// The value of label `key`, if it has one.
    #[must_use]
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a text is not Prometheus exposition text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The line, counted from 1.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Every sample of `text`, in order.
pub fn parse(text: &str) -> Result<Vec<Series>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(sample(line).map_err(|reason| ParseError {
            line: i + 1,
            reason,
        })?);
    }
    Ok(out)
}

fn sample(line: &str) -> Result<Series, String> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("no metric name at the start of {:?}", cut(line)));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = label_set(after, &mut labels)?;
    }
    if !rest.starts_with([' ', '\t']) {
        return Err(format!("no value after {name:?}"));
    }
    let mut fields = rest.split_whitespace();
    let value = fields
        .next()
        .ok_or_else(|| format!("no value after {name:?}"))?;
    let value = value
        .parse::<f64>()
        .map_err(|_| format!("{name}: {:?} is not a number", cut(value)))?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("{name}: {:?} is not a timestamp", cut(ts)))?;
    }
    if let Some(extra) = fields.next() {
        return Err(format!(
            "{name}: unexpected {:?} after the value",
            cut(extra)
        ));
    }
    Ok(Series {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Read `key="value",…}` into `labels`; the text after the closing brace.
fn label_set<'a>(mut s: &'a str, labels: &mut Vec<(String, String)>) -> Result<&'a str, String> {
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Ok(after);
        }
        let key_end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .ok_or("a label set without its closing brace")?;
        let key = &s[..key_end];
        if key.is_empty() || key.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!("a bad label name at {:?}", cut(s)));
        }
        s = s[key_end..]
            .trim_start()
            .strip_prefix('=')
            .ok_or_else(|| format!("label {key}: no '='"))?
            .trim_start()
            .strip_prefix('"')
            .ok_or_else(|| format!("label {key}: its value is not quoted"))?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    _ => return Err(format!("label {key}: a bad escape")),
                },
                Some((_, c)) => value.push(c),
                None => return Err(format!("label {key}: its value is not closed")),
            }
        };
        labels.push((key.to_string(), value));
        s = s[end + 1..].trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err(format!("label {key}: expected ',' or '}}' after its value"));
        }
    }
}

/// At most 40 characters of `s`, for an error message.
fn cut(s: &str) -> String {
    s.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_recorder_writes() {
        let text = "# TYPE postroom_inbox_feed_stored_total counter\n\
            postroom_inbox_feed_stored_total{consumer=\"inventory\",feed=\"nats\"} 12\n\
            \n\
            postroom_inbox_feed_lag_messages{consumer=\"inventory\",feed=\"nats\"} 0\n\
            process_up 1 1700000000000\n\
            weird{a=\"x\\\"y\\\\z\\n\", b = \"\",} -Inf\n\
            not_a_number NaN\n";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 5);
        assert_eq!(s[0].name, "postroom_inbox_feed_stored_total");
        assert_eq!(s[0].label("consumer"), Some("inventory"));
        assert_eq!(s[0].label("feed"), Some("nats"));
        assert_eq!(s[0].value, 12.0);
        assert_eq!(s[2].labels, vec![]);
        assert_eq!(s[3].label("a"), Some("x\"y\\z\n"));
        assert_eq!(s[3].label("b"), Some(""));
        assert_eq!(s[3].value, f64::NEG_INFINITY);
        assert!(s[4].value.is_nan());
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn garbage_is_an_error_naming_its_line() {
        for (text, line, needle) in [
            ("<!doctype html>", 1, "no metric name"),
            ("ok 1\n{a=\"b\"} 1", 2, "no metric name"),
            ("m{a=\"b\" 1", 1, "expected ','"),
            ("m{a=b} 1", 1, "not quoted"),
            ("m{a=\"b", 1, "not closed"),
            ("m{a=\"\\x\"} 1", 1, "bad escape"),
            ("m{a} 1", 1, "no '='"),
            ("m{1a=\"b\"} 1", 1, "bad label name"),
            ("m{a=\"b\",", 1, "closing brace"),
            ("m", 1, "no value"),
            ("m{a=\"b\"}", 1, "no value"),
            ("m{a=\"b\"}1", 1, "no value"),
            ("m twelve", 1, "not a number"),
            ("m 1 soon", 1, "not a timestamp"),
            ("m 1 2 3", 1, "unexpected"),
            ("9m 1", 1, "no metric name"),
            ("ünïcode 1", 1, "no metric name"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.reason.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn arbitrary_text_never_panics() {
        const ALPHABET: &[char] = &[
            'm', '_', '{', '}', '=', '"', ',', '\\', ' ', '\t', '\n', '#', '1', '.', 'e', '+', 'I',
            'n', 'f', 'a', 'é', '€',
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2000 {
            let mut s = String::new();
            for _ in 0..(seed % 60) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                s.push(ALPHABET[(seed % ALPHABET.len() as u64) as usize]);
            }
            let _ = parse(&s);
        }
    }
}
