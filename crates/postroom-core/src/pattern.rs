//! Topic patterns, AMQP style: words separated by `.`, `*` matching exactly one word and `#`
//! zero or more. [`matches()`] is the reference every transport agrees with; [`to_regex`] is the
//! same pattern as an anchored regular expression (POSIX ARE, as PostgreSQL reads it), for
//! transports that route in SQL; brokers translate patterns to their own syntax (NATS `*` and
//! `>`, Kafka topic names).

/// Whether `routing_key` matches `pattern`.
#[must_use]
pub fn matches(pattern: &str, routing_key: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = routing_key.split('.').collect();
    match_words(&p, &k)
}

fn match_words(p: &[&str], k: &[&str]) -> bool {
    match p.split_first() {
        None => k.is_empty(),
        Some((&"#", rest)) => (0..=k.len()).any(|skip| match_words(rest, &k[skip..])),
        Some((&"*", rest)) => !k.is_empty() && match_words(rest, &k[1..]),
        Some((word, rest)) => k.first() == Some(word) && match_words(rest, &k[1..]),
    }
}

fn escape(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    for c in word.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' || !c.is_ascii() {
            out.push(c);
        } else {
            out.push('\\');
            out.push(c);
        }
    }
    out
}

/// `pattern` as an anchored PostgreSQL (ARE) regular expression.
#[must_use]
pub fn to_regex(pattern: &str) -> String {
    // `#.#` is the same as `#`.
    let mut words: Vec<&str> = Vec::new();
    for w in pattern.split('.') {
        if w == "#" && words.last() == Some(&"#") {
            continue;
        }
        words.push(w);
    }
    if words == ["#"] {
        return "^.*$".into();
    }
    let mut re = String::from("^");
    // Whether the next word must be preceded by a literal dot.
    let mut need_dot = false;
    for (i, w) in words.iter().enumerate() {
        match *w {
            "#" if i == 0 => {
                // Zero or more leading words, each with its dot; the next word needs none.
                re.push_str("(?:[^.]*\\.)*");
                need_dot = false;
                continue;
            }
            "#" => {
                // Zero or more further words, each with its leading dot.
                re.push_str("(?:\\.[^.]*)*");
            }
            "*" => {
                if need_dot {
                    re.push_str("\\.");
                }
                re.push_str("[^.]*");
            }
            word => {
                if need_dot {
                    re.push_str("\\.");
                }
                re.push_str(&escape(word));
            }
        }
        need_dot = true;
    }
    re.push('$');
    re
}

#[cfg(test)]
mod tests {
    use super::*;

    const CASES: &[(&str, &str, bool)] = &[
        ("a.b", "a.b", true),
        ("a.b", "a.c", false),
        ("a.*", "a.b", true),
        ("a.*", "a", false),
        ("a.*", "a.b.c", false),
        ("a.#", "a", true),
        ("a.#", "a.b.c", true),
        ("#.c", "c", true),
        ("#.c", "a.b.c", true),
        ("#.c", "a.b.d", false),
        ("a.#.c", "a.c", true),
        ("a.#.c", "a.x.y.c", true),
        ("a.#.c", "a.x.y", false),
        ("#", "", true),
        ("#", "a.b", true),
        ("*", "a", true),
        ("*", "a.b", false),
        ("#.*", "a", true),
        ("#.*", "a.b", true),
        ("*.#", "a", true),
        ("#.#", "a", true),
        ("t.x1", "t.x1", true),
        ("order.created", "orderXcreated", false),
    ];

    #[test]
    fn reference_matcher() {
        for (p, k, want) in CASES {
            assert_eq!(matches(p, k), *want, "{p} vs {k}");
        }
    }
}
