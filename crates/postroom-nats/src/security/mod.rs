//! How the connection reaches a NATS server that production settings protect: TLS verified
//! against a CA file (or the system's roots), mutual TLS with a client certificate, and one way
//! to authenticate — a user and password, a token, an NKey seed, or a `.creds` file (a user
//! JWT and its seed). Secrets come from files or the environment and are never printed:
//! [`Secret`]'s `Debug` and `Display` show where one came from, not what it is.
//!
//! The URL (and the `[nats]` table of a topology file, with the same keys) says it; see
//! [`settings`] for the forms:
//!
//! ```text
//! tls://nats.internal:4222?cacertfile=/etc/postroom/nats-ca.pem
//! tls://nats.internal:4222?cacertfile=/etc/postroom/nats-ca.pem&certfile=/etc/postroom/client.pem&keyfile=/etc/postroom/client.key
//! nats://app@nats.internal:4222?tls=required&password_file=/run/secrets/nats-password
//! tls://nats.internal:4222?creds_file=/run/secrets/app.creds
//! ```
//!
//! By hand:
//!
//! ```
//! use postroom_nats::security::{NatsAuth, NatsSecurity, Secret};
//! let security = NatsSecurity::tls()
//!     .ca_file("/etc/postroom/nats-ca.pem")
//!     .auth(NatsAuth::UserPassword {
//!         user: "app".into(),
//!         password: Secret::from_text("s3cret", "the program"),
//!     });
//! assert!(!format!("{security:?}").contains("s3cret"));
//! ```

pub mod failure;
pub mod secret;
pub mod settings;

pub use secret::Secret;
pub use settings::{FileSettings, NatsTarget};

use async_nats::ConnectOptions;
use postroom_core::{Error, ErrorKind, Result};
use std::path::{Path, PathBuf};

/// How the client proves who it is (besides a client certificate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NatsAuth {
    /// No credentials.
    #[default]
    None,
    /// A user name and its password.
    UserPassword {
        /// User name.
        user: String,
        /// Password.
        password: Secret,
    },
    /// A token (`authorization { token: … }` on the server).
    Token(Secret),
    /// An NKey user: the file holds the user's seed (`SU…`); the server knows its public key.
    NKey(PathBuf),
    /// A `.creds` file: a user JWT (operator mode) and the seed that signs for it.
    Creds(PathBuf),
}

impl NatsAuth {
    /// What these credentials are, for messages (never the secret).
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            NatsAuth::None => "no credentials".into(),
            NatsAuth::UserPassword { user, password } => {
                format!("user {user:?} with the password from {}", password.source())
            }
            NatsAuth::Token(t) => format!("the token from {}", t.source()),
            NatsAuth::NKey(path) => match read_seed(path) {
                Ok(kp) => format!("NKey {} (seed file {})", kp.public_key(), path.display()),
                Err(_) => format!("the NKey of seed file {}", path.display()),
            },
            NatsAuth::Creds(path) => format!("the user JWT of creds file {}", path.display()),
        }
    }
}

/// The security settings of a workload's connections.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatsSecurity {
    /// TLS or nothing (`tls://`, `tls=required`): a server that does not offer it is refused.
    /// Without it the client still follows a server that requires TLS, verifying it.
    pub tls: bool,
    /// CA certificates (PEM) the server's certificate must chain to; `None`: the system's.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), for servers that verify clients (`verify: true`).
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM, not encrypted).
    pub key_file: Option<PathBuf>,
    /// Credentials.
    pub auth: NatsAuth,
}

impl NatsSecurity {
    /// TLS required, verified against the system's CA certificates; no credentials.
    #[must_use]
    pub fn tls() -> Self {
        Self {
            tls: true,
            ..Self::default()
        }
    }

