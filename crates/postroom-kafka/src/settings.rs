//! A workload's Kafka settings from a broker URL and a topology file's `[kafka]` table.
//!
//! ```text
//! kafka://host:9092?brokers=h2:9092,h3:9092&partitions=6&replication=3
//! kafka+ssl://host:9093?cacertfile=/etc/postroom/kafka-ca.pem
//! kafka+ssl://app@host:9093?sasl_mechanism=SCRAM-SHA-512          (password from the environment or a file)
//! kafka://host:9093?security_protocol=ssl&certfile=/c.pem&keyfile=/k.pem
//! ```
//!
//! | URL parameter / `[kafka]` key | what |
//! |---|---|
//! | `brokers` (URL only) | more bootstrap brokers, `host:port,…` |
//! | `partitions`, `replication` | how created topics are made (defaults 3 and 1) |
//! | `topics` (URL only) | `create` (default: through the admin API) or `existing` (provisioned by an operator: checked, never created) |
//! | `security_protocol` | `plaintext`, `ssl`, `sasl_plaintext`, `sasl_ssl`; `kafka+ssl://` means TLS, a user in the URL means SASL |
//! | `sasl_mechanism` | `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` (required with a user) |
//! | `cacertfile` | CA certificates (PEM) the brokers' certificates must chain to; without it, the system's |
//! | `certfile`, `keyfile` | a client certificate and its key (PEM) |
//!
//! The SASL user is the URL's user; its password is the URL's password, which the command
//! line fills from `POSTROOM_BROKER_PASSWORD` or `--broker-password-file` (never write it on a
//! command line). A user without a password, or a password without a user, is an error: no
//! credential is ever dropped silently. No error repeats the URL.

use crate::config::{KafkaConfig, TopicProvisioning};
use crate::security::{
    KafkaSecurity, SaslCredentials, SaslMechanism, SaslPassword, SecurityProtocol,
};
use postroom_core::{Error, ErrorKind, Result};
use serde::Deserialize;
use std::path::PathBuf;

/// The `[kafka]` table of a topology file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    /// `security_protocol`.
    pub security_protocol: Option<String>,
    /// `sasl_mechanism`.
    pub sasl_mechanism: Option<String>,
    /// `cacertfile`.
    pub cacertfile: Option<PathBuf>,
    /// `certfile`.
    pub certfile: Option<PathBuf>,
    /// `keyfile`.
    pub keyfile: Option<PathBuf>,
    /// `partitions`.
    pub partitions: Option<i32>,
    /// `replication`.
    pub replication: Option<i32>,
}

/// The `[kafka]` table of topology file `text`, and the rest of the file (as TOML) for the
/// keys every transport reads.
pub fn split_file(text: &str) -> Result<(FileSettings, String)> {
    let bad = |m: String| Error::new(ErrorKind::Config, format!("topology file (Kafka): {m}"));
    let mut table: toml::Table = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
    let settings = match table.remove("kafka") {
        None => FileSettings::default(),
        Some(toml::Value::Table(t)) => FileSettings::deserialize(toml::Value::Table(t))
            .map_err(|e| bad(format!("[kafka]: {e}")))?,
        Some(_) => return Err(bad("`kafka` must be a table ([kafka])".into())),
    };
    let rest = toml::to_string(&table).map_err(|e| bad(e.to_string()))?;
    Ok((settings, rest))
}

/// One setting given by the URL, the file, or both (then they must agree).
fn one<T: PartialEq + std::fmt::Debug>(
    name: &str,
    url: Option<T>,
    file: Option<T>,
) -> Result<Option<T>> {
    match (url, file) {
        (Some(u), Some(f)) if u != f => Err(Error::new(
            ErrorKind::Config,
            format!(
                "{name} is {u:?} in the broker URL and {f:?} in the topology file: give it once"
            ),
        )),
        (Some(u), _) => Ok(Some(u)),
        (None, f) => Ok(f),
    }
}

/// A whole number of at least 1.
fn count(key: &str, value: &str) -> Result<i32> {
    value
        .parse::<i32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Config,
                format!(
                    "{key} must be a whole number from 1 to {}, not {value:?}",
                    i32::MAX
                ),
            )
        })
}

