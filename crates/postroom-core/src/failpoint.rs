//! Crash points: named places in the library where a test can make the real code path fail
//! — panic, exit the process, or run a hook (kill a connection, pause) — instead of imitating
//! the failure from outside.
//!
//! Compiled in only with the `failpoints` cargo feature (tests turn it on); without it
//! [`hit`] is an empty inline function and nothing is registered.
//!
//! The points postroom has, named after where they sit:
//!
//! | name | where |
//! |---|---|
//! | [`CONSUMER_BEFORE_ACK`] | the handler returned (its transaction committed), the ack not yet sent |
//! | [`RETRY_BEFORE_ACK`] | a retry copy is confirmed by the transport, the original not yet acked |
//! | [`PARK_BEFORE_ACK`] | a parking copy is confirmed, the original not yet acked |
//! | [`RELAY_AWAITING_CONFIRMS`] | a relay batch is sent; the relay has not yet taken in its confirms (a slow broker) |
//! | [`RELAY_BEFORE_MARK`] | a relay batch is confirmed by the transport, its rows not yet marked published |
//! | [`WAL_BEFORE_ADVANCE`] | the WAL relay's messages are confirmed by the transport, the slot's position not yet advanced past them |
//! | [`BATCH_AFTER_COMMIT`] | a batched handler committed, the batch's deliveries not yet settled |
//!
//! In a child process, points are armed from `POSTROOM_FAILPOINTS`:
//! `name=exit(9)` or `name=panic`, optionally `@N` to let the first N hits pass
//! (`consumer.before_ack=exit(9)@3`), several separated by `;`.

/// The handler committed; the ack is not yet sent.
pub const CONSUMER_BEFORE_ACK: &str = "consumer.before_ack";
/// A retry copy is confirmed; the original is not yet acked.
pub const RETRY_BEFORE_ACK: &str = "retry.before_ack";
/// A parking copy is confirmed; the original is not yet acked.
pub const PARK_BEFORE_ACK: &str = "park.before_ack";
/// A relay batch is sent; the relay has not yet taken in its confirms (held, a slow broker).
pub const RELAY_AWAITING_CONFIRMS: &str = "relay.awaiting_confirms";
/// A relay batch is confirmed; its rows are not yet marked published.
pub const RELAY_BEFORE_MARK: &str = "relay.before_mark";
/// The WAL relay's messages are confirmed; the slot's position is not yet advanced past them.
pub const WAL_BEFORE_ADVANCE: &str = "wal.before_advance";
/// A batched handler committed; its deliveries are not yet settled.
pub const BATCH_AFTER_COMMIT: &str = "batch.after_commit";

/// Pass through the point `name` on behalf of `scope` (the consumer's or relay's name, so a
/// test arms the point for its own consumer only, while other tests run in the same
/// process): does nothing unless a test armed it.
#[inline]
pub async fn hit(name: &'static str, scope: &str) {
    #[cfg(feature = "failpoints")]
    imp::hit(name, scope).await;
    #[cfg(not(feature = "failpoints"))]
    let _ = (name, scope);
}

#[cfg(feature = "failpoints")]
pub use imp::{Action, arm, arm_for, disarm, hits};

