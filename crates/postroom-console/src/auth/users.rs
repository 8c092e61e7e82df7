//! Who may use the console: users with argon2-hashed passwords and a role, read from a file
//! or the environment (never from the command line).
//!
//! One user per line, `name role hash`, with `#` comments and blank lines ignored; in
//! [`USERS_ENV`] lines may also be separated by `;`. A line `token name role hash` defines an
//! API token for scripts (sent as `Authorization: Bearer …`; the hash is of the token):
//!
//! ```text
//! # name    role      argon2 hash (postroom console hash-password)
//! alice     operator  $argon2id$v=19$m=19456,t=2,p=1$…
//! token  ci-bot  viewer  $argon2id$v=19$m=19456,t=2,p=1$…
//! ```
//!
//! A login costs the same whatever the name: besides the user's own hash, a dummy hash of
//! each other argon2 setting the users' hashes use is checked, and an unknown name checks
//! the dummy of every setting. How long a refusal takes tells nothing about which names
//! exist, even when users' hashes were made with different settings.

use super::Role;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use postroom_core::{Error, ErrorKind, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// The most memory (KiB) a users-file hash may make each login spend: 1 GiB.
pub const MAX_MEMORY_KIB: u32 = 1024 * 1024;
/// The most passes a users-file hash may make each login spend.
pub const MAX_PASSES: u32 = 64;

/// Environment variable holding user lines.
pub const USERS_ENV: &str = "POSTROOM_CONSOLE_USERS";
/// Environment variable naming a file of user lines.
pub const USERS_FILE_ENV: &str = "POSTROOM_CONSOLE_USERS_FILE";

/// One user.
#[derive(Clone, Debug)]
pub struct User {
    /// Login name.
    pub name: String,
    /// Role.
    pub role: Role,
    hash: String,
}

/// The users the console accepts.
#[derive(Clone, Debug)]
pub struct Users {
    by_name: BTreeMap<String, User>,
    tokens: Vec<User>,
    // One hash of a random secret per argon2 setting of the users' hashes: checked beside
    // the user's own (every one for an unknown name), so that every login costs the same.
    dummies: Vec<(Setting, String)>,
}

/// The argon2 settings of a hash: what a check of it costs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Setting {
    algorithm: Algorithm,
    version: Version,
    memory_kib: u32,
    passes: u32,
    lanes: u32,
    output_len: Option<usize>,
}

impl Setting {
    fn of(hash: &PasswordHash<'_>) -> std::result::Result<Self, String> {
        let algorithm = Algorithm::try_from(hash.algorithm)
            .map_err(|_| "the hash is not an argon2 PHC string".to_string())?;
        let version = hash
            .version
            .map_or(Ok(Version::default()), Version::try_from)
            .map_err(|_| "the hash names an unknown argon2 version".to_string())?;
        let params = Params::try_from(hash)
            .map_err(|_| "the hash's argon2 settings are not valid".to_string())?;
        if params.m_cost() > MAX_MEMORY_KIB || params.t_cost() > MAX_PASSES {
            return Err(format!(
                "the hash's argon2 settings (m={}, t={}) would make each login spend more than \
                 m={MAX_MEMORY_KIB} KiB or t={MAX_PASSES} passes",
                params.m_cost(),
                params.t_cost()
            ));
        }
        Ok(Self {
            algorithm,
            version,
            memory_kib: params.m_cost(),
            passes: params.t_cost(),
            lanes: params.p_cost(),
            output_len: params.output_len(),
        })
    }

    /// A hash of a random secret with these settings.
    fn dummy(&self) -> Result<String> {
        let params = Params::new(self.memory_kib, self.passes, self.lanes, self.output_len)
            .map_err(|e| Error::new(ErrorKind::Config, format!("argon2 settings: {e}")))?;
        let secret = crate::auth::session::random_token();
        Argon2::new(self.algorithm, self.version, params)
            .hash_password(secret.as_bytes(), &SaltString::generate(&mut OsRng))
            .map(|h| h.to_string())
            .map_err(|e| Error::new(ErrorKind::Config, format!("cannot hash: {e}")))
    }
}

/// Whether `password` is the one `hash` was made of (with the hash's own settings).
fn matches(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// Hash `password` with argon2id and a random salt, as a PHC string for a users line.
pub fn hash_password(password: &str) -> Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| Error::new(ErrorKind::Config, format!("cannot hash password: {e}")))
}

