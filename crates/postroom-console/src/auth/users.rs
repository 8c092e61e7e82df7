//! Who may use the console: users with argon2-hashed passwords and a role, read from a file
//! or the environment (never from the command line).
//!
//! One user per line, `name role hash`, with `#` comments and blank lines ignored; in
//! [`USERS_ENV`] lines may also be separated by `;`. A line `token name role hash` defines an
//! API token for scripts (sent as `Authorization: Bearer …`; the hash is of the token):
//!
//! ```text
//! # name    role      argon2 hash (postroom_console::auth::hash_password)
//! alice     operator  $argon2id$v=19$m=19456,t=2,p=1$…
//! token  ci-bot  viewer  $argon2id$v=19$m=19456,t=2,p=1$…
//! ```

use super::Role;
use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use postroom_core::{Error, ErrorKind, Result};
use std::collections::BTreeMap;
use std::path::Path;

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
    // Checked for unknown names, so that they take as long as known ones.
    dummy: String,
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
            PasswordHash::new(hash).map_err(|_| bad("the hash is not an argon2 PHC string"))?;
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
        let dummy = hash_password(&crate::auth::session::random_token())?;
        Ok(Self {
            by_name,
            tokens,
            dummy,
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

    /// The user `name` if `password` is theirs. Takes the same time whether or not the user
    /// exists (a dummy hash is checked for unknown names).
    #[must_use]
    pub fn verify(&self, name: &str, password: &str) -> Option<&User> {
        let user = self.by_name.get(name);
        let hash = user.map_or(self.dummy.as_str(), |u| u.hash.as_str());
        let ok = PasswordHash::new(hash).is_ok_and(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        });
        user.filter(|_| ok)
    }

    /// The user an API token belongs to, if it is one (every token hash is checked).
    #[must_use]
    pub fn verify_token(&self, token: &str) -> Option<&User> {
        self.tokens.iter().find(|u| {
            PasswordHash::new(&u.hash).is_ok_and(|h| {
                Argon2::default()
                    .verify_password(token.as_bytes(), &h)
                    .is_ok()
            })
        })
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
    fn refuses_bad_lines_without_echoing_them() {
        let e = Users::parse("alice operator plaintext-password").unwrap_err();
        assert!(!e.to_string().contains("plaintext-password"), "{e}");
        assert!(Users::parse("alice root $argon2id$x").is_err());
        assert!(Users::parse("# nothing").is_err());
    }
}