/// The settings of broker URL `url` (`kafka://` or `kafka+ssl://`) with the topology file's
/// `file`: brokers, topic settings and security. Prefix and ladder are the caller's.
pub fn from_url(url: &str, file: &FileSettings) -> Result<KafkaConfig> {
    let bad = |m: String| Error::new(ErrorKind::Config, m);
    // The parser's own errors name no part of the URL.
    let parsed = url::Url::parse(url).map_err(|e| bad(format!("not a URL: {e}")))?;
    let tls_scheme = match parsed.scheme() {
        "kafka" => false,
        "kafka+ssl" => true,
        other => {
            return Err(bad(format!(
                "scheme {other:?} is not kafka:// or kafka+ssl://"
            )));
        }
    };
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("no host".into()))?;
    if !matches!(parsed.path(), "" | "/") {
        return Err(bad(
            "a Kafka URL has no path (topic names come from the workload)".into(),
        ));
    }
    let mut brokers = vec![format!("{host}:{}", parsed.port().unwrap_or(9092))];
    let mut config = KafkaConfig::new(String::new());
    let (mut partitions, mut replication, mut protocol, mut mechanism) = (None, None, None, None);
    let (mut ca, mut cert, mut key) = (None, None, None);
    for (k, value) in parsed.query_pairs() {
        match k.as_ref() {
            "brokers" => brokers.extend(
                value
                    .split(',')
                    .filter(|b| !b.is_empty())
                    .map(str::to_string),
            ),
            "partitions" => partitions = Some(count("partitions", &value)?),
            "replication" => replication = Some(count("replication", &value)?),
            "security_protocol" => protocol = Some(value.parse::<SecurityProtocol>()?),
            "sasl_mechanism" => mechanism = Some(value.parse::<SaslMechanism>()?),
            "cacertfile" => ca = Some(PathBuf::from(value.as_ref())),
            "certfile" => cert = Some(PathBuf::from(value.as_ref())),
            "keyfile" => key = Some(PathBuf::from(value.as_ref())),
            "topics" => {
                config.topics = match value.as_ref() {
                    "create" => TopicProvisioning::Create,
                    "existing" => TopicProvisioning::Existing,
                    other => {
                        return Err(bad(format!(
                            "topics must be create or existing, not {other:?}"
                        )));
                    }
                }
            }
            other => {
                return Err(bad(format!(
                    "unknown setting {other:?} (known: brokers, partitions, replication, topics, security_protocol, sasl_mechanism, cacertfile, certfile, keyfile)"
                )));
            }
        }
    }
    config.brokers = brokers.join(",");
    let file_count = |key: &str, n: Option<i32>| n.map(|n| count(key, &n.to_string())).transpose();
    if let Some(n) = one(
        "partitions",
        partitions,
        file_count("partitions", file.partitions)?,
    )? {
        config.partitions = n;
    }
    if let Some(n) = one(
        "replication",
        replication,
        file_count("replication", file.replication)?,
    )? {
        config.replication = n;
    }
    let file_protocol = file
        .security_protocol
        .as_deref()
        .map(str::parse::<SecurityProtocol>)
        .transpose()?;
    let file_mechanism = file
        .sasl_mechanism
        .as_deref()
        .map(str::parse::<SaslMechanism>)
        .transpose()?;
    let protocol = one("security_protocol", protocol, file_protocol)?;
    let mechanism = one("sasl_mechanism", mechanism, file_mechanism)?;
    let user = percent_decoded(parsed.username());
    let password = parsed.password().map(percent_decoded);
    let sasl = match (user.is_empty(), password) {
        (true, None) => None,
        (true, Some(_)) => {
            return Err(bad(
                "the URL has a password but no user: a SASL user goes before it (kafka://user@host)"
                    .into(),
            ));
        }
        (false, None) => {
            return Err(bad(format!(
                "SASL user {user:?} has no password: set POSTROOM_BROKER_PASSWORD or name a file with --broker-password-file (POSTROOM_BROKER_PASSWORD_FILE)"
            )));
        }
        (false, Some(p)) => {
            let mechanism = mechanism.ok_or_else(|| {
                bad(format!(
                    "SASL user {user:?} given without a mechanism: add sasl_mechanism=PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (the one the cluster uses)"
                ))
            })?;
            Some(SaslCredentials {
                mechanism,
                username: user,
                password: SaslPassword::from_text(p),
            })
        }
    };
    if sasl.is_none() && mechanism.is_some() {
        return Err(bad(
            "sasl_mechanism given without a SASL user (kafka://user@host)".into(),
        ));
    }
    let protocol = match protocol {
        Some(p) if tls_scheme && !p.tls() => {
            return Err(bad(format!(
                "kafka+ssl:// means TLS, but security_protocol is {}",
                p.as_str()
            )));
        }
        Some(p) => p,
        None => match (tls_scheme, sasl.is_some()) {
            (false, false) => SecurityProtocol::Plaintext,
            (true, false) => SecurityProtocol::Ssl,
            (false, true) => SecurityProtocol::SaslPlaintext,
            (true, true) => SecurityProtocol::SaslSsl,
        },
    };
    config.security = KafkaSecurity {
        protocol,
        ca_file: one("cacertfile", ca, file.cacertfile.clone())?,
        cert_file: one("certfile", cert, file.certfile.clone())?,
        key_file: one("keyfile", key, file.keyfile.clone())?,
        sasl,
    };
    config.validate()?;
    Ok(config)
}

