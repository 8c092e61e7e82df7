//! Passwords from a file or the environment, so that none has to be written on a command
//! line (where `ps` shows it to every user of the machine).
//!
//! For the database: `--database-password-file FILE` (or `POSTROOM_DATABASE_PASSWORD_FILE`),
//! else `POSTROOM_DATABASE_PASSWORD`; for the broker the same with `BROKER`. A password found
//! there replaces the one in the URL, if any.

use crate::endpoint::Endpoint;
use crate::error::{OpsError, OpsResult};
use std::path::{Path, PathBuf};

/// The database password variable.
pub const DATABASE_PASSWORD_ENV: &str = "POSTROOM_DATABASE_PASSWORD";
/// The broker password variable.
pub const BROKER_PASSWORD_ENV: &str = "POSTROOM_BROKER_PASSWORD";
/// The database URL variable (also how child processes receive it).
pub const DATABASE_ENV: &str = "POSTROOM_DATABASE";
/// The broker URL variable (also how child processes receive it).
pub const BROKER_ENV: &str = "POSTROOM_BROKER";

/// Where one endpoint's password may come from.
#[derive(Clone, Debug, Default)]
pub struct PasswordSource {
    /// A file holding the password (one line; a final newline is ignored).
    pub file: Option<PathBuf>,
    /// An environment variable holding it.
    pub env: Option<&'static str>,
}

impl PasswordSource {
    /// The database's sources: `file`, then [`DATABASE_PASSWORD_ENV`].
    #[must_use]
    pub fn database(file: Option<PathBuf>) -> Self {
        Self {
            file,
            env: Some(DATABASE_PASSWORD_ENV),
        }
    }

    /// The broker's sources: `file`, then [`BROKER_PASSWORD_ENV`].
    #[must_use]
    pub fn broker(file: Option<PathBuf>) -> Self {
        Self {
            file,
            env: Some(BROKER_PASSWORD_ENV),
        }
    }

    /// The password, if a source holds one.
    pub fn read(&self) -> OpsResult<Option<String>> {
        if let Some(path) = &self.file {
            return read_password_file(path).map(Some);
        }
        Ok(self
            .env
            .and_then(|v| std::env::var(v).ok())
            .filter(|p| !p.is_empty()))
    }

    /// `endpoint` with the password from these sources set, or as it is when none holds one.
    /// A SQLite file ignores an environment password (the variable may be meant for another
    /// command) but refuses a password file (that was asked for explicitly).
    pub fn apply(&self, endpoint: Endpoint) -> OpsResult<Endpoint> {
        if endpoint.path().is_some() {
            if let Some(f) = &self.file {
                return Err(OpsError::usage(format!(
                    "password file {} given, but {} is a SQLite file (no password)",
                    f.display(),
                    endpoint.redacted()
                )));
            }
            return Ok(endpoint);
        }
        match self.read()? {
            Some(p) => Ok(endpoint.with_password(&p)?),
            None => Ok(endpoint),
        }
    }
}

/// Read a password file: its first line, without the line break.
pub fn read_password_file(path: &Path) -> OpsResult<String> {
    let text = crate::error::read_text(path, "password")?;
    let line = text.lines().next().unwrap_or("").to_string();
    if line.is_empty() {
        return Err(OpsError::usage(format!(
            "password file {} is empty",
            path.display()
        )));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_file_sets_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cr3t-pw\n").unwrap();
        let e = Endpoint::database("postgres://app@db/x").unwrap();
        let src = PasswordSource {
            file: Some(f.clone()),
            env: None,
        };
        let with = src.apply(e).unwrap();
        assert_eq!(with.password().as_deref(), Some("s3cr3t-pw"));
        assert!(!with.to_string().contains("s3cr3t"));
        // Not for a file database; an empty or missing file is a clear error.
        assert!(src.apply(Endpoint::database("a.db").unwrap()).is_err());
        std::fs::write(&f, "\n").unwrap();
        let err = src.read().unwrap_err();
        assert!(err.message.contains("is empty"), "{err}");
        let missing = PasswordSource {
            file: Some(dir.path().join("nope")),
            env: None,
        };
        assert!(missing.read().unwrap_err().message.contains("cannot read"));
    }

    #[test]
    fn no_source_leaves_the_url_alone() {
        let src = PasswordSource::default();
        let e = Endpoint::database("postgres://app:inurl@db/x").unwrap();
        assert_eq!(src.apply(e.clone()).unwrap(), e);
    }
}
