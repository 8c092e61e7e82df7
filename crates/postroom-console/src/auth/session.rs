//! Sessions kept in memory, named by a random id in an HttpOnly, SameSite=Strict cookie
//! (Secure when the console is reached over TLS). Every visitor gets one, logged in or not,
//! so that the login form is CSRF-protected too; logging in replaces it with a new id.

use super::{Permission, Role};
use rand::Rng;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Name of the session cookie.
pub const COOKIE: &str = "postroom_session";

/// Most sessions kept at once; the oldest are dropped beyond it.
const MAX_SESSIONS: usize = 10_000;

/// One session.
#[derive(Clone, Debug)]
pub struct Session {
    /// Random id (the cookie value).
    pub id: String,
    /// Logged-in user and role, if any.
    pub user: Option<(String, Role)>,
    /// The token every state-changing request must carry.
    pub csrf: String,
    last_seen: Instant,
}

impl Session {
    /// The user's name, or `-` when nobody is logged in.
    #[must_use]
    pub fn name(&self) -> &str {
        self.user.as_ref().map_or("-", |(n, _)| n.as_str())
    }

    /// The role, if logged in.
    #[must_use]
    pub fn role(&self) -> Option<Role> {
        self.user.as_ref().map(|(_, r)| *r)
    }

    /// Whether the role grants `p` (never when nobody is logged in).
    #[must_use]
    pub fn allows(&self, p: Permission) -> bool {
        self.role().is_some_and(|r| r.allows(p))
    }
}

/// A random token: 32 bytes, hex.
#[must_use]
pub fn random_token() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sessions of one console.
#[derive(Debug)]
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    idle: Duration,
    secure: bool,
}

impl Sessions {
    /// Sessions that end after `idle` without a request; cookies marked Secure when `secure`.
    #[must_use]
    pub fn new(idle: Duration, secure: bool) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            idle,
            secure,
        }
    }

    /// The live session `id`, its idle timer restarted.
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut map = self.map.lock().expect("sessions lock");
        let now = Instant::now();
        match map.get_mut(id) {
            Some(s) if now.duration_since(s.last_seen) < self.idle => {
                s.last_seen = now;
                Some(s.clone())
            }
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    /// A new session for `user` (or nobody).
    pub fn create(&self, user: Option<(String, Role)>) -> Session {
        let s = Session {
            id: random_token(),
            user,
            csrf: random_token(),
            last_seen: Instant::now(),
        };
        let mut map = self.map.lock().expect("sessions lock");
        if map.len() >= MAX_SESSIONS {
            let idle = self.idle;
            map.retain(|_, s| s.last_seen.elapsed() < idle);
            if map.len() >= MAX_SESSIONS
                && let Some(oldest) = map
                    .values()
                    .min_by_key(|s| s.last_seen)
                    .map(|s| s.id.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(s.id.clone(), s.clone());
        s
    }

    /// A session for one request authenticated by an API token: not stored, no cookie.
    #[must_use]
    pub fn for_request(&self, user: (String, Role)) -> Session {
        Session {
            id: String::new(),
            user: Some(user),
            csrf: String::new(),
            last_seen: Instant::now(),
        }
    }

    /// End session `id`.
    pub fn remove(&self, id: &str) {
        self.map.lock().expect("sessions lock").remove(id);
    }

    /// The `Set-Cookie` value that carries `s`.
    #[must_use]
    pub fn cookie(&self, s: &Session) -> String {
        format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            s.id,
            self.idle.as_secs(),
            if self.secure { "; Secure" } else { "" }
        )
    }
}

/// The session id in a `Cookie` header, if any.
#[must_use]
pub fn cookie_value(header: &str) -> Option<&str> {
    header.split(';').find_map(|part| {
        let (k, v) = part.trim().split_once('=')?;
        (k == COOKIE).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_is_http_only_and_strict() {
        let s = Sessions::new(Duration::from_secs(60), true);
        let session = s.create(None);
        let c = s.cookie(&session);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Secure"));
        assert_eq!(
            cookie_value(&format!("a=b; {COOKIE}={}", session.id)),
            Some(session.id.as_str())
        );
        assert!(s.get(&session.id).is_some());
        s.remove(&session.id);
        assert!(s.get(&session.id).is_none());
    }

    #[test]
    fn plain_http_cookie_is_not_secure() {
        let s = Sessions::new(Duration::from_secs(60), false);
        assert!(!s.cookie(&s.create(None)).contains("Secure"));
    }
}
