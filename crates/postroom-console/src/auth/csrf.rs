//! CSRF protection: every request that can change state (any method but GET and HEAD) must
//! carry its session's token, in the `csrf` form field or the `x-csrf-token` header.

/// Header that may carry the token (for scripts).
pub const HEADER: &str = "x-csrf-token";
/// Form field that carries the token.
pub const FIELD: &str = "csrf";

/// Compare in time independent of where the first difference is.
#[must_use]
pub fn tokens_equal(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The token in a form body (`application/x-www-form-urlencoded`), if any.
#[must_use]
pub fn token_in_form(body: &[u8]) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(k, _)| k == FIELD)
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_tokens() {
        assert!(tokens_equal("abc", "abc"));
        assert!(!tokens_equal("abc", "abd"));
        assert!(!tokens_equal("abc", "ab"));
        assert_eq!(token_in_form(b"a=1&csrf=xyz&b=2").as_deref(), Some("xyz"));
        assert_eq!(token_in_form(b"a=1"), None);
    }
}
