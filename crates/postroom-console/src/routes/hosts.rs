//! Which host names the console answers to, and which origins may post to it: a defence
//! against DNS rebinding (a page on `attacker.example`, its name turned to resolve to
//! 127.0.0.1, reaching a console without auth as if it were its own origin).
//!
//! With auth off, and whenever names are configured, a request whose `Host` is not one of
//! the console's names is refused: loopback's (`localhost`, `127.0.0.1`, `[::1]`), the listen
//! address, and the names given (`--allowed-host`). Ports are not compared: a rebinding
//! page differs by its name. A state-changing request that carries an `Origin` must come from
//! the very origin it is sent to (its `Host`), or from a configured name (a proxy in front
//! that rewrites `Host`); `Origin: null` is refused.

use postroom_core::{Error, ErrorKind, Result};
use std::net::{IpAddr, SocketAddr};

/// The host names a console answers to.
#[derive(Clone, Debug)]
pub(crate) struct HostPolicy {
    /// Loopback's names, the listen address and the configured names, lowercase.
    own: Vec<String>,
    /// The configured names alone.
    configured: Vec<String>,
    /// Whether a request for another host is refused.
    enforce: bool,
}

/// A configured host name, as compared: lowercase, IPv6 addresses in brackets. Refuses a
/// name with a scheme, a port, a path or spaces.
pub fn host_name(name: &str) -> Result<String> {
    let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
    let refused = |why: &str| {
        Error::new(
            ErrorKind::Config,
            format!("allowed host {name:?}: {why} (give a name such as console.example.com)"),
        )
    };
    if name.is_empty() {
        return Err(refused("empty"));
    }
    if let Ok(IpAddr::V6(v6)) = name.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok(format!("[{v6}]"));
    }
    if name.len() > 253
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Err(refused("not a host name (no scheme, port or path)"));
    }
    Ok(name)
}

/// The host part of a `Host` header or an origin's authority (`name:port`, `[v6]:port`),
/// lowercase.
fn host_part(authority: &str) -> String {
    let a = authority.trim().to_ascii_lowercase();
    let host = if a.starts_with('[') {
        a.split_inclusive(']').next().unwrap_or("")
    } else {
        a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h)
    };
    host.trim_end_matches('.').to_string()
}

/// An authority with the default port of `scheme` left out, lowercase.
fn without_default_port(scheme: &str, authority: &str) -> String {
    let a = authority.to_ascii_lowercase();
    let default = match scheme {
        "https" => ":443",
        "http" => ":80",
        _ => return a,
    };
    a.strip_suffix(default).map_or(a.clone(), str::to_string)
}

impl HostPolicy {
    /// The names of a console listening on `listen`, with `configured` names (already
    /// checked by [`host_name`]); enforced when `auth_off` or names are configured.
    pub fn new(listen: SocketAddr, configured: &[String], auth_off: bool) -> Self {
        let listen_name = match listen.ip() {
            IpAddr::V6(v6) => format!("[{v6}]"),
            IpAddr::V4(v4) => v4.to_string(),
        };
        let mut own: Vec<String> = ["localhost", "127.0.0.1", "[::1]", listen_name.as_str()]
            .iter()
            .map(|s| s.to_string())
            .chain(configured.iter().cloned())
            .collect();
        own.dedup();
        Self {
            own,
            configured: configured.to_vec(),
            enforce: auth_off || !configured.is_empty(),
        }
    }

    /// Whether a request with this `Host` header is served.
    pub fn serves(&self, host: Option<&str>) -> bool {
        if !self.enforce {
            return true;
        }
        host.is_some_and(|h| self.own.contains(&host_part(h)))
    }

    /// Whether a state-changing request from `origin` (its `Origin` header, if any) to
    /// `host` (its `Host` header) is accepted.
    pub fn accepts_origin(&self, origin: Option<&str>, host: Option<&str>) -> bool {
        let Some(origin) = origin else {
            // Not sent by a browser (scripts, tools): the CSRF token or API token decides.
            return true;
        };
        let Some((scheme, authority)) = origin.trim().split_once("://") else {
            return false;
        };
        let scheme = scheme.to_ascii_lowercase();
        let same = host.is_some_and(|h| {
            without_default_port(&scheme, authority) == without_default_port(&scheme, h.trim())
        });
        same || self.configured.contains(&host_part(authority))
    }

    /// The names served, for the refusal's message.
    pub fn names(&self) -> String {
        self.own.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(auth_off: bool, configured: &[&str]) -> HostPolicy {
        let names: Vec<String> = configured.iter().map(|n| host_name(n).unwrap()).collect();
        HostPolicy::new("127.0.0.1:8080".parse().unwrap(), &names, auth_off)
    }

    #[test]
    fn with_auth_off_only_the_consoles_own_names_are_served() {
        let p = policy(true, &[]);
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST",
            "[::1]:8080",
        ] {
            assert!(p.serves(Some(ok)), "{ok}");
        }
        for refused in ["attacker.example:8080", "127.0.0.1.attacker.example", ""] {
            assert!(!p.serves(Some(refused)), "{refused}");
        }
        assert!(!p.serves(None));
        assert!(policy(false, &[]).serves(Some("attacker.example")));
        let named = policy(false, &["Console.Example.com."]);
        assert!(named.serves(Some("console.example.com")));
        assert!(!named.serves(Some("attacker.example")));
    }

    #[test]
    fn a_post_must_come_from_the_origin_it_is_sent_to() {
        let p = policy(true, &["console.example.com"]);
        let host = Some("127.0.0.1:8080");
        assert!(p.accepts_origin(None, host));
        assert!(p.accepts_origin(Some("http://127.0.0.1:8080"), host));
        assert!(p.accepts_origin(Some("http://localhost"), Some("localhost:80")));
        assert!(p.accepts_origin(Some("https://console.example.com"), host));
        for refused in [
            "http://attacker.example:8080",
            "http://127.0.0.1:9999",
            "null",
            "",
        ] {
            assert!(!p.accepts_origin(Some(refused), host), "{refused}");
        }
    }

    #[test]
    fn configured_names_are_host_names() {
        assert_eq!(host_name(" Console.Example. ").unwrap(), "console.example");
        assert_eq!(host_name("::1").unwrap(), "[::1]");
        for bad in ["", "https://x", "x:8080", "x/y", "a b"] {
            assert!(host_name(bad).is_err(), "{bad}");
        }
    }
}
