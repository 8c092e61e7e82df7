//! The connection settings of a broker URL and of a topology file's `[nats]` table.
//!
//! ```text
//! tls://nats.internal:4222?cacertfile=/etc/postroom/nats-ca.pem
//! nats://nats.internal:4222?tls=required&cacertfile=/etc/postroom/nats-ca.pem
//! tls://nats.internal:4222?cacertfile=/ca.pem&certfile=/client.pem&keyfile=/client.key
//! nats://app@nats.internal:4222                      (password from POSTROOM_BROKER_PASSWORD)
//! nats://app@nats.internal:4222?password_file=/run/secrets/nats-password
//! nats://nats.internal:4222?token_file=/run/secrets/nats-token
//! nats://nats.internal:4222?nkey_file=/run/secrets/app.nk
//! tls://nats.internal:4222?creds_file=/run/secrets/app.creds
//! ```
//!
//! | URL parameter / `[nats]` key | what |
//! |---|---|
//! | `tls` | `required`: TLS or nothing (what `tls://` says) |
//! | `cacertfile` | CA certificates (PEM) the server's certificate must chain to; without it, the system's |
//! | `certfile`, `keyfile` | a client certificate and its key (PEM), for a server with `verify: true` |
//! | `password_file` | the password of the URL's user (first line of the file) |
//! | `token_file` | a token (first line of the file) |
//! | `nkey_file` | an NKey user's seed (`SU…`) |
//! | `creds_file` | a `.creds` file: user JWT and seed (operator mode) |
//!
//! The user is the URL's (`nats://app@host`); its password is the URL's, which the command
//! line fills from `POSTROOM_BROKER_PASSWORD` or `--broker-password-file`, or `password_file`.
//! A password without a user is a token (`nats://:TOKEN@host`, so the same variable and file
//! carry a token too). A user without a password, two ways to authenticate, or one value given
//! twice with different values are refused; no error repeats the URL or a secret.

use super::{NatsAuth, NatsSecurity, Secret};
use postroom_core::{Error, ErrorKind, Result};
use serde::Deserialize;
use std::path::PathBuf;

/// The `[nats]` table of a topology file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    /// `tls` (`"required"`).
    pub tls: Option<String>,
    /// `cacertfile`.
    pub cacertfile: Option<PathBuf>,
    /// `certfile`.
    pub certfile: Option<PathBuf>,
    /// `keyfile`.
    pub keyfile: Option<PathBuf>,
    /// `password_file`.
    pub password_file: Option<PathBuf>,
    /// `token_file`.
    pub token_file: Option<PathBuf>,
    /// `nkey_file`.
    pub nkey_file: Option<PathBuf>,
    /// `creds_file`.
    pub creds_file: Option<PathBuf>,
}

/// The URL settings, with the topology file's name for each.
const KEYS: [&str; 8] = [
    "tls",
    "cacertfile",
    "certfile",
    "keyfile",
    "password_file",
    "token_file",
    "nkey_file",
    "creds_file",
];

/// Where to connect and how: the servers (`nats://host:port` or `tls://host:port`, with no
/// credentials and no settings left in them) and the security settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsTarget {
    /// Server addresses, printable.
    pub servers: Vec<String>,
    /// Security.
    pub security: NatsSecurity,
}

impl NatsTarget {
    /// The settings of `url` alone (one server, or several separated by commas).
    pub fn from_url(url: &str) -> Result<Self> {
        Self::from_url_and_file(url, &FileSettings::default())
    }

