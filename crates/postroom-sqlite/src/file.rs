//! The database file is private to its owner: it holds the outbox, the inbox and parked
//! payloads, which may carry personal data. A new file is created with mode `0600` before
//! SQLite opens it; SQLite gives its `-wal` and `-shm` files the database file's mode. A file
//! that already exists keeps the mode its owner gave it.

use postroom_core::{Error, ErrorKind, Result};
use std::path::Path;

/// Create `path` empty with mode `0600` unless it exists (SQLite reads an empty file as an
/// empty database). `:memory:` and `file:` URIs are SQLite's business and left alone.
pub fn create_private(path: &Path) -> Result<()> {
    let text = path.to_string_lossy();
    if text == ":memory:" || text.starts_with("file:") {
        return Ok(());
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::new(
            ErrorKind::Config,
            format!("cannot create database {}: {e}", path.display()),
        )),
    }
}
