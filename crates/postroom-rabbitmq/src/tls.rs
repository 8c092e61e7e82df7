//! TLS to RabbitMQ: `amqps://` URLs and the CA a broker's certificate is verified against.
//!
//! An `amqps://` connection is encrypted with rustls (no OpenSSL in the build) and the broker's
//! certificate is always verified: its chain against the system's root certificates plus the
//! CA certificates (PEM) in the file named by the URL's `cacertfile` query parameter (the
//! name RabbitMQ's own URI format uses), and its names against the URL's host:
//!
//! ```text
//! amqps://app:secret@mq.internal:5671/%2f?cacertfile=/etc/postroom/mq-ca.pem
//! ```
//!
//! The management API client ([`ManagementApi`](crate::ManagementApi)) reads the same
//! parameter from its URL (`https://app:secret@mq.internal:15671?cacertfile=…`), or takes the
//! file with [`ManagementApi::with_ca_file`](crate::ManagementApi::with_ca_file).
//!
//! A `cacertfile` on a plaintext `amqp://` URL is refused: it would suggest a protection the
//! link does not have. Client certificates are not supported here.

use crate::error::amqp;
use lapin::tcp::OwnedTLSConfig;
use lapin::uri::AMQPUri;
use lapin::{Connection, ConnectionProperties};
use postroom_core::{Error, ErrorKind, Result};
use reqwest::Url;
use std::path::{Path, PathBuf};

/// The query parameter naming the CA file (PEM) that broker certificates are verified against.
pub const CA_FILE_PARAM: &str = "cacertfile";

/// A URL with the CA file parameter taken out: what the client library reads, and the file.
#[derive(Clone, PartialEq, Eq)]
pub struct WithCaFile {
    /// The URL without `cacertfile`.
    pub url: Url,
    /// The CA file, when one was named.
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for WithCaFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithCaFile")
            .field("url", &crate::connection::redact(self.url.as_str()))
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// Split the `cacertfile` parameter off `url` (any scheme). The error never repeats the URL.
pub fn split_ca_file(url: &str) -> Result<WithCaFile> {
    let mut parsed =
        Url::parse(url).map_err(|e| Error::new(ErrorKind::Config, format!("not a URL: {e}")))?;
    let mut ca_file = None;
    let mut rest = Vec::new();
    for (k, v) in parsed.query_pairs() {
        if k == CA_FILE_PARAM {
            ca_file = Some(PathBuf::from(v.into_owned()));
        } else {
            rest.push((k.into_owned(), v.into_owned()));
        }
    }
    if ca_file.is_some() {
        if rest.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(rest);
        }
    }
    Ok(WithCaFile {
        url: parsed,
        ca_file,
    })
}

/// The CA file named by `url`'s `cacertfile` parameter, if any (to carry it from a broker URL
/// to the management API's).
pub fn ca_file_of(url: &str) -> Result<Option<PathBuf>> {
    Ok(split_ca_file(url)?.ca_file)
}

/// Read a PEM file of CA certificates; refuse a file without any.
pub fn read_ca_file(path: &Path) -> Result<String> {
    let pem = std::fs::read_to_string(path).map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("cannot read the CA file {}: {e}", path.display()),
        )
    })?;
    if !pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "the CA file {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                path.display()
            ),
        ));
    }
    Ok(pem)
}

/// What lapin needs to connect to `uri`: the parsed URI (its host taken from the URL as
/// written, IP addresses included) and the TLS settings.
pub fn amqp_target(uri: &str) -> Result<(AMQPUri, OwnedTLSConfig)> {
    let split = split_ca_file(uri)?;
    let tls = split.url.scheme() == "amqps";
    let cert_chain = match &split.ca_file {
        Some(path) if !tls => {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "{CA_FILE_PARAM}={} is given for a plaintext amqp:// URL: use amqps://",
                    path.display()
                ),
            ));
        }
        Some(path) => Some(read_ca_file(path)?),
        None => None,
    };
    let mut target: AMQPUri = split.url.as_str().parse().map_err(|e: String| {
        Error::new(
            ErrorKind::Config,
            format!(
                "not an AMQP URL: {}",
                e.replace(split.url.as_str(), "<url>")
            ),
        )
    })?;
    // The URI parser keeps only what the URL library calls a domain and falls back to
    // `localhost` for an IPv6 literal (`amqps://[::1]/`); the connection, and the name the
    // certificate is checked against, must be the host the URL names.
    if let Some(host) = split.url.host_str() {
        target.authority.host = host.trim_start_matches('[').trim_end_matches(']').into();
    }
    Ok((
        target,
        OwnedTLSConfig {
            identity: None,
            cert_chain,
        },
    ))
}