impl Users {
    /// Parse user lines (see the module docs). Errors name the line, never the hash.
    pub fn parse(text: &str) -> Result<Self> {
        let mut by_name = BTreeMap::new();
        let mut tokens = Vec::new();
        let mut settings: Vec<Setting> = Vec::new();
        for (n, line) in text.split(['\n', ';']).enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |what: &str| {
                Error::new(
                    ErrorKind::Config,
                    format!("console users, entry {}: {what}", n + 1),
                )
            };
            let parts: Vec<&str> = line.split_whitespace().collect();
            let (is_token, rest) = match parts.split_first() {
                Some((&"token", rest)) => (true, rest),
                _ => (false, &parts[..]),
            };
            let [name, role, hash] = rest[..] else {
                return Err(bad("expected `name role hash` or `token name role hash`"));
            };
            let role: Role = role.parse().map_err(|e: String| bad(&e))?;
            let parsed =
                PasswordHash::new(hash).map_err(|_| bad("the hash is not an argon2 PHC string"))?;
            let setting = Setting::of(&parsed).map_err(|e| bad(&e))?;
            if !is_token && !settings.contains(&setting) {
                settings.push(setting);
            }
            if is_token {
                tokens.push(User {
                    name: name.to_string(),
                    role,
                    hash: hash.to_string(),
                });
                continue;
            }
            if by_name
                .insert(
                    name.to_string(),
                    User {
                        name: name.to_string(),
                        role,
                        hash: hash.to_string(),
                    },
                )
                .is_some()
            {
                return Err(bad(&format!("user {name:?} is listed twice")));
            }
        }
        if by_name.is_empty() && tokens.is_empty() {
            return Err(Error::new(
                ErrorKind::Config,
                "no console users are defined",
            ));
        }
        let dummies = settings
            .into_iter()
            .map(|s| s.dummy().map(|d| (s, d)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            by_name,
            tokens,
            dummies,
        })
    }

    /// Read user lines from `path`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::Config,
                format!("cannot read console users file {}: {e}", path.display()),
            )
        })?;
        Self::parse(&text)
    }

    /// Users from [`USERS_FILE_ENV`] (a file) or [`USERS_ENV`] (the lines themselves);
    /// `None` when neither is set.
    pub fn from_env() -> Result<Option<Self>> {
        if let Some(path) = std::env::var_os(USERS_FILE_ENV) {
            return Self::from_file(Path::new(&path)).map(Some);
        }
        match std::env::var(USERS_ENV) {
            Ok(text) => Self::parse(&text).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The user `name` if `password` is theirs. Costs the same whether or not the user
    /// exists, whatever the settings of their hash: one check of each setting the users'
    /// hashes use (their own hash for theirs, a dummy for the others).
    #[must_use]
    pub fn verify(&self, name: &str, password: &str) -> Option<&User> {
        let user = self.by_name.get(name);
        let own = user.and_then(|u| {
            PasswordHash::new(&u.hash)
                .ok()
                .and_then(|h| Setting::of(&h).ok())
        });
        let ok = user.is_some_and(|u| matches(&u.hash, password));
        for (setting, dummy) in &self.dummies {
            if own.as_ref() != Some(setting) {
                // Only the time it takes matters.
                let _ = matches(dummy, password);
            }
        }
        user.filter(|_| ok)
    }

    /// The user an API token belongs to, if it is one (every token hash is checked).
    #[must_use]
    pub fn verify_token(&self, token: &str) -> Option<&User> {
        self.tokens.iter().find(|u| matches(&u.hash, token))
    }

    /// How many users there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether there are none (never true for a parsed set).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_verifies() {
        let h = hash_password("s3cret").unwrap();
        let users = Users::parse(&format!("# c\n\nalice operator {h}\nbob viewer {h}")).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(
            users.verify("alice", "s3cret").map(|u| u.role),
            Some(Role::Operator)
        );
        assert!(users.verify("alice", "wrong").is_none());
        assert!(users.verify("nobody", "s3cret").is_none());
    }

    #[test]
    fn tokens_are_not_passwords() {
        let h = hash_password("tok-123").unwrap();
        let users = Users::parse(&format!("token bot viewer {h}")).unwrap();
        assert_eq!(
            users.verify_token("tok-123").map(|u| u.role),
            Some(Role::Viewer)
        );
        assert!(users.verify_token("tok-124").is_none());
        assert!(
            users.verify("bot", "tok-123").is_none(),
            "a token is no login"
        );
    }

    #[test]
    fn each_argon2_setting_of_the_users_has_one_dummy() {
        let h = hash_password("s3cret").unwrap();
        let other = Argon2::new(
            Algorithm::Argon2id,
            Version::V0x13,
            Params::new(8 * 1024, 1, 1, None).unwrap(),
        )
        .hash_password(b"s3cret", &SaltString::generate(&mut OsRng))
        .unwrap()
        .to_string();
        let users = Users::parse(&format!("a viewer {h}\nb viewer {h}\nc viewer {other}")).unwrap();
        assert_eq!(users.dummies.len(), 2);
        assert_eq!(
            users.verify("c", "s3cret").map(|u| u.name.as_str()),
            Some("c")
        );
        assert!(users.verify("c", "wrong").is_none());
        let absurd =
            "$argon2id$v=19$m=4194304,t=2,p=1$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG";
        let e = Users::parse(&format!("a viewer {absurd}")).unwrap_err();
        assert!(e.to_string().contains("m=4194304"), "{e}");
    }

    #[test]
    fn refuses_bad_lines_without_echoing_them() {
        let e = Users::parse("alice operator plaintext-password").unwrap_err();
        assert!(!e.to_string().contains("plaintext-password"), "{e}");
        assert!(Users::parse("alice root $argon2id$x").is_err());
        assert!(Users::parse("# nothing").is_err());
    }
}
