//! How clients of a workload reach a secured cluster: TLS (a CA file, or the system's roots;
//! optionally a client certificate and key) and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512),
//! as librdkafka settings. The SASL password is a [`SaslPassword`]: read from the environment
//! or a file, never printed (`Debug` shows its source only).
//!
//! ```
//! use postroom_kafka::security::{KafkaSecurity, SaslMechanism, SaslPassword};
//! let security = KafkaSecurity::tls()
//!     .ca_file("/etc/postroom/kafka-ca.pem")
//!     .sasl(SaslMechanism::ScramSha512, "app", SaslPassword::from_text("s3cret"));
//! assert!(!format!("{security:?}").contains("s3cret"));
//! ```

use postroom_core::{Error, ErrorKind, Result};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// librdkafka's `security.protocol`: whether the connection is encrypted, and whether the
/// client authenticates with SASL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// No TLS, no SASL.
    #[default]
    Plaintext,
    /// TLS, no SASL (a client certificate may authenticate).
    Ssl,
    /// SASL over a plaintext connection (the password of PLAIN crosses the network in clear).
    SaslPlaintext,
    /// SASL over TLS: what managed clusters ask for.
    SaslSsl,
}

impl SecurityProtocol {
    /// The name librdkafka and Kafka use.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    /// Whether connections use TLS.
    #[must_use]
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether clients authenticate with SASL.
    #[must_use]
    pub fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl FromStr for SecurityProtocol {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "plaintext" => Ok(SecurityProtocol::Plaintext),
            "ssl" => Ok(SecurityProtocol::Ssl),
            "sasl_plaintext" => Ok(SecurityProtocol::SaslPlaintext),
            "sasl_ssl" => Ok(SecurityProtocol::SaslSsl),
            _ => Err(Error::new(
                ErrorKind::Config,
                format!(
                    "security_protocol {s:?} is not one of plaintext, ssl, sasl_plaintext, sasl_ssl"
                ),
            )),
        }
    }
}

/// A SASL mechanism librdkafka is built with here. GSSAPI (Kerberos) and OAUTHBEARER are not
/// offered: the first needs Cyrus SASL and a KDC, the second a token endpoint or a token
/// callback that no configuration string can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslMechanism {
    /// `PLAIN`: user and password as they are (use it over TLS only).
    Plain,
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
}

impl SaslMechanism {
    /// The name Kafka uses.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl FromStr for SaslMechanism {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().replace('_', "-").as_str() {
            "PLAIN" => Ok(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
            _ => Err(Error::new(
                ErrorKind::Config,
                format!(
                    "sasl_mechanism {s:?} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI and OAUTHBEARER are not built in)"
                ),
            )),
        }
    }
}

/// A SASL password and where it came from; `Debug` and `Display` show the source only.
#[derive(Clone)]
pub struct SaslPassword {
    secret: String,
    source: String,
}

impl SaslPassword {
    /// A password given as text (by a program that read it from its own secret store).
    #[must_use]
    pub fn from_text(secret: impl Into<String>) -> Self {
        Self {
            secret: secret.into(),
            source: "given".into(),
        }
    }

    /// The password in environment variable `var`; unset or empty is an error naming `var`.
    pub fn from_env(var: &str) -> Result<Self> {
        match std::env::var(var) {
            Ok(secret) if !secret.is_empty() => Ok(Self {
                secret,
                source: format!("environment variable {var}"),
            }),
            _ => Err(Error::new(
                ErrorKind::Config,
                format!("the SASL password variable {var} is not set"),
            )),
        }
    }

    /// The first line of file `path` (a final newline is not part of it).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::Config,
                format!("cannot read the SASL password file {}: {e}", path.display()),
            )
        })?;
        let secret = text.lines().next().unwrap_or("").to_string();
        if secret.is_empty() {
            return Err(Error::new(
                ErrorKind::Config,
                format!("the SASL password file {} is empty", path.display()),
            ));
        }
        Ok(Self {
            secret,
            source: format!("file {}", path.display()),
        })
    }

    /// The password itself: only for the client configuration.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.secret
    }
}

impl fmt::Debug for SaslPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SaslPassword(from {})", self.source)
    }
}

impl fmt::Display for SaslPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(password from {})", self.source)
    }
}

/// SASL credentials.
#[derive(Clone, Debug)]
pub struct SaslCredentials {
    /// Mechanism.
    pub mechanism: SaslMechanism,
    /// User name.
    pub username: String,
    /// Password.
    pub password: SaslPassword,
}

/// The security settings of every client of a workload.
#[derive(Clone, Debug, Default)]
pub struct KafkaSecurity {
    /// Protocol.
    pub protocol: SecurityProtocol,
    /// CA certificates (PEM) the brokers' certificates must chain to; `None`: the system's.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), for brokers that authenticate clients by certificate.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM, not encrypted).
    pub key_file: Option<PathBuf>,
    /// SASL credentials (with a `Sasl*` protocol).
    pub sasl: Option<SaslCredentials>,
}

impl KafkaSecurity {
    /// TLS with the system's CA certificates and no SASL.
    #[must_use]
    pub fn tls() -> Self {
        Self {
            protocol: SecurityProtocol::Ssl,
            ..Self::default()
        }
    }

    /// Verify brokers against the CA certificates in `path`.
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

    /// Authenticate with SASL (the protocol becomes `sasl_ssl` or `sasl_plaintext`).
    #[must_use]
    pub fn sasl(
        mut self,
        mechanism: SaslMechanism,
        username: impl Into<String>,
        password: SaslPassword,
    ) -> Self {
        self.protocol = if self.protocol.tls() {
            SecurityProtocol::SaslSsl
        } else {
            SecurityProtocol::SaslPlaintext
        };
        self.sasl = Some(SaslCredentials {
            mechanism,
            username: username.into(),
            password,
        });
        self
    }

