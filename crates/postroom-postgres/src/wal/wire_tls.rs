//! TLS on the replication connection: the server is asked for it with an SSLRequest, then
//! the handshake verifies its certificate chain against the system's roots plus the URL's
//! `sslrootcert`, and its name against the URL's host (as the store's own connections do,
//! `verify-ca` checks the name too: it fails closed). A client certificate is sent when the
//! URL names one (`sslcert`, `sslkey`).

use super::wire::{Target, WireError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

fn config_error(what: impl std::fmt::Display) -> WireError {
    WireError::Config(what.to_string())
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, WireError> {
    CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| config_error(format!("reading certificates from {}: {e}", path.display())))
}

fn client_config(target: &Target) -> Result<rustls::ClientConfig, WireError> {
    let (_, root_cert, client_cert, client_key) = target.tls_parts();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = root_cert {
        for cert in certificates(path)? {
            roots.add(cert).map_err(|e| {
                config_error(format!("a CA certificate in {}: {e}", path.display()))
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_root_certificates(roots);
    match (client_cert, client_key) {
        (Some(cert), Some(key)) => {
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| config_error(format!("reading the key {}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(certificates(cert)?, key)
                .map_err(config_error)
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(config_error("sslcert and sslkey go together")),
    }
}

/// Ask `tcp`'s server for TLS and complete a verified handshake.
pub(super) async fn upgrade(
    mut tcp: TcpStream,
    target: &Target,
) -> Result<TlsStream<TcpStream>, WireError> {
    let config = client_config(target)?;
    let mut request = bytes::BytesMut::new();
    postgres_protocol::message::frontend::ssl_request(&mut request);
    tcp.write_all(&request).await?;
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await?;
    if answer[0] != b'S' {
        return Err(config_error(format!(
            "TLS with PostgreSQL at {} failed: the server does not offer TLS and this connection requires it (sslmode=disable connects in plaintext, on a network you trust)",
            target.describe()
        )));
    }
    let (host, ..) = target.tls_parts();
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| config_error(format!("{host:?} is not a server name for TLS: {e}")))?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| {
            config_error(format!(
                "TLS with PostgreSQL at {} failed ({e}): the server's certificate must be signed by a CA in sslrootcert (or the system's roots) and name the host of the URL",
                target.describe()
            ))
        })
}
