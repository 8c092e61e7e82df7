//! TLS to PostgreSQL: which `sslmode` a URL gets, and what a failed handshake says.
//!
//! The connection is encrypted with rustls (no OpenSSL in the build). postroom verifies the
//! server's certificate whenever TLS is asked for:
//!
//! | the URL says | postroom connects with |
//! |---|---|
//! | `sslmode=verify-full` or `sslmode=require` | TLS or nothing; the certificate chain and the host name are verified (`require` is verified too: an unverified TLS link protects against nobody who can tamper with it) |
//! | `sslmode=verify-ca` | TLS or nothing; the chain is verified, the host name is not |
//! | `sslmode=prefer` / `allow` / `disable` | as written (libpq's meaning: `prefer` tries TLS without verifying it, then plaintext; use only on a network you trust) |
//! | no `sslmode` (and no `PGSSLMODE`), host on loopback or a Unix socket | `prefer`: the traffic never leaves the machine |
//! | no `sslmode` (and no `PGSSLMODE`), any other host | `verify-full` |
//!
//! The trusted roots are the system's certificate store plus the CA certificates in the PEM
//! file named by `sslrootcert=/path/ca.pem` in the URL (or the `PGSSLROOTCERT` environment
//! variable), e.g. `postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/etc/postroom/db-ca.pem`.
//! A client certificate is given with `sslcert=` and `sslkey=` (or `PGSSLCERT`, `PGSSLKEY`).
//! `verify-ca` currently checks the host name as well (the driver does not yet recognise the
//! name-mismatch error of recent rustls versions): it fails closed, like `verify-full`.
//! To connect in plaintext to a server that does not offer TLS on another host, say so:
//! `sslmode=disable`.

use postroom_core::{Error, ErrorKind, Result};
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use std::net::IpAddr;

/// The `sslmode` given in the URL's query (the last one wins, as sqlx reads it).
fn sslmode_in_url(url: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or(query);
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| *k == "sslmode" || *k == "ssl-mode")
        .map(|(_, v)| v.to_string())
        .next_back()
}

/// The URL settings the driver reads; it drops any other with a warning, and a misspelt one
/// (`sslmod=require`) would leave the link without what it asks for.
const URL_SETTINGS: [&str; 17] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
];

/// Refuse a URL setting the driver does not read, by name (never the URL: it may hold a
/// password).
fn check_url_settings(url: &str) -> Result<()> {
    let Some((_, query)) = url.split_once('?') else {
        return Ok(());
    };
    let query = query.split('#').next().unwrap_or(query);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let key = pair.split_once('=').map_or(pair, |(k, _)| k);
        if key != "options" && !URL_SETTINGS.contains(&key) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "not a PostgreSQL URL setting: {key:?} (known: {}, options)",
                    URL_SETTINGS.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Whether `host` never leaves the machine: a loopback address, `localhost`, or a socket path.
#[must_use]
pub fn is_local_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.starts_with('/')
        || bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The mode postroom connects with, given the mode the URL or `PGSSLMODE` states (if any)
/// and whether the server is on this machine. See the module documentation.
#[must_use]
pub fn effective_mode(stated: Option<PgSslMode>, local: bool) -> PgSslMode {
    match stated {
        Some(PgSslMode::Require) => PgSslMode::VerifyFull,
        Some(mode) => mode,
        None if local => PgSslMode::Prefer,
        None => PgSslMode::VerifyFull,
    }
}

fn parse_mode(text: &str, origin: &str) -> Result<PgSslMode> {
    text.parse::<PgSslMode>().map_err(|_| {
        Error::new(
            ErrorKind::Config,
            format!(
                "{origin} sslmode {text:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"
            ),
        )
    })
}

/// Connect options for `url` with postroom's TLS policy applied. The error for an unreadable
/// URL never repeats the URL (it may hold a password).
pub fn connect_options(url: &str) -> Result<PgConnectOptions> {
    check_url_settings(url)?;
    let options = url.parse::<PgConnectOptions>().map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!(
                "not a PostgreSQL URL: {}",
                crate::error::describe_url_error(&e)
            ),
        )
    })?;
    let stated = match sslmode_in_url(url) {
        Some(text) => Some(parse_mode(&text, "the URL's")?),
        None => match std::env::var("PGSSLMODE") {
            Ok(text) => Some(parse_mode(&text, "PGSSLMODE's")?),
            Err(_) => None,
        },
    };
    let local = options.get_socket().is_some() || is_local_host(options.get_host());
    let mode = effective_mode(stated, local);
    Ok(options.ssl_mode(mode))
}