    /// Refuse settings that cannot work or would not protect what they seem to: TLS files
    /// without TLS, a certificate without its key, SASL without credentials or credentials
    /// without SASL, files that cannot be read.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::new(ErrorKind::Config, m));
        let tls = self.protocol.tls();
        if !tls && (self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some()) {
            return bad(format!(
                "a CA file, client certificate or key is given, but security_protocol is {} (no TLS): use kafka+ssl:// or security_protocol=ssl/sasl_ssl",
                self.protocol.as_str()
            ));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return bad("a client certificate needs its key and a key its certificate (certfile and keyfile)".into());
        }
        match (&self.sasl, self.protocol.sasl()) {
            (None, true) => {
                return bad(format!(
                    "security_protocol {} needs a SASL user (kafka://user@host) with a password",
                    self.protocol.as_str()
                ));
            }
            (Some(c), false) => {
                return bad(format!(
                    "SASL user {:?} given, but security_protocol is {} (no SASL): use sasl_ssl or sasl_plaintext",
                    c.username,
                    self.protocol.as_str()
                ));
            }
            _ => {}
        }
        if let Some(c) = &self.sasl
            && c.username.is_empty()
        {
            return bad("the SASL user name is empty".into());
        }
        for (what, path) in [
            ("CA file", &self.ca_file),
            ("client certificate", &self.cert_file),
            ("client key", &self.key_file),
        ] {
            if let Some(p) = path {
                std::fs::File::open(p).map_err(|e| {
                    Error::new(
                        ErrorKind::Config,
                        format!("cannot read the {what} {}: {e}", p.display()),
                    )
                })?;
            }
        }
        Ok(())
    }

    /// These settings as librdkafka properties.
    pub(crate) fn apply(&self, c: &mut rdkafka::ClientConfig) {
        c.set("security.protocol", self.protocol.as_str());
        if self.protocol.tls() {
            // Brokers' certificates are verified, names included (librdkafka's defaults, set
            // so that no extra property can have turned them off unnoticed).
            c.set("enable.ssl.certificate.verification", "true");
            c.set("ssl.endpoint.identification.algorithm", "https");
            match &self.ca_file {
                Some(p) => c.set("ssl.ca.location", p.display().to_string()),
                // The OpenSSL built into librdkafka has no idea where this system keeps its
                // CA certificates: librdkafka looks in the usual places.
                None => c.set("ssl.ca.location", "probe"),
            };
            if let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) {
                c.set("ssl.certificate.location", cert.display().to_string());
                c.set("ssl.key.location", key.display().to_string());
            }
        }
        if let Some(s) = &self.sasl {
            c.set("sasl.mechanism", s.mechanism.as_str());
            c.set("sasl.username", &s.username);
            c.set("sasl.password", s.password.expose());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_in_either_case() {
        assert_eq!(
            "SASL_SSL".parse::<SecurityProtocol>().unwrap(),
            SecurityProtocol::SaslSsl
        );
        assert_eq!(
            "scram_sha_512".parse::<SaslMechanism>().unwrap(),
            SaslMechanism::ScramSha512
        );
        let e = "GSSAPI".parse::<SaslMechanism>().unwrap_err();
        assert!(e.message().contains("not built in"), "{e}");
        assert!("tls".parse::<SecurityProtocol>().is_err());
    }

    #[test]
    fn settings_that_would_not_protect_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "x").unwrap();
        let cases = [
            (KafkaSecurity::default().ca_file(&ca), "no TLS"),
            (
                KafkaSecurity {
                    cert_file: Some(ca.clone()),
                    ..KafkaSecurity::tls()
                },
                "needs its key",
            ),
            (
                KafkaSecurity {
                    protocol: SecurityProtocol::SaslSsl,
                    ..KafkaSecurity::default()
                },
                "needs a SASL user",
            ),
            (
                KafkaSecurity::tls().ca_file(dir.path().join("missing.pem")),
                "cannot read the CA file",
            ),
        ];
        for (s, needle) in cases {
            let e = s.validate().unwrap_err();
            assert!(e.message().contains(needle), "{s:?}: {e}");
        }
        let mut sasl = KafkaSecurity::tls().sasl(
            SaslMechanism::Plain,
            "u",
            SaslPassword::from_text("pw-secret"),
        );
        assert_eq!(sasl.protocol, SecurityProtocol::SaslSsl);
        sasl.validate().unwrap();
        sasl.protocol = SecurityProtocol::Ssl;
        let e = sasl.validate().unwrap_err();
        assert!(
            e.message().contains("no SASL") && !e.message().contains("pw-secret"),
            "{e}"
        );
    }

    #[test]
    fn a_password_file_gives_its_first_line_and_never_shows_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "hunter2-secret\nignored\n").unwrap();
        let p = SaslPassword::from_file(&f).unwrap();
        assert_eq!(p.expose(), "hunter2-secret");
        assert!(!format!("{p:?} {p}").contains("hunter2"));
        std::fs::write(&f, "\n").unwrap();
        assert!(
            SaslPassword::from_file(&f)
                .unwrap_err()
                .message()
                .contains("empty")
        );
        let e = SaslPassword::from_env("POSTROOM_TEST_SURELY_UNSET_VAR").unwrap_err();
        assert!(
            e.message().contains("POSTROOM_TEST_SURELY_UNSET_VAR"),
            "{e}"
        );
    }
}