fn percent_decoded(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(url: &str) -> Result<KafkaConfig> {
        from_url(url, &FileSettings::default())
    }

    #[test]
    fn the_url_gives_brokers_and_topic_settings() {
        let c = of("kafka://k1:9093?brokers=k2:9092,k3:9092&partitions=4").unwrap();
        assert_eq!(c.brokers, "k1:9093,k2:9092,k3:9092");
        assert_eq!((c.partitions, c.replication), (4, 1));
        assert_eq!(c.security.protocol, SecurityProtocol::Plaintext);
        assert_eq!(of("kafka://127.0.0.1").unwrap().brokers, "127.0.0.1:9092");
    }

    #[test]
    fn the_scheme_and_a_user_choose_the_protocol() {
        let tls = of("kafka+ssl://k:9093").unwrap();
        assert_eq!(tls.security.protocol, SecurityProtocol::Ssl);
        let sasl = of("kafka+ssl://app:p%23w%40rd@k:9093?sasl_mechanism=scram-sha-512").unwrap();
        assert_eq!(sasl.security.protocol, SecurityProtocol::SaslSsl);
        let creds = sasl.security.sasl.as_ref().unwrap();
        assert_eq!(
            (creds.username.as_str(), creds.password.expose()),
            ("app", "p#w@rd")
        );
        assert_eq!(creds.mechanism, SaslMechanism::ScramSha512);
        let plain = of("kafka://app:pw@k?sasl_mechanism=PLAIN").unwrap();
        assert_eq!(plain.security.protocol, SecurityProtocol::SaslPlaintext);
        let explicit = of("kafka://k?security_protocol=ssl").unwrap();
        assert_eq!(explicit.security.protocol, SecurityProtocol::Ssl);
    }

    #[test]
    fn credentials_are_never_dropped_and_never_echoed() {
        for (url, needle) in [
            ("kafka://app@k:9092", "has no password"),
            ("kafka://:S3CRET-pw@k:9092", "no user"),
            ("kafka://app:S3CRET-pw@k:9092", "without a mechanism"),
            (
                "kafka://app:S3CRET-pw@k?sasl_mechanism=PLAIN&security_protocol=ssl",
                "no SASL",
            ),
            ("kafka://k?sasl_mechanism=PLAIN", "without a SASL user"),
            (
                "kafka://app:S3CRET-pw@k?sasl_mechanism=GSSAPI",
                "not built in",
            ),
            ("kafka://app:S3CRET#pw@k:9092", "not a URL"),
        ] {
            let e = of(url).unwrap_err();
            assert!(e.message().contains(needle), "{url}: {e}");
            assert!(!e.to_string().contains("S3CRET"), "{url}: {e}");
        }
    }

    #[test]
    fn bad_settings_are_clear_errors() {
        for (url, needle) in [
            ("kafka://k?partitions=0", "partitions must be"),
            ("kafka://k?partitions=x", "partitions must be"),
            ("kafka://k?linger=5", "unknown setting"),
            ("kafka://k?partitions=2147483648", "from 1 to 2147483647"),
            ("kafka://k/topic", "no path"),
            ("kafka+ssl://k?security_protocol=plaintext", "means TLS"),
            ("kafka://k?cacertfile=/ca.pem", "no TLS"),
            ("kafka://k?security_protocol=tls", "not one of"),
            (
                "kafka+ssl://k?cacertfile=/surely/missing.pem",
                "cannot read the CA file",
            ),
            ("amqp://k", "not kafka://"),
        ] {
            let e = of(url).unwrap_err();
            assert!(e.message().contains(needle), "{url}: {e}");
        }
    }

    #[test]
    fn a_topology_file_gives_security_and_topic_settings_once() {
        let (file, rest) =
            split_file("prefix = \"shop\"\n[kafka]\nsecurity_protocol = \"ssl\"\npartitions = 6\n")
                .unwrap();
        assert_eq!(rest.trim(), "prefix = \"shop\"");
        let c = from_url("kafka://k", &file).unwrap();
        assert_eq!(c.security.protocol, SecurityProtocol::Ssl);
        assert_eq!(c.partitions, 6);
        let e = from_url("kafka://k?partitions=4", &file).unwrap_err();
        assert!(e.message().contains("give it once"), "{e}");
        let e = split_file("[kafka]\nsecurity = \"ssl\"\n").unwrap_err();
        assert!(e.message().contains("unknown field `security`"), "{e}");
        let e = from_url(
            "kafka://k",
            &FileSettings {
                partitions: Some(0),
                ..FileSettings::default()
            },
        )
        .unwrap_err();
        assert!(e.message().contains("partitions must be"), "{e}");
    }
}