    /// The settings of `url` and a topology file's `[nats]` table; a setting both give must
    /// have one value.
    pub fn from_url_and_file(url: &str, file: &FileSettings) -> Result<Self> {
        let bad = |m: String| Error::new(ErrorKind::Config, m);
        let mut servers = Vec::new();
        let mut tls_scheme = false;
        let mut values: Vec<(String, String)> = Vec::new();
        let (mut user, mut password): (Option<String>, Option<String>) = (None, None);
        for one in crate::connection::servers(url) {
            // The parser's own errors name no part of the URL.
            let parsed = url::Url::parse(one).map_err(|e| bad(format!("not a NATS URL: {e}")))?;
            match parsed.scheme() {
                "nats" => {}
                "tls" => tls_scheme = true,
                other => {
                    return Err(bad(format!("scheme {other:?} is not nats:// or tls://")));
                }
            }
            let host = parsed
                .host_str()
                .filter(|h| !h.is_empty())
                .ok_or_else(|| bad("a NATS URL needs a host".into()))?;
            if !matches!(parsed.path(), "" | "/") {
                return Err(bad(
                    "a NATS URL has no path (stream names come from the workload)".into(),
                ));
            }
            servers.push((host.to_string(), parsed.port().unwrap_or(4222)));
            for (k, v) in parsed.query_pairs() {
                if !KEYS.contains(&k.as_ref()) {
                    return Err(bad(format!(
                        "not a NATS URL setting: {k:?} (known: {}; ack_wait, max_deliver and the rest are keys of the topology file)",
                        KEYS.join(", ")
                    )));
                }
                agree(&mut values, &k, &v)?;
            }
            let u = percent_decoded(parsed.username());
            if !u.is_empty() {
                same("the URL's user", &mut user, u)?;
            }
            if let Some(p) = parsed.password() {
                same("the URL's password", &mut password, percent_decoded(p))?;
            }
        }
        if servers.is_empty() {
            return Err(bad("the NATS URL names no server".into()));
        }
        let from_url = |key: &str| {
            values
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let path = |key: &str, file_value: &Option<PathBuf>| {
            one(key, from_url(key).map(PathBuf::from), file_value.clone())
        };
        let tls = match one("tls", from_url("tls"), file.tls.clone())?.as_deref() {
            None => tls_scheme,
            Some("required") => true,
            Some(other) => {
                return Err(bad(format!(
                    "tls must be \"required\" (or left out: the client then follows the server), not {other:?}"
                )));
            }
        };
        let password_file = path("password_file", &file.password_file)?;
        let token_file = path("token_file", &file.token_file)?;
        let mut ways: Vec<(&str, NatsAuth)> = Vec::new();
        match (user, password, password_file) {
            (Some(_), Some(_), Some(_)) => {
                return Err(bad(
                    "the URL has a password and password_file names one too: give it once".into(),
                ));
            }
            (Some(user), Some(p), None) => ways.push((
                "a user and password",
                NatsAuth::UserPassword {
                    user,
                    password: Secret::from_text(p, "the broker URL"),
                },
            )),
            (Some(user), None, Some(f)) => ways.push((
                "a user and password",
                NatsAuth::UserPassword {
                    user,
                    password: Secret::from_file(&f, "password")?,
                },
            )),
            (Some(_), None, None) => {
                return Err(bad(
                    "the NATS URL names a user but no password: set POSTROOM_BROKER_PASSWORD, --broker-password-file or password_file=PATH (a token is written nats://:TOKEN@host or given by token_file, never as the user)".into(),
                ));
            }
            (None, _, Some(_)) => {
                return Err(bad(
                    "password_file is given but the URL names no user (nats://user@host); a token goes in token_file".into(),
                ));
            }
            (None, Some(token), None) => {
                if token_file.is_some() {
                    return Err(bad(
                        "the URL has a token (a password without a user) and token_file names one too: give it once".into(),
                    ));
                }
                ways.push((
                    "a token",
                    NatsAuth::Token(Secret::from_text(token, "the broker URL")),
                ));
            }
            (None, None, None) => {}
        }
        if let Some(f) = token_file
            && !ways.iter().any(|(w, _)| *w == "a token")
        {
            ways.push(("a token", NatsAuth::Token(Secret::from_file(&f, "token")?)));
        }
        if let Some(f) = path("nkey_file", &file.nkey_file)? {
            ways.push(("an NKey", NatsAuth::NKey(f)));
        }
        if let Some(f) = path("creds_file", &file.creds_file)? {
            ways.push(("a creds file", NatsAuth::Creds(f)));
        }
        if ways.len() > 1 {
            let names: Vec<&str> = ways.iter().map(|(w, _)| *w).collect();
            return Err(bad(format!(
                "one way to authenticate to NATS, not {}",
                names.join(" and ")
            )));
        }
        let security = NatsSecurity {
            tls,
            ca_file: path("cacertfile", &file.cacertfile)?,
            cert_file: path("certfile", &file.certfile)?,
            key_file: path("keyfile", &file.keyfile)?,
            auth: ways.pop().map_or(NatsAuth::None, |(_, a)| a),
        };
        security.validate()?;
        let scheme = if tls { "tls" } else { "nats" };
        let servers = servers
            .into_iter()
            .map(|(host, port)| format!("{scheme}://{host}:{port}"))
            .collect();
        Ok(Self { servers, security })
    }

    /// The servers, comma-separated: printable (no credentials, no settings).
    #[must_use]
    pub fn shown(&self) -> String {
        self.servers.join(",")
    }
}

/// The `[nats]` table of topology file `text` (empty when there is none), taken out of
/// `table`.
pub fn take_file_settings(table: &mut toml::Table) -> Result<FileSettings> {
    let bad = |m: String| Error::new(ErrorKind::Config, format!("topology file (NATS): {m}"));
    match table.remove("nats") {
        None => Ok(FileSettings::default()),
        Some(toml::Value::Table(t)) => FileSettings::deserialize(toml::Value::Table(t))
            .map_err(|e| bad(format!("[nats]: {e}"))),
        Some(_) => Err(bad("`nats` must be a table ([nats])".into())),
    }
}

/// Note `key = value` of one server's URL; another server's value for it must be the same.
fn agree(values: &mut Vec<(String, String)>, key: &str, value: &str) -> Result<()> {
    match values.iter().find(|(k, _)| k == key) {
        Some((_, v)) if v != value => Err(Error::new(
            ErrorKind::Config,
            format!("{key} is given twice in the NATS URL with different values"),
        )),
        Some(_) => Ok(()),
        None => {
            values.push((key.to_string(), value.to_string()));
            Ok(())
        }
    }
}

/// One credential part (never printed) noted from each server URL: they must agree.
fn same(what: &str, slot: &mut Option<String>, value: String) -> Result<()> {
    match slot {
        Some(v) if *v != value => Err(Error::new(
            ErrorKind::Config,
            format!("{what} differs between the servers of the NATS URL: give one"),
        )),
        Some(_) => Ok(()),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
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

fn percent_decoded(s: &str) -> String {
    postroom_core::driver::endpoint::percent_decode(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(url: &str) -> Result<NatsTarget> {
        NatsTarget::from_url(url)
    }

    #[test]
    fn the_scheme_and_tls_say_whether_tls_is_required() {
        let plain = of("nats://127.0.0.1:4222").unwrap();
        assert_eq!(plain.servers, ["nats://127.0.0.1:4222"]);
        assert!(!plain.security.tls);
        let tls = of("tls://h").unwrap();
        assert_eq!(tls.servers, ["tls://h:4222"]);
        assert!(tls.security.tls);
        let asked = of("nats://h:1,nats://g:2?tls=required").unwrap();
        assert_eq!(asked.servers, ["tls://h:1", "tls://g:2"]);
        let e = of("nats://h?tls=yes").unwrap_err();
        assert!(e.message().contains("must be \"required\""), "{e}");
    }

    #[test]
    fn credentials_come_from_the_url_or_a_file_and_are_never_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "S3CRET-file\n").unwrap();
        let t = of("nats://app:S3CRET%40x@h").unwrap();
        let NatsAuth::UserPassword { user, password } = &t.security.auth else {
            panic!("{t:?}")
        };
        assert_eq!((user.as_str(), password.expose()), ("app", "S3CRET@x"));
        assert!(!format!("{t:?}").contains("S3CRET"));
        assert_eq!(
            t.servers,
            ["nats://h:4222"],
            "no credentials left in the servers"
        );
        let t = of(&format!("nats://app@h?password_file={}", pw.display())).unwrap();
        assert!(
            matches!(&t.security.auth, NatsAuth::UserPassword { password, .. } if password.expose() == "S3CRET-file")
        );
        let t = of("nats://:S3CRET-token@h").unwrap();
        assert!(matches!(&t.security.auth, NatsAuth::Token(s) if s.expose() == "S3CRET-token"));
        let t = of(&format!("nats://h?token_file={}", pw.display())).unwrap();
        assert!(matches!(&t.security.auth, NatsAuth::Token(s) if s.expose() == "S3CRET-file"));
        for (url, needle) in [
            ("nats://S3CRET-token@h".to_string(), "no password"),
            (
                format!("nats://app:S3CRET@h?password_file={}", pw.display()),
                "give it once",
            ),
            (
                format!("nats://h?password_file={}", pw.display()),
                "names no user",
            ),
            (
                format!("nats://:S3CRET@h?token_file={}", pw.display()),
                "give it once",
            ),
            (
                format!("nats://app:S3CRET@h?nkey_file={}", pw.display()),
                "not a user and password and an NKey",
            ),
            (
                "nats://h?token_file=/surely/missing/token".to_string(),
                "/surely/missing/token",
            ),
            ("nats://app:S3CRET#x@h".to_string(), "not a NATS URL"),
            ("nats://h?max_deliver=3".to_string(), "\"max_deliver\""),
            ("nats://h/stream".to_string(), "no path"),
            ("amqp://h".to_string(), "not nats://"),
            ("nats://h?cacertfile=/ca.pem".to_string(), "without TLS"),
            (
                "nats://a:S3CRET1@h1,nats://a:S3CRET2@h2".to_string(),
                "differs between the servers",
            ),
        ] {
            let e = of(&url).unwrap_err();
            assert!(e.message().contains(needle), "{url}: {e}");
            assert!(!e.to_string().contains("S3CRET"), "{url}: {e}");
        }
    }

    #[test]
    fn a_topology_file_gives_the_same_settings_once() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let mut table: toml::Table = toml::from_str(&format!(
            "prefix = \"shop\"\n[nats]\ntls = \"required\"\ncacertfile = {:?}\n",
            ca.display().to_string()
        ))
        .unwrap();
        let file = take_file_settings(&mut table).unwrap();
        assert!(!table.contains_key("nats"));
        let t = NatsTarget::from_url_and_file("nats://h", &file).unwrap();
        assert!(t.security.tls);
        assert_eq!(t.security.ca_file.as_deref(), Some(ca.as_path()));
        let e = NatsTarget::from_url_and_file("nats://h?cacertfile=/other.pem", &file).unwrap_err();
        assert!(e.message().contains("give it once"), "{e}");
        let mut table: toml::Table = toml::from_str("[nats]\ncafile = \"x\"\n").unwrap();
        let e = take_file_settings(&mut table).unwrap_err();
        assert!(e.message().contains("unknown field `cafile`"), "{e}");
    }
}
