//! Sessions of logged-in users, kept in memory and named by a random id in an HttpOnly,
//! SameSite=Strict cookie (Secure when the console is reached over TLS). Only a successful
//! login stores one: visitors before it hold their state in their own signed cookie
//! ([`super::visitor`]). A user has at most [`MAX_PER_USER`] sessions (their oldest goes
//! first), so nobody's logins push another user's sessions out.

use super::{Permission, Role};
use rand::Rng;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Name of the session cookie.
pub const COOKIE: &str = "postroom_session";

/// Most sessions of one user at once; their oldest is ended beyond it.
pub const MAX_PER_USER: usize = 32;

/// Most sessions kept at once; expired ones go first, then the oldest.
const MAX_SESSIONS: usize = 10_000;

/// One visit's identity: a stored session, or a visitor without one (empty `id`).
#[derive(Clone, Debug)]
pub struct Session {
    /// Random id (the cookie value); empty for a visitor without a stored session.
    pub id: String,
    /// Logged-in user and role, if any.
    pub user: Option<(String, Role)>,
    /// The token every state-changing request must carry.
    pub csrf: String,
    last_seen: Instant,
}

impl Session {
    /// A visitor without a stored session: `user` when auth is off (the local admin),
    /// carrying `csrf`.
    #[must_use]
    pub fn visitor(user: Option<(String, Role)>, csrf: String) -> Self {
        Self {
            id: String::new(),
            user,
            csrf,
            last_seen: Instant::now(),
        }
    }

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
}

impl Sessions {
    /// Sessions that end after `idle` without a request.
    #[must_use]
    pub fn new(idle: Duration) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            idle,
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

    /// A new session for `user`, who just logged in.
    pub fn create(&self, user: (String, Role)) -> Session {
        let s = Session {
            id: random_token(),
            csrf: random_token(),
            last_seen: Instant::now(),
            user: Some(user),
        };
        let mut map = self.map.lock().expect("sessions lock");
        let idle = self.idle;
        let name = s.name().to_string();
        let theirs = map.values().filter(|o| o.name() == name).count();
        if theirs >= MAX_PER_USER {
            end_oldest(&mut map, |o| o.name() == name);
        }
        if map.len() >= MAX_SESSIONS {
            map.retain(|_, o| o.last_seen.elapsed() < idle);
            if map.len() >= MAX_SESSIONS {
                end_oldest(&mut map, |_| true);
            }
        }
        map.insert(s.id.clone(), s.clone());
        s
    }

    /// A session for one request authenticated by an API token: not stored, no cookie.
    #[must_use]
    pub fn for_request(&self, user: (String, Role)) -> Session {
        Session::visitor(Some(user), String::new())
    }

    /// End session `id`.
    pub fn remove(&self, id: &str) {
        self.map.lock().expect("sessions lock").remove(id);
    }

    /// How many sessions are stored.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.lock().expect("sessions lock").len()
    }

    /// Whether none is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `Set-Cookie` value that carries `s`, `Secure` when `secure`.
    #[must_use]
    pub fn cookie(&self, s: &Session, secure: bool) -> String {
        cookie(COOKIE, &s.id, Some(self.idle), secure)
    }
}

fn end_oldest(map: &mut HashMap<String, Session>, of: impl Fn(&Session) -> bool) {
    if let Some(oldest) = map
        .values()
        .filter(|s| of(s))
        .min_by_key(|s| s.last_seen)
        .map(|s| s.id.clone())
    {
        map.remove(&oldest);
    }
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Strict, for the whole console; `max_age` `None`
/// ends the cookie at once.
#[must_use]
pub fn cookie(name: &str, value: &str, max_age: Option<Duration>, secure: bool) -> String {
    format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        max_age.map_or(0, |d| d.as_secs()),
        if secure { "; Secure" } else { "" }
    )
}

/// The value of cookie `name` in a `Cookie` header, if any.
#[must_use]
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|part| {
        let (k, v) = part.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_is_http_only_and_strict() {
        let s = Sessions::new(Duration::from_secs(60));
        let session = s.create(("alice".into(), Role::Viewer));
        let c = s.cookie(&session, true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Secure"));
        assert!(!s.cookie(&session, false).contains("Secure"));
        assert_eq!(
            cookie_value(&format!("a=b; {COOKIE}={}", session.id), COOKIE),
            Some(session.id.as_str())
        );
        assert!(s.get(&session.id).is_some());
        s.remove(&session.id);
        assert!(s.get(&session.id).is_none());
    }

    #[test]
    fn one_users_logins_end_only_their_own_oldest_sessions() {
        let s = Sessions::new(Duration::from_secs(60));
        let bob = s.create(("bob".into(), Role::Viewer));
        let first = s.create(("alice".into(), Role::Viewer));
        for _ in 0..MAX_PER_USER * 3 {
            s.create(("alice".into(), Role::Viewer));
        }
        assert_eq!(s.len(), MAX_PER_USER + 1);
        assert!(s.get(&bob.id).is_some(), "bob's session survived");
        assert!(s.get(&first.id).is_none(), "alice's oldest went");
    }
}