    /// Verify the server against the CA certificates in `path`.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Present the client certificate `cert` with its key `key`.
    #[must_use]
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert_file = Some(cert.into());
        self.key_file = Some(key.into());
        self
    }

    /// Authenticate with `auth`.
    #[must_use]
    pub fn auth(mut self, auth: NatsAuth) -> Self {
        self.auth = auth;
        self
    }

    /// Refuse settings that cannot work or would not protect what they seem to: TLS files
    /// without TLS, a certificate without its key, files that cannot be read or do not hold
    /// what they should (the error names the file, never its content).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::new(ErrorKind::Config, m));
        if !self.tls
            && (self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some())
        {
            return bad("a CA file, client certificate or key is given for a nats:// URL without TLS: use tls:// (or tls=required)".into());
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return bad("a client certificate needs its key and a key its certificate (certfile and keyfile)".into());
        }
        if let Some(p) = &self.ca_file {
            read_pem(p, "CA file", "CERTIFICATE-----")?;
        }
        if let Some(p) = &self.cert_file {
            read_pem(p, "client certificate", "CERTIFICATE-----")?;
        }
        if let Some(p) = &self.key_file {
            read_pem(p, "client key", "PRIVATE KEY-----")?;
        }
        match &self.auth {
            NatsAuth::UserPassword { user, .. } if user.is_empty() => {
                bad("the NATS user name is empty".into())
            }
            NatsAuth::NKey(path) => read_seed(path).map(|_| ()),
            NatsAuth::Creds(path) => read_creds(path).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// `options` with these settings applied (files read now, so that a bad one is named
    /// before any connection is tried).
    pub fn apply(&self, options: ConnectOptions) -> Result<ConnectOptions> {
        self.validate()?;
        let mut o = options.require_tls(self.tls);
        if let Some(ca) = &self.ca_file {
            o = o.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) {
            o = o.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(match &self.auth {
            NatsAuth::None => o,
            NatsAuth::UserPassword { user, password } => {
                o.user_and_password(user.clone(), password.expose().to_string())
            }
            NatsAuth::Token(t) => o.token(t.expose().to_string()),
            NatsAuth::NKey(path) => {
                let seed = read_seed(path)?.seed().map_err(|_| {
                    Error::new(
                        ErrorKind::Config,
                        format!("the NKey seed file {} holds no seed", path.display()),
                    )
                })?;
                o.nkey(seed)
            }
            NatsAuth::Creds(path) => {
                let text = read_creds(path)?;
                o.credentials(&text).map_err(|e| creds_error(path, &e))?
            }
        })
    }
}

/// Read `path` (`what`: `CA file`, `client key`) and check it holds a PEM block ending in
/// `marker`.
fn read_pem(path: &Path, what: &str, marker: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("cannot read the {what} {}: {e}", path.display()),
        )
    })?;
    if !text.contains(marker) {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "the {what} {} holds no PEM block ending in {marker}",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// The user key pair of NKey seed file `path` (its first non-empty line).
fn read_seed(path: &Path) -> Result<nkeys::KeyPair> {
    let bad = |m: String| Error::new(ErrorKind::Config, m);
    let text = std::fs::read_to_string(path).map_err(|e| {
        bad(format!(
            "cannot read the NKey seed file {}: {e}",
            path.display()
        ))
    })?;
    let seed = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let kp = nkeys::KeyPair::from_seed(seed).map_err(|e| {
        bad(format!(
            "the NKey seed file {} holds no valid seed ({}); it must hold a user seed (SU…), as `nk -gen user` writes",
            path.display(),
            e.kind()
        ))
    })?;
    if kp.key_pair_type() != nkeys::KeyPairType::User {
        return Err(bad(format!(
            "the NKey seed file {} holds the seed of {:?} key, not of a user (SU…)",
            path.display(),
            kp.key_pair_type()
        )));
    }
    Ok(kp)
}

/// The text of creds file `path`, checked to hold a user JWT and a seed.
fn read_creds(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("cannot read the creds file {}: {e}", path.display()),
        )
    })?;
    ConnectOptions::new()
        .credentials(&text)
        .map_err(|e| creds_error(path, &e))?;
    Ok(text)
}

fn creds_error(path: &Path, e: &std::io::Error) -> Error {
    // The client's messages say which part is missing and never quote the file.
    Error::new(
        ErrorKind::Config,
        format!(
            "the creds file {} is not a NATS credentials file (a user JWT and its NKey seed, as `nsc generate creds` writes): {e}",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_would_not_protect_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "SUSECRETSEEDTEXT").unwrap();
        let cases = [
            (NatsSecurity::default().ca_file(&ca), "without TLS"),
            (
                NatsSecurity {
                    cert_file: Some(ca.clone()),
                    ..NatsSecurity::tls()
                },
                "needs its key",
            ),
            (
                NatsSecurity::tls().ca_file(dir.path().join("missing.pem")),
                "cannot read the CA file",
            ),
            (NatsSecurity::tls().ca_file(&junk), "holds no PEM block"),
            (NatsSecurity::tls().client_cert(&ca, &ca), "client key"),
            (
                NatsSecurity::default().auth(NatsAuth::NKey(junk.clone())),
                "holds no valid seed",
            ),
            (
                NatsSecurity::default().auth(NatsAuth::Creds(junk.clone())),
                "not a NATS credentials file",
            ),
            (
                NatsSecurity::default().auth(NatsAuth::NKey(dir.path().join("none.nk"))),
                "cannot read the NKey seed file",
            ),
        ];
        for (s, needle) in cases {
            let e = s.validate().unwrap_err();
            assert!(e.message().contains(needle), "{s:?}: {e}");
            assert!(!e.message().contains("SUSECRET"), "{e}");
        }
    }

    #[test]
    fn an_account_seed_is_not_a_user_seed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("acc.nk");
        std::fs::write(&f, nkeys::KeyPair::new_account().seed().unwrap()).unwrap();
        let e = NatsSecurity::default()
            .auth(NatsAuth::NKey(f.clone()))
            .validate()
            .unwrap_err();
        assert!(e.message().contains("not of a user"), "{e}");
        let user = nkeys::KeyPair::new_user();
        std::fs::write(&f, format!("\n{}\n", user.seed().unwrap())).unwrap();
        let auth = NatsAuth::NKey(f);
        NatsSecurity::default()
            .auth(auth.clone())
            .validate()
            .unwrap();
        assert!(auth.describe().contains(&user.public_key()));
        assert!(!auth.describe().contains(&user.seed().unwrap()));
    }
}