#[cfg(feature = "failpoints")]
mod imp {
    use futures::future::BoxFuture;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};

    /// What an armed point does.
    #[derive(Clone)]
    pub enum Action {
        /// Panic.
        Panic,
        /// Exit the process with this code (a crash, as far as the broker can tell).
        Exit(i32),
        /// Run a hook and continue (kill a connection, pause, count).
        Call(Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>),
    }

    impl std::fmt::Debug for Action {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Action::Panic => f.write_str("Panic"),
                Action::Exit(c) => write!(f, "Exit({c})"),
                Action::Call(_) => f.write_str("Call(..)"),
            }
        }
    }

    struct Armed {
        action: Action,
        skip: u32,
        times: Option<u32>,
    }

    /// Armed points by (name, scope); scope `None` acts on every hit of the name.
    #[derive(Default)]
    struct Registry {
        armed: HashMap<(&'static str, Option<String>), Armed>,
        hits: HashMap<(&'static str, String), u64>,
    }

    fn registry() -> &'static Mutex<Registry> {
        static R: OnceLock<Mutex<Registry>> = OnceLock::new();
        R.get_or_init(|| {
            let mut r = Registry::default();
            if let Ok(spec) = std::env::var("POSTROOM_FAILPOINTS") {
                for (name, armed) in parse(&spec) {
                    r.armed.insert((name, None), armed);
                }
            }
            Mutex::new(r)
        })
    }

    fn lock() -> std::sync::MutexGuard<'static, Registry> {
        crate::sync::lock_unpoisoned(registry())
    }

    fn parse(spec: &str) -> Vec<(&'static str, Armed)> {
        spec.split(';')
            .filter_map(|item| {
                let (name, rest) = item.trim().split_once('=')?;
                let (act, skip) = match rest.split_once('@') {
                    Some((a, n)) => (a, n.parse().ok()?),
                    None => (rest, 0),
                };
                let action = if act == "panic" {
                    Action::Panic
                } else {
                    let code = act.strip_prefix("exit(")?.strip_suffix(')')?.parse().ok()?;
                    Action::Exit(code)
                };
                let name: &'static str = Box::leak(name.to_string().into_boxed_str());
                Some((
                    name,
                    Armed {
                        action,
                        skip,
                        times: None,
                    },
                ))
            })
            .collect()
    }

    /// Arm `name` for every scope: let `skip` hits pass, then act on the next `times` hits
    /// (`None`: all).
    pub fn arm(name: &'static str, action: Action, skip: u32, times: Option<u32>) {
        lock().armed.insert(
            (name, None),
            Armed {
                action,
                skip,
                times,
            },
        );
    }

    /// Arm `name` for hits on behalf of `scope` only (a consumer's or relay's name).
    pub fn arm_for(name: &'static str, scope: &str, action: Action, skip: u32, times: Option<u32>) {
        lock().armed.insert(
            (name, Some(scope.to_string())),
            Armed {
                action,
                skip,
                times,
            },
        );
    }

    /// Disarm `name`, every scope.
    pub fn disarm(name: &'static str) {
        lock().armed.retain(|(n, _), _| *n != name);
    }

    /// How many times `name` was passed on behalf of `scope`, armed or not.
    pub fn hits(name: &'static str, scope: &str) -> u64 {
        lock()
            .hits
            .get(&(name, scope.to_string()))
            .copied()
            .unwrap_or(0)
    }

    pub(super) async fn hit(name: &'static str, scope: &str) {
        let action = {
            let mut r = lock();
            *r.hits.entry((name, scope.to_string())).or_default() += 1;
            let scoped = (name, Some(scope.to_string()));
            let key = if r.armed.contains_key(&scoped) {
                scoped
            } else {
                (name, None)
            };
            match r.armed.get_mut(&key) {
                None => None,
                Some(a) if a.skip > 0 => {
                    a.skip -= 1;
                    None
                }
                Some(a) if a.times == Some(0) => None,
                Some(a) => {
                    if let Some(t) = a.times.as_mut() {
                        *t -= 1;
                    }
                    Some(a.action.clone())
                }
            }
        };
        match action {
            None => {}
            Some(Action::Panic) => panic!("failpoint {name}"),
            Some(Action::Exit(code)) => {
                eprintln!("failpoint {name}: exiting with {code}");
                std::process::exit(code)
            }
            Some(Action::Call(f)) => f().await,
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn parses_the_environment_form() {
            let p = parse("consumer.before_ack=exit(9)@3; relay.before_mark=panic");
            assert_eq!(p.len(), 2);
            assert_eq!(p[0].0, "consumer.before_ack");
            assert_eq!(p[0].1.skip, 3);
            assert!(matches!(p[0].1.action, Action::Exit(9)));
            assert!(matches!(p[1].1.action, Action::Panic));
        }
    }
}
