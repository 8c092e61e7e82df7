//! Configuration: a TOML file (`--config`, `POSTROOM_CONFIG`, or `./postroom.toml` when
//! present) with values that flags and environment variables override.

use postroom_ops::{OpsError, OpsResult};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The config file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Database: a SQLite file path, `sqlite://path` or a `postgres://` URL (better without
    /// its password: see `--database-password-file`).
    pub database: Option<String>,
    /// PostgreSQL table prefix (default `postroom_`).
    pub table_prefix: Option<String>,
    /// Parking lot settings.
    #[serde(default)]
    pub parking: ParkingSection,
    /// Console settings.
    #[serde(default)]
    pub console: ConsoleSection,
}

/// `[console]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSection {
    /// Inbox feeds `postroom serve` watches, each `NAME=HOST:PORT` (used when neither
    /// `--feed` nor `POSTROOM_CONSOLE_FEEDS` names any).
    #[serde(default)]
    pub feeds: Vec<String>,
    /// Host names `postroom serve` is reached by besides loopback's and its listen address
    /// (used when neither `--allowed-host` nor `POSTROOM_CONSOLE_ALLOWED_HOSTS` names any).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

/// `[parking]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParkingSection {
    /// Default redrive rate, messages per second.
    pub redrive_rate: Option<f64>,
    /// Operator name recorded with redrive runs (default: `$USER`).
    pub operator: Option<String>,
}

/// `e` as its place in `text` (line and column) and its message, without the quoted line.
fn parse_error(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim_end();
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message.to_string(),
    }
}

/// Load the config file: an explicit path must exist; the default one is optional.
pub fn load(explicit: Option<&Path>) -> OpsResult<ConfigFile> {
    let (path, required) = match explicit {
        Some(p) => (p.to_path_buf(), true),
        None => (PathBuf::from("postroom.toml"), false),
    };
    if !required && !path.exists() {
        return Ok(ConfigFile::default());
    }
    let text = postroom_ops::error::read_text(&path, "config")?;
    let bad = |e: &dyn std::fmt::Display| {
        OpsError::usage(format!("bad config file {}: {e}", path.display()))
    };
    // The parser's own message quotes the offending line, which may hold a password: say
    // where and what, never the line.
    let config: ConfigFile = toml::from_str(&text).map_err(|e| bad(&parse_error(&text, &e)))?;
    // Values are checked when the file is read, so a mistake is named with its place in the
    // file whatever command reads it.
    if let Some(rate) = config.parking.redrive_rate {
        postroom_ops::limits::check_rate(rate)
            .map_err(|e| bad(&format_args!("parking.redrive_rate: {}", e.message)))?;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_config_is_a_clear_usage_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("postroom.toml");
        std::fs::write(&p, "databse = 'typo.db'\n").unwrap();
        let err = load(Some(&p)).unwrap_err();
        assert_eq!(err.kind, postroom_ops::OpsErrorKind::Usage);
        assert!(err.message.contains("unknown field"), "{}", err.message);
        std::fs::write(&p, "[parking]\nredrive_rate = -1.0\n").unwrap();
        let err = load(Some(&p)).unwrap_err();
        assert_eq!(err.kind, postroom_ops::OpsErrorKind::Usage);
        assert!(
            err.message
                .contains("parking.redrive_rate: the rate must be between"),
            "{}",
            err.message
        );
        let missing = load(Some(&dir.path().join("nope.toml"))).unwrap_err();
        assert!(missing.message.contains("cannot read config file"));
    }
}
