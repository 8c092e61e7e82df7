//! Configuration: a TOML file (`--config`, `POSTROOM_CONFIG`, or `./postroom.toml` when
//! present) with values that flags and environment variables override.

use crate::error::{CliError, CliResult};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The config file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Database: a SQLite file path or `sqlite://path`.
    pub database: Option<String>,
    /// PostgreSQL table prefix (default `postroom_`).
    pub table_prefix: Option<String>,
    /// Parking lot settings.
    #[serde(default)]
    pub parking: ParkingSection,
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

/// Load the config file: an explicit path must exist; the default one is optional.
pub fn load(explicit: Option<&Path>) -> CliResult<ConfigFile> {
    let (path, required) = match explicit {
        Some(p) => (p.to_path_buf(), true),
        None => (PathBuf::from("postroom.toml"), false),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(ConfigFile::default());
        }
        Err(e) => {
            return Err(CliError::usage(format!(
                "cannot read config file {}: {e}",
                path.display()
            )));
        }
    };
    toml::from_str(&text)
        .map_err(|e| CliError::usage(format!("bad config file {}: {e}", path.display())))
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
        assert_eq!(err.kind, crate::error::CliErrorKind::Usage);
        assert!(err.message.contains("unknown field"), "{}", err.message);
        let missing = load(Some(&dir.path().join("nope.toml"))).unwrap_err();
        assert!(missing.message.contains("cannot read config file"));
    }
}
