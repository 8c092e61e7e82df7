//! Where a store or a transport is: a URL (`postgres://…`, `amqp://…`) or, for the embedded
//! store, a SQLite file path. An [`Endpoint`] may hold a password: it prints (`Display`,
//! `Debug`) only its redacted form, and a parse error never echoes the text it was given.

use super::redact::redact;
use crate::error::{Error, Result};
use std::fmt;
use std::path::{Path, PathBuf};

/// The scheme name of a SQLite file (a bare path, `sqlite://path` or `sqlite:path`).
pub const SQLITE: &str = "sqlite";

/// A parsed database or broker location.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    scheme: String,
    /// The whole text, password included; the file path for SQLite.
    text: String,
}

impl Endpoint {
    /// A database: a SQLite file path (`app.db`, `sqlite://app.db`, `sqlite:app.db`) or a URL
    /// (`postgres://…`).
    pub fn database(raw: &str) -> Result<Self> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(Error::config(
                "the database is empty: give a file path or a URL",
            ));
        }
        let sqlite_path = raw
            .strip_prefix("sqlite://")
            .or_else(|| raw.strip_prefix("sqlite:"));
        if let Some(path) = sqlite_path {
            if path.is_empty() {
                return Err(Error::config("the SQLite database path is empty"));
            }
            return Ok(Self::file(path));
        }
        if raw.contains("://") {
            Self::url("database", raw)
        } else {
            Ok(Self::file(raw))
        }
    }

    /// A broker URL (`amqp://…`, `amqps://…`).
    pub fn broker(raw: &str) -> Result<Self> {
        let raw = raw.trim();
        if !raw.contains("://") {
            return Err(Error::config(
                "the broker must be a URL such as amqp://user@host:5672/%2f",
            ));
        }
        Self::url("broker", raw)
    }

    fn file(path: &str) -> Self {
        Self {
            scheme: SQLITE.into(),
            text: path.into(),
        }
    }

    fn url(what: &str, raw: &str) -> Result<Self> {
        let parsed = url::Url::parse(raw)
            .map_err(|e| Error::config(format!("bad {what} URL {}: {e}", redact(raw))))?;
        Ok(Self {
            scheme: parsed.scheme().to_ascii_lowercase(),
            text: raw.into(),
        })
    }

    /// The scheme (`sqlite` for a file), lowercase: what the registry chooses a driver by.
    #[must_use]
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The whole text, password included: only for the driver that connects with it (or a
    /// child process's environment). Never print it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// The SQLite file, when this is one.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        (self.scheme == SQLITE).then(|| Path::new(&self.text))
    }

    /// The printable form, password removed.
    #[must_use]
    pub fn redacted(&self) -> String {
        redact(&self.text)
    }

    fn parsed(&self) -> Option<url::Url> {
        (self.scheme != SQLITE)
            .then(|| url::Url::parse(&self.text).ok())
            .flatten()
    }

    /// The user name in the URL, if any.
    #[must_use]
    pub fn user(&self) -> Option<String> {
        self.parsed()
            .map(|u| percent_decode(u.username()))
            .filter(|u| !u.is_empty())
    }

    /// The password in the URL, decoded, if any.
    #[must_use]
    pub fn password(&self) -> Option<String> {
        self.parsed()?.password().map(percent_decode)
    }

    /// The host, if any.
    #[must_use]
    pub fn host(&self) -> Option<String> {
        self.parsed()?.host_str().map(str::to_string)
    }

    /// The same URL with `password` set (percent-encoded as needed).
    pub fn with_password(&self, password: &str) -> Result<Self> {
        let mut u = self.parsed().ok_or_else(|| {
            Error::config(format!(
                "{} takes no password (it is a file, not a server)",
                self.redacted()
            ))
        })?;
        u.set_password(Some(password))
            .map_err(|()| Error::config(format!("{} cannot carry a password", self.redacted())))?;
        Ok(Self {
            scheme: self.scheme.clone(),
            text: u.to_string(),
        })
    }

    /// `text` without this endpoint's password, in clear or percent-encoded form, and with
    /// every URL in it redacted: for messages of drivers that might quote what they were given.
    #[must_use]
    pub fn scrub(&self, text: &str) -> String {
        let mut out = redact(text);
        if let Some(u) = self.parsed()
            && let Some(encoded) = u.password()
        {
            for secret in [encoded.to_string(), percent_decode(encoded)] {
                // A password of one or two characters would blank out ordinary words.
                if secret.chars().count() >= 3 {
                    out = out.replace(&secret, "***");
                }
            }
        }
        out
    }

    /// The file path as a `PathBuf`, or an error naming what this is instead.
    pub fn file_path(&self) -> Result<PathBuf> {
        self.path()
            .map(Path::to_path_buf)
            .ok_or_else(|| Error::config(format!("{} is not a SQLite file", self.redacted())))
    }
}