fn mode_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

/// What went wrong in TLS, when `err` is a TLS failure: the driver's own TLS errors (no TLS
/// offered, an unreadable CA file) and the handshake's (a certificate that does not verify,
/// which arrives as an I/O error carrying the rustls error).
pub(crate) fn tls_failure(err: &sqlx::Error) -> Option<String> {
    match err {
        sqlx::Error::Tls(inner) => Some(inner.to_string()),
        sqlx::Error::Io(io) => io
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>())
            .map(ToString::to_string),
        _ => None,
    }
}

/// Describe a failed first connection: a TLS failure (no TLS offered, a certificate that does
/// not verify) is a configuration error that names the server and the mode, never the URL.
#[must_use]
pub fn connect_error(err: sqlx::Error, options: &PgConnectOptions) -> Error {
    let Some(inner) = tls_failure(&err) else {
        return crate::error::map(err);
    };
    let mode = options.get_ssl_mode();
    let hint = if inner.contains("does not support TLS") {
        "the server does not offer TLS and this connection requires it (sslmode=disable \
         connects in plaintext, on a network you trust)"
            .to_string()
    } else {
        "the server's certificate must be signed by a CA in sslrootcert (or PGSSLROOTCERT, or \
         the system's roots) and, with verify-full, name the host of the URL"
            .to_string()
    };
    Error::new(
        ErrorKind::Config,
        format!(
            "TLS with PostgreSQL at {}:{} (sslmode={}) failed ({hint})",
            options.get_host(),
            options.get_port(),
            mode_name(mode)
        ),
    )
    .with_source(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_is_verified_and_an_unstated_mode_depends_on_the_host() {
        // (stated mode, local host, the mode used)
        let cases = [
            (Some(PgSslMode::Require), false, PgSslMode::VerifyFull),
            (Some(PgSslMode::Require), true, PgSslMode::VerifyFull),
            (Some(PgSslMode::VerifyCa), false, PgSslMode::VerifyCa),
            (Some(PgSslMode::Disable), false, PgSslMode::Disable),
            (None, true, PgSslMode::Prefer),
            (None, false, PgSslMode::VerifyFull),
        ];
        for (stated, local, used) in cases {
            assert_eq!(
                mode_name(effective_mode(stated, local)),
                mode_name(used),
                "stated {stated:?}, local host {local}"
            );
        }
    }

    #[test]
    fn a_url_setting_the_driver_would_drop_is_refused_by_name() {
        // A misspelt `sslmode` would leave the link without the TLS it asks for.
        let e = connect_options("postgres://u:secret@db.internal/app?sslmod=require").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.message().contains("\"sslmod\""), "{e}");
        assert!(!e.message().contains("secret"), "{e}");
        connect_options(
            "postgres://u@h/app?sslmode=require&sslrootcert=/ca.pem&application_name=x&options=-c%20a%3Db",
        )
        .unwrap();
    }

    #[test]
    fn local_hosts() {
        for h in [
            "localhost",
            "127.0.0.1",
            "127.0.0.2",
            "::1",
            "[::1]",
            "/run/pg",
        ] {
            assert!(is_local_host(h), "{h}");
        }
        for h in ["db.internal", "10.0.0.5", "localhost.example.com"] {
            assert!(!is_local_host(h), "{h}");
        }
    }

    #[test]
    fn the_stated_mode_is_read_from_the_query() {
        assert_eq!(sslmode_in_url("postgres://h/db"), None);
        assert_eq!(
            sslmode_in_url("postgres://h/db?sslrootcert=/x&sslmode=require").as_deref(),
            Some("require")
        );
        assert_eq!(
            sslmode_in_url("postgres://h/db?ssl-mode=disable&sslmode=verify-ca").as_deref(),
            Some("verify-ca")
        );
        let remote = connect_options("postgres://u:pw@db.internal/x").unwrap();
        assert!(matches!(remote.get_ssl_mode(), PgSslMode::VerifyFull));
        let plain = connect_options("postgres://u:pw@db.internal/x?sslmode=disable").unwrap();
        assert!(matches!(plain.get_ssl_mode(), PgSslMode::Disable));
        let err = connect_options("postgres://u:s3cr3t@db/x?sslmode=sometimes").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }
}