/// Whether a rustls error (a certificate that does not verify, a failed handshake) is in
/// `err`'s chain, also inside I/O errors, which carry it without listing it as a source.
pub(crate) fn is_tls_failure(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.is::<rustls::Error>() {
            return true;
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            && is_tls_failure(inner)
        {
            return true;
        }
        cur = e.source();
    }
    false
}

fn tls_failure(err: &lapin::Error) -> bool {
    match err {
        lapin::Error::IOError(io) => is_tls_failure(io.as_ref()),
        _ => false,
    }
}

/// Connect to `uri` (`amqp://` or `amqps://`, with `cacertfile` for TLS). Errors name the
/// broker without its password; a certificate that does not verify is a configuration error.
pub async fn connect(uri: &str, props: ConnectionProperties) -> Result<Connection> {
    let (target, tls) = amqp_target(uri)?;
    let at = format!("{}:{}", target.authority.host, target.authority.port);
    let with_ca = tls.cert_chain.is_some();
    Connection::connect_uri_with_config(target, props, tls)
        .await
        .map_err(|e| {
            if tls_failure(&e) {
                let roots = if with_ca {
                    "the CA in cacertfile or one among the system's roots"
                } else {
                    "a CA among the system's roots (name a CA file with ?cacertfile=/path/ca.pem)"
                };
                Error::new(
                    ErrorKind::Config,
                    format!(
                        "TLS with RabbitMQ at {at} failed: the broker's certificate must be signed \
                         by {roots} and name the host of the URL"
                    ),
                )
                .with_source(e)
            } else {
                amqp(
                    format!("connecting to {}", crate::connection::redact(uri)),
                    e,
                )
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_file_is_split_off_and_the_rest_of_the_query_kept() {
        let s =
            split_ca_file("amqps://u:p@mq:5671/%2f?heartbeat=5&cacertfile=/etc/ca.pem").unwrap();
        assert_eq!(s.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(s.url.as_str(), "amqps://u:p@mq:5671/%2f?heartbeat=5");
        let s = split_ca_file("amqps://mq/%2f?cacertfile=%2Ftmp%2Fa%20b.pem").unwrap();
        assert_eq!(s.ca_file.as_deref(), Some(Path::new("/tmp/a b.pem")));
        assert_eq!(s.url.query(), None);
        assert_eq!(split_ca_file("amqp://mq/%2f").unwrap().ca_file, None);
    }

    #[test]
    fn an_ip_host_is_kept_and_a_ca_on_plaintext_is_refused() {
        let (t, tls) = amqp_target("amqp://guest:guest@127.0.0.1:5672/%2f").unwrap();
        assert_eq!(t.authority.host, "127.0.0.1");
        assert_eq!(t.authority.port, 5672);
        assert!(tls.cert_chain.is_none());
        let (t, _) = amqp_target("amqps://[::1]/%2f").unwrap();
        assert_eq!(t.authority.host, "::1");
        assert_eq!(t.authority.port, 5671);
        let err = amqp_target("amqp://u:s3cr3t@mq/%2f?cacertfile=/x.pem").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.to_string().contains("amqps://"), "{err}");
        let err = amqp_target("amqps://u:s3cr3t@mq/%2f?cacertfile=/no/such/ca.pem").unwrap_err();
        assert!(err.to_string().contains("/no/such/ca.pem"), "{err}");
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }
}
