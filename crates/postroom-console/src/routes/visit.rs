//! What the console knows of the request's visitor beyond its cookies: the client address
//! (the peer, or the address a proxy in front names in a configured header), and whether the
//! visit came over TLS (a TLS-terminating proxy says so in `X-Forwarded-Proto` or
//! `Forwarded`), which makes its cookies Secure.

use axum::extract::ConnectInfo;
use axum::extract::Request;
use axum::http::HeaderMap;
use std::net::{IpAddr, SocketAddr};

/// The visitor of one request, as handlers see it.
#[derive(Clone, Debug)]
pub(crate) struct Visit {
    /// The client's address, when known.
    pub client: Option<IpAddr>,
    /// Whether cookies set for it are marked Secure.
    pub secure: bool,
}

impl Visit {
    /// The key failures of this client are counted under: its address, an IPv6 client by
    /// its /64 (one host's usual share).
    pub fn client_key(&self) -> Option<String> {
        self.client.map(|ip| match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        })
    }
}

/// The visit of `req`: the client by `client_header` (the last address in it, the one the
/// nearest proxy added) when configured and present, else the peer address; Secure cookies
/// when `secure_cookies` or the request came over TLS through a proxy.
pub(crate) fn visit_of(req: &Request, client_header: Option<&str>, secure_cookies: bool) -> Visit {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let named = client_header.and_then(|name| {
        req.headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .next_back()
            .and_then(|a| address(a.trim()))
    });
    Visit {
        client: named.or(peer).map(|ip| ip.to_canonical()),
        secure: secure_cookies || over_tls(req.headers()),
    }
}

/// An address as a proxy writes it: `203.0.113.7`, `203.0.113.7:4711`, `[2001:db8::1]:4711`.
fn address(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// Whether a proxy in front says the visitor came over TLS.
pub(crate) fn over_tls(headers: &HeaderMap) -> bool {
    let first = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(|v| v.trim().to_ascii_lowercase())
    };
    first("x-forwarded-proto").as_deref() == Some("https")
        || first("forwarded").is_some_and(|f| {
            f.split(';')
                .any(|pair| pair.trim().trim_matches('"') == "proto=https")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn request(headers: &[(&str, &str)]) -> Request {
        let mut b = axum::http::Request::builder().uri("/");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let mut r = b.body(Body::empty()).unwrap();
        r.extensions_mut()
            .insert(ConnectInfo("10.0.0.9:5000".parse::<SocketAddr>().unwrap()));
        r
    }

    #[test]
    fn the_client_is_the_peer_unless_a_configured_header_names_it() {
        let r = request(&[("x-forwarded-for", "203.0.113.7, 198.51.100.2")]);
        assert_eq!(
            visit_of(&r, None, false).client_key().as_deref(),
            Some("10.0.0.9")
        );
        assert_eq!(
            visit_of(&r, Some("x-forwarded-for"), false)
                .client_key()
                .as_deref(),
            Some("198.51.100.2")
        );
        let v6 = request(&[("x-real-ip", "[2001:db8:1:2:3::9]:80")]);
        assert_eq!(
            visit_of(&v6, Some("x-real-ip"), false)
                .client_key()
                .as_deref(),
            Some("2001:db8:1:2::/64")
        );
        let garbage = request(&[("x-real-ip", "not an address")]);
        assert_eq!(
            visit_of(&garbage, Some("x-real-ip"), false)
                .client_key()
                .as_deref(),
            Some("10.0.0.9")
        );
    }

    #[test]
    fn cookies_are_secure_over_tls() {
        assert!(!visit_of(&request(&[]), None, false).secure);
        assert!(visit_of(&request(&[]), None, true).secure);
        assert!(visit_of(&request(&[("x-forwarded-proto", "HTTPS")]), None, false).secure);
        assert!(
            visit_of(
                &request(&[("forwarded", "for=1.2.3.4;proto=https")]),
                None,
                false
            )
            .secure
        );
        assert!(!visit_of(&request(&[("x-forwarded-proto", "http")]), None, false).secure);
    }
}
