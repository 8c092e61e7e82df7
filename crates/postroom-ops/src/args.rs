//! clap argument groups the command-line shells share.

use crate::credentials::PasswordSource;
use clap::Args;
use std::path::PathBuf;

/// Where passwords come from instead of the command line.
#[derive(Args, Clone, Debug, Default)]
pub struct PasswordArgs {
    /// Read the database password from this file (its first line). Without it,
    /// POSTROOM_DATABASE_PASSWORD is used when set. Either replaces a password in the URL.
    #[arg(
        long,
        env = "POSTROOM_DATABASE_PASSWORD_FILE",
        value_name = "FILE",
        global = true
    )]
    pub database_password_file: Option<PathBuf>,
    /// Read the broker password from this file (its first line). Without it,
    /// POSTROOM_BROKER_PASSWORD is used when set. Either replaces a password in the URL.
    #[arg(
        long,
        env = "POSTROOM_BROKER_PASSWORD_FILE",
        value_name = "FILE",
        global = true
    )]
    pub broker_password_file: Option<PathBuf>,
}

impl PasswordArgs {
    /// The database's password sources.
    #[must_use]
    pub fn database(&self) -> PasswordSource {
        PasswordSource::database(self.database_password_file.clone())
    }

    /// The broker's password sources.
    #[must_use]
    pub fn broker(&self) -> PasswordSource {
        PasswordSource::broker(self.broker_password_file.clone())
    }
}