/// `s` with `%XX` escapes decoded (invalid escapes kept as they are).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Hand-written: the derived form would print the password.
impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Endpoint").field(&self.redacted()).finish()
    }
}

/// Text given for a URL on the command line or in the environment, not parsed yet. Parsing
/// is left to [`Endpoint`], whose errors never echo the text; and unlike a `String` it
/// prints (`Debug`) only its redacted form.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct UrlText(pub String);

impl std::str::FromStr for UrlText {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_string()))
    }
}

impl fmt::Debug for UrlText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UrlText").field(&redact(&self.0)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn databases() {
        for (raw, scheme) in [
            ("a.db", SQLITE),
            ("sqlite://a.db", SQLITE),
            ("sqlite:a.db", SQLITE),
            ("postgres://u@h/db", "postgres"),
            ("POSTGRESQL://u@h/db", "postgresql"),
        ] {
            assert_eq!(Endpoint::database(raw).unwrap().scheme(), scheme, "{raw}");
        }
        assert_eq!(
            Endpoint::database("sqlite://dir/a.db").unwrap().path(),
            Some(Path::new("dir/a.db"))
        );
        assert!(Endpoint::database("").is_err());
        assert!(Endpoint::database("sqlite://").is_err());
        assert!(Endpoint::broker("localhost:5672").is_err());
    }

    #[test]
    fn parse_errors_never_echo_the_password() {
        let e = Endpoint::database("postgres://app:hunter22@db:99999999/x").unwrap_err();
        assert!(!e.message().contains("hunter22"), "{e}");
        assert!(e.message().contains("app:***@db"), "{e}");
        let e = Endpoint::broker("amqp://u:hunter22@[::1/x").unwrap_err();
        assert!(!e.message().contains("hunter22"), "{e}");
    }

    #[test]
    fn printing_is_redacted() {
        let e = Endpoint::broker("amqp://u:hunter22@mq:5672/%2f").unwrap();
        for shown in [format!("{e}"), format!("{e:?}"), e.redacted()] {
            assert!(!shown.contains("hunter22"), "{shown}");
        }
        assert_eq!(e.password().as_deref(), Some("hunter22"));
        assert_eq!(e.user().as_deref(), Some("u"));
        assert_eq!(e.host().as_deref(), Some("mq"));
        let t: UrlText = "postgres://a:hunter22@h/d".parse().unwrap();
        assert!(!format!("{t:?}").contains("hunter22"));
    }

    #[test]
    fn passwords_are_set_encoded_and_scrubbed() {
        let e = Endpoint::database("postgres://app@db/x").unwrap();
        let with = e.with_password("p@ss/wörd").unwrap();
        assert_eq!(with.password().as_deref(), Some("p@ss/wörd"));
        assert!(
            with.expose().contains("app:p%40ss%2Fw%C3%B6rd@db"),
            "{}",
            with.expose()
        );
        let msg = format!(
            "driver said: {} and p@ss/wörd and p%40ss%2Fw%C3%B6rd",
            with.expose()
        );
        let clean = with.scrub(&msg);
        assert!(
            !clean.contains("p@ss/wörd") && !clean.contains("p%40ss"),
            "{clean}"
        );
        assert!(
            Endpoint::database("a.db")
                .unwrap()
                .with_password("x")
                .is_err()
        );
    }
}
