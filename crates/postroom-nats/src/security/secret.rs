//! A password or token and where it came from: `Debug` and `Display` show the source only,
//! never the text.

use postroom_core::{Error, ErrorKind, Result};
use std::fmt;
use std::path::Path;

/// A secret (a password or a token) and its source.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    text: String,
    source: String,
}

impl Secret {
    /// A secret given as text (by a program that read it from its own secret store, or from
    /// the broker URL).
    #[must_use]
    pub fn from_text(text: impl Into<String>, source: &str) -> Self {
        Self {
            text: text.into(),
            source: source.to_string(),
        }
    }

    /// The secret in environment variable `var`; unset or empty is an error naming `var`.
    pub fn from_env(var: &str, what: &str) -> Result<Self> {
        match std::env::var(var) {
            Ok(text) if !text.is_empty() => Ok(Self {
                text,
                source: format!("environment variable {var}"),
            }),
            _ => Err(Error::new(
                ErrorKind::Config,
                format!("the NATS {what} variable {var} is not set"),
            )),
        }
    }

    /// The first line of file `path` (a final newline is not part of it); `what` names the
    /// secret in errors (`password`, `token`). The error names the file, never its content.
    pub fn from_file(path: &Path, what: &str) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::Config,
                format!("cannot read the NATS {what} file {}: {e}", path.display()),
            )
        })?;
        let line = text.lines().next().unwrap_or("").trim_end().to_string();
        if line.is_empty() {
            return Err(Error::new(
                ErrorKind::Config,
                format!("the NATS {what} file {} is empty", path.display()),
            ));
        }
        Ok(Self {
            text: line,
            source: format!("file {}", path.display()),
        })
    }

    /// The secret itself: only for the client's CONNECT.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// Where it came from (`file /run/secrets/nats`, `the broker URL`).
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(from {})", self.source)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(secret from {})", self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_file_gives_its_first_line_and_never_shows_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "hunter2-secret\nignored\n").unwrap();
        let s = Secret::from_file(&f, "password").unwrap();
        assert_eq!(s.expose(), "hunter2-secret");
        let shown = format!("{s:?} {s}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains(&f.display().to_string()), "{shown}");
        std::fs::write(&f, "\n").unwrap();
        let e = Secret::from_file(&f, "token").unwrap_err();
        assert!(
            e.message().contains("token file") && e.message().contains("empty"),
            "{e}"
        );
        let e = Secret::from_file(&dir.path().join("missing"), "password").unwrap_err();
        assert!(
            e.message().contains("cannot read the NATS password file"),
            "{e}"
        );
        let e = Secret::from_env("POSTROOM_TEST_SURELY_UNSET_VAR", "token").unwrap_err();
        assert!(
            e.message().contains("POSTROOM_TEST_SURELY_UNSET_VAR"),
            "{e}"
        );
    }
}
