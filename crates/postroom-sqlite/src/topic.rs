//! Topic pattern matching with AMQP semantics: `*` matches one word, `#` zero or more.

/// Whether `routing_key` matches `pattern`.
pub fn matches(pattern: &str, routing_key: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = routing_key.split('.').collect();
    match_words(&p, &k)
}

fn match_words(p: &[&str], k: &[&str]) -> bool {
    match (p.first(), k.first()) {
        (None, None) => true,
        (Some(&"#"), _) => match_words(&p[1..], k) || (!k.is_empty() && match_words(p, &k[1..])),
        (Some(_), None) | (None, Some(_)) => false,
        (Some(&"*"), Some(_)) => match_words(&p[1..], &k[1..]),
        (Some(w), Some(x)) => w == x && match_words(&p[1..], &k[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn amqp_topic_semantics() {
        assert!(matches("order.created", "order.created"));
        assert!(!matches("order.created", "order.updated"));
        assert!(matches("order.*", "order.created"));
        assert!(!matches("order.*", "order.created.v2"));
        assert!(matches("order.#", "order.created.v2"));
        assert!(matches("order.#", "order"));
        assert!(matches("#", "anything.at.all"));
        assert!(matches("*.created", "invoice.created"));
        assert!(!matches("*.created", "created"));
    }
}
