//! The one redaction function: every URL (or text that may hold one) goes through [`redact`]
//! before it is printed or logged.

/// Query or key-value parameters whose value is a secret.
const SECRET_PARAMS: [&str; 6] = ["password", "passwd", "pwd", "secret", "token", "apikey"];

/// `text` with every password removed: the password of each `scheme://user:password@host`
/// becomes `***`, and so does the value of every secret parameter (`?password=…`,
/// `password=… ` in a key-value connection string, `…&sslpassword=…`). Works on a bare URL
/// and on a message that quotes one or more URLs; text with nothing secret comes back as it is.
#[must_use]
pub fn redact(text: &str) -> String {
    redact_params(&redact_userinfo(text))
}

/// Where a URL token ends: white space, quotes, or brackets that wrap it in prose.
fn token_end(s: &str) -> usize {
    s.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
        .unwrap_or(s.len())
}

fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(s) = rest.find("://") {
        let (head, tail) = rest.split_at(s + 3);
        out.push_str(head);
        let end = token_end(tail);
        let token = &tail[..end];
        // The userinfo ends at the token's last `@`: a password that was not
        // percent-encoded may hold `/`, `@`, `?` or `#` (the URL then does not parse, and the
        // error quoting it must mask it all the same). A query holding an `@` is masked
        // further than needed, never less.
        match token.rfind('@') {
            Some(at) => {
                let userinfo = &token[..at];
                match userinfo.split_once(':') {
                    Some((user, _password)) => {
                        out.push_str(user);
                        out.push_str(":***");
                    }
                    // A NATS client reads a lone user name as a token (`nats://TOKEN@host`).
                    None if lone_user_is_a_token(head) => out.push_str("***"),
                    None => out.push_str(userinfo),
                }
                out.push_str(&token[at..]);
            }
            None => out.push_str(token),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Whether the URL whose text up to `://` is `head` has a scheme (`nats`, `tls`) whose
/// clients take a user name without a password as a token.
fn lone_user_is_a_token(head: &str) -> bool {
    let before = &head[..head.len() - 3];
    let start = before
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .map_or(0, |p| p + 1);
    matches!(
        before[start..].to_ascii_lowercase().as_str(),
        "nats" | "tls"
    )
}

fn redact_params(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while let Some(eq) = lower[i..].find('=').map(|p| p + i) {
        let name_start = lower[..eq]
            .rfind(['?', '&', ';', ' ', '\t', '\n'])
            .map_or(0, |p| p + 1);
        let name = &lower[name_start..eq];
        let value_end = text[eq + 1..]
            .find(|c: char| matches!(c, '&' | ';' | '#') || c.is_whitespace())
            .map_or(text.len(), |p| p + eq + 1);
        // `password_file=/run/secrets/pw` names where a secret is, not the secret.
        let names_a_file = name.ends_with("_file") || name.ends_with("-file");
        if !name.is_empty() && !names_a_file && SECRET_PARAMS.iter().any(|s| name.contains(s)) {
            out.push_str(&text[copied..=eq]);
            out.push_str("***");
            copied = value_end;
        }
        i = value_end.max(eq + 1);
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_in_userinfo() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/shop"),
            "postgres://app:***@db:5432/shop"
        );
        assert_eq!(
            redact("amqps://guest:guest@mq/%2f"),
            "amqps://guest:***@mq/%2f"
        );
        // Not percent-encoded: `/` and `@` inside the password.
        assert_eq!(
            redact("amqp://u:a/b@c@host:5672/%2f"),
            "amqp://u:***@host:5672/%2f"
        );
        assert_eq!(redact("http://u:p%40ss@h:15672"), "http://u:***@h:15672");
        // `?` and `#` too, which end the authority of a URL that parses.
        assert_eq!(
            redact("postgres://u:SEC#RET@h:5432/db?sslmode=require"),
            "postgres://u:***@h:5432/db?sslmode=require"
        );
        assert_eq!(redact("nats://u:S@C?R#T@h:4222"), "nats://u:***@h:4222");
        // A NATS URL's lone user is a token.
        assert_eq!(redact("nats://S3CRETTOKEN@h:4222"), "nats://***@h:4222");
        assert_eq!(
            redact("at tls://S3CRETTOKEN@h:4222, NATS://T@h"),
            "at tls://***@h:4222, NATS://***@h"
        );
        assert_eq!(redact("amqp://guest@mq/%2f"), "amqp://guest@mq/%2f");
    }

    #[test]
    fn nothing_secret_is_kept_as_it_is() {
        for s in [
            "postroom-demo.db",
            "postgres://postgres@127.0.0.1:5432/postgres",
            "amqp://127.0.0.1",
            "sqlite://a.db",
            "",
            "no url here: just text = 3",
        ] {
            assert_eq!(redact(s), s);
        }
    }

    #[test]
    fn secret_parameters() {
        assert_eq!(
            redact("postgres://h/db?sslmode=require&password=pw&user=a"),
            "postgres://h/db?sslmode=require&password=***&user=a"
        );
        assert_eq!(
            redact("host=h password=pw dbname=x"),
            "host=h password=*** dbname=x"
        );
        assert_eq!(redact("sqs://q?Secret_Key=abc"), "sqs://q?Secret_Key=***");
        assert_eq!(redact("x?sslpassword=pw#f"), "x?sslpassword=***#f");
        assert_eq!(
            redact("nats://app@h?password_file=/run/pw&token=t0k"),
            "nats://***@h?password_file=/run/pw&token=***"
        );
    }

    #[test]
    fn urls_inside_messages() {
        assert_eq!(
            redact("cannot reach amqp://u:pw@h:5672/%2f (refused); tried postgres://a:b@c/d"),
            "cannot reach amqp://u:***@h:5672/%2f (refused); tried postgres://a:***@c/d"
        );
        assert_eq!(
            redact("bad URL \"postgres://u:pw@h:99999/db\": invalid port"),
            "bad URL \"postgres://u:***@h:99999/db\": invalid port"
        );
    }

    #[test]
    fn odd_input_never_panics() {
        for s in [
            "://",
            "://@",
            "a://:@",
            "=",
            "password=",
            "?=&=",
            "x://u:p@",
            "é://ü:ß@ö",
        ] {
            let _ = redact(s);
        }
        assert_eq!(redact("x://u:p@"), "x://u:***@");
    }
}
