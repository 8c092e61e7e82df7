//! What a failed first connection means, said so that the operator knows which setting to
//! change: a certificate that is not trusted or has expired, a server that does not offer
//! TLS or requires it, a client certificate the server refused, credentials it refused.
//! When TLS was asked for and the handshake failed without saying why, the server's INFO
//! line is read once more over plain TCP to tell whether it offers TLS at all.

use super::{NatsAuth, NatsTarget};
use async_nats::rustls::{self, AlertDescription, CertificateError};
use async_nats::{ConnectError, ConnectErrorKind};
use postroom_core::{Error, ErrorKind};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// The error for `e`, met connecting to `target`.
pub async fn explain(e: ConnectError, target: &NatsTarget) -> Error {
    let at = format!("connecting to NATS at {}", target.shown());
    let security = &target.security;
    let config = |m: String| Error::new(ErrorKind::Config, format!("{at}: {m} ({e})"));
    match e.kind() {
        ConnectErrorKind::AuthorizationViolation => {
            return config(match &security.auth {
                NatsAuth::None => "the server requires authentication and none was given (a user and password, token_file, nkey_file or creds_file)".into(),
                auth => format!("the server refused the credentials: {}", auth.describe()),
            });
        }
        ConnectErrorKind::Authentication => {
            return config(format!(
                "signing the server's challenge failed with {}",
                security.auth.describe()
            ));
        }
        ConnectErrorKind::Tls => {
            return config(
                "the TLS settings could not be used (cacertfile, certfile, keyfile)".into(),
            );
        }
        _ => {}
    }
    let ca = match &security.ca_file {
        Some(p) => format!("the CA file {}", p.display()),
        None => "the system's CA certificates (no cacertfile given)".into(),
    };
    let asked_none = if security.tls {
        String::new()
    } else {
        "the server requires TLS, which the URL did not ask for (use tls:// with cacertfile=… for the server's CA); ".into()
    };
    if let Some(tls) = rustls_error(&e) {
        let what = match tls {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "the server's certificate has expired".to_string()
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    "the server's certificate is not valid yet".to_string()
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => {
                    "the server's certificate does not name the host of the URL".to_string()
                }
                CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                    "the server's certificate is not trusted: it is not signed by a CA in {ca}"
                ),
                other => format!("the server's certificate was refused: {other:?}"),
            },
            rustls::Error::AlertReceived(
                AlertDescription::CertificateRequired
                | AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::UnsupportedCertificate
                | AlertDescription::CertificateExpired
                | AlertDescription::AccessDenied,
            ) => match &security.cert_file {
                None => "the server requires a client certificate (mutual TLS) and none was given: set certfile and keyfile".to_string(),
                Some(p) => format!(
                    "the server refused the client certificate {} (it must be signed by a CA the server trusts, and valid)",
                    p.display()
                ),
            },
            other if security.tls && server_offers_tls(target).await == Some(false) => {
                format!("the server does not offer TLS, and the URL requires it ({other})")
            }
            other => format!("the TLS handshake failed: {other}"),
        };
        return config(format!("{asked_none}{what}"));
    }
    if security.tls && server_offers_tls(target).await == Some(false) {
        return config("the server does not offer TLS, and the URL requires it (tls:// or tls=required); connect with nats:// only on a network you trust".into());
    }
    let kind = match e.kind() {
        ConnectErrorKind::TimedOut => ErrorKind::Timeout,
        ConnectErrorKind::ServerParse | ConnectErrorKind::Dns => ErrorKind::Config,
        _ => ErrorKind::Connection,
    };
    Error::new(kind, format!("{at}: {e}"))
}

/// The rustls error inside `e`, where the handshake's I/O error carries one.
fn rustls_error(e: &ConnectError) -> Option<&rustls::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(t) = inner.downcast_ref::<rustls::Error>()
        {
            return Some(t);
        }
        cur = err.source();
    }
    None
}

/// Whether the first server of `target` offers TLS, by its INFO line (`tls_required`,
/// `tls_available`); `None` when it cannot be read.
async fn server_offers_tls(target: &NatsTarget) -> Option<bool> {
    let first = target.servers.first()?;
    let addr = first.split_once("://").map_or(first.as_str(), |(_, a)| a);
    let read = async {
        let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let mut line = String::new();
        tokio::io::BufReader::new(stream)
            .read_line(&mut line)
            .await
            .ok()?;
        let info: serde_json::Value = serde_json::from_str(line.strip_prefix("INFO ")?).ok()?;
        let flag = |k: &str| info.get(k).and_then(serde_json::Value::as_bool) == Some(true);
        Some(flag("tls_required") || flag("tls_available"))
    };
    tokio::time::timeout(Duration::from_secs(2), read)
        .await
        .ok()
        .flatten()
}
