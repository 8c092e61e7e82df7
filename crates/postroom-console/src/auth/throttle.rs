//! Failed logins and wrong API tokens are counted per client and per user name; past a
//! limit within a window, the client or name is locked out for a while, and its attempts are
//! refused without a password check. The records kept are bounded: when full, records that
//! lock nothing out go first.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many failures lock a key out, counted over how long, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Failures that lock the key out.
    pub failures: u32,
    /// The window they are counted over (from the first).
    pub window: Duration,
    /// How long the key stays locked out.
    pub lockout: Duration,
}

/// The limits on failed logins and wrong API tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginLimits {
    /// Per client address (an IPv6 client by its /64).
    pub per_client: Limit,
    /// Per user name typed at the login form, known or not.
    pub per_user: Limit,
}

impl Default for LoginLimits {
    /// 30 failures per client and 10 per user name within 15 minutes lock them out for 15
    /// minutes.
    fn default() -> Self {
        let quarter = Duration::from_secs(15 * 60);
        Self {
            per_client: Limit {
                failures: 30,
                window: quarter,
                lockout: quarter,
            },
            per_user: Limit {
                failures: 10,
                window: quarter,
                lockout: quarter,
            },
        }
    }
}

/// Most keys remembered by one throttle.
const MAX_KEYS: usize = 10_000;

#[derive(Clone, Copy, Debug)]
struct Record {
    failures: u32,
    since: Instant,
    locked_until: Option<Instant>,
}

/// Failures by key (a client address or a user name).
#[derive(Debug)]
pub struct Throttle {
    limit: Limit,
    records: Mutex<HashMap<String, Record>>,
}

impl Throttle {
    /// A throttle applying `limit`.
    #[must_use]
    pub fn new(limit: Limit) -> Self {
        Self {
            limit,
            records: Mutex::new(HashMap::new()),
        }
    }

    /// How long `key` stays locked out, if it is.
    pub fn locked(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        let records = self.records.lock().expect("throttle lock");
        records
            .get(key)
            .and_then(|r| r.locked_until)
            .and_then(|until| until.checked_duration_since(now))
            .filter(|left| !left.is_zero())
    }

    /// Count a failure of `key`; `true` when it locks `key` out now.
    pub fn failed(&self, key: &str) -> bool {
        let now = Instant::now();
        let mut records = self.records.lock().expect("throttle lock");
        if !records.contains_key(key) && records.len() >= MAX_KEYS {
            make_room(&mut records, now, self.limit.window);
        }
        let r = records.entry(key.to_string()).or_insert(Record {
            failures: 0,
            since: now,
            locked_until: None,
        });
        if now.duration_since(r.since) > self.limit.window {
            r.failures = 0;
            r.since = now;
        }
        r.failures = r.failures.saturating_add(1);
        if r.failures >= self.limit.failures {
            r.failures = 0;
            r.since = now;
            r.locked_until = now.checked_add(self.limit.lockout);
            return true;
        }
        false
    }

    /// Forget the failures of `key` (it authenticated); a lockout stays.
    pub fn succeeded(&self, key: &str) {
        let mut records = self.records.lock().expect("throttle lock");
        if let Some(r) = records.get_mut(key)
            && r.locked_until.is_none()
        {
            records.remove(key);
        }
    }
}

/// The throttles in front of logins and API tokens: one per client, one per user name.
#[derive(Debug)]
pub struct Logins {
    clients: Throttle,
    users: Throttle,
}

impl Logins {
    /// Throttles applying `limits`.
    #[must_use]
    pub fn new(limits: LoginLimits) -> Self {
        Self {
            clients: Throttle::new(limits.per_client),
            users: Throttle::new(limits.per_user),
        }
    }

    /// How long an attempt from `client` (when known) for `user` (a login; `None` for a
    /// token) must wait, if it is locked out.
    pub fn locked(&self, client: Option<&str>, user: Option<&str>) -> Option<Duration> {
        let by_client = client.and_then(|c| self.clients.locked(c));
        let by_user = user.and_then(|u| self.users.locked(u));
        by_client.max(by_user)
    }

    /// Count a failed attempt; `true` when it locks the client or the user out now.
    pub fn failed(&self, client: Option<&str>, user: Option<&str>) -> bool {
        let by_client = client.is_some_and(|c| self.clients.failed(c));
        let by_user = user.is_some_and(|u| self.users.failed(u));
        by_client || by_user
    }

    /// `user` logged in: their failures are forgotten (the client's are not, or guesses at
    /// other names could go on between logins of one's own).
    pub fn succeeded(&self, user: &str) {
        self.users.succeeded(user);
    }
}

/// Drop what no longer counts; if still full, the oldest record that locks nothing out, or
/// else the lockout that ends first.
fn make_room(records: &mut HashMap<String, Record>, now: Instant, window: Duration) {
    let live = |r: &Record| {
        r.locked_until.is_some_and(|u| u > now) || now.duration_since(r.since) <= window
    };
    records.retain(|_, r| live(r));
    if records.len() < MAX_KEYS {
        return;
    }
    let victim = records
        .iter()
        .filter(|(_, r)| r.locked_until.is_none_or(|u| u <= now))
        .min_by_key(|(_, r)| r.since)
        .or_else(|| records.iter().min_by_key(|(_, r)| r.locked_until))
        .map(|(k, _)| k.clone());
    if let Some(k) = victim {
        records.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(failures: u32, lockout_ms: u64) -> Limit {
        Limit {
            failures,
            window: Duration::from_secs(60),
            lockout: Duration::from_millis(lockout_ms),
        }
    }

    #[test]
    fn failures_lock_a_key_out_for_a_while() {
        let t = Throttle::new(limit(3, 200));
        assert!(!t.failed("alice") && !t.failed("alice"));
        assert!(t.locked("alice").is_none());
        assert!(t.failed("alice"), "the third failure locks");
        assert!(t.locked("alice").is_some());
        assert!(t.locked("bob").is_none(), "others are not locked");
        std::thread::sleep(Duration::from_millis(250));
        assert!(t.locked("alice").is_none(), "the lockout ends");
    }

    #[test]
    fn a_success_forgets_the_failures_but_not_a_lockout() {
        let t = Throttle::new(limit(2, 60_000));
        t.failed("alice");
        t.succeeded("alice");
        assert!(!t.failed("alice"), "counting started again");
        assert!(t.failed("alice"));
        t.succeeded("alice");
        assert!(t.locked("alice").is_some());
    }

    #[test]
    fn a_flood_of_keys_does_not_unlock_a_locked_one() {
        let t = Throttle::new(limit(2, 60_000));
        t.failed("alice");
        assert!(t.failed("alice"));
        for i in 0..MAX_KEYS + 10 {
            t.failed(&format!("k{i}"));
        }
        assert!(t.locked("alice").is_some(), "alice's lockout was evicted");
        assert!(t.records.lock().unwrap().len() <= MAX_KEYS);
    }
}
