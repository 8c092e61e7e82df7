//! Guessing is throttled and timing tells nothing: wrong passwords lock the user out, then the
//! client; a wrong API token costs its argon2 checks once; an unknown user name takes as long
//! to refuse as a known one, whatever the argon2 settings of the known one's hash.

use crate::common::agent::Agent;
use crate::common::{PASSWORD, logged_in, parked, serve, serve_to_users};
use argon2::password_hash::{PasswordHasher, SaltString, rand_core::OsRng};
use postroom_console::{Auth, Users};
use reqwest::StatusCode;
use std::time::{Duration, Instant};

/// One login attempt from a fresh visitor: its status and how long the POST took.
async fn attempt(base: &str, user: &str, password: &str) -> (StatusCode, Duration) {
    let mut a = Agent::new(base);
    a.get("/login").await;
    let start = Instant::now();
    let (status, _, _) = a
        .post(
            "/login",
            &[("username", user), ("password", password)],
            true,
        )
        .await;
    (status, start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_lock_out_the_user_then_the_client() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    for _ in 0..10 {
        let (status, _) = attempt(&base, "operator", "wrong").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, _) = attempt(&base, "operator", PASSWORD).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "the right password still worked after 10 wrong ones"
    );
    // Another user of the same client is not locked out by them.
    logged_in(&base, "admin").await;
    // Wrong passwords for many names from one client lock the client out.
    for i in 0..20 {
        let (status, _) = attempt(&base, &format!("guess-{i}"), "wrong").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    let (status, _) = attempt(&base, "viewer", PASSWORD).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "the client was not locked out after 30 wrong passwords"
    );
}

/// The median of `n` durations measured by `f`.
async fn median(n: usize, mut f: impl AsyncFnMut() -> Duration) -> Duration {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(f().await);
    }
    all.sort();
    all[n / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_user_takes_as_long_to_refuse_as_known_ones_whatever_their_hash_settings() {
    let p = parked(1, 0, 0).await;
    // One user's hash made with heavier settings than the console's own.
    let heavy = argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        argon2::Params::new(3 * 19_456, 2, 1, None).unwrap(),
    )
    .hash_password(PASSWORD.as_bytes(), &SaltString::generate(&mut OsRng))
    .unwrap()
    .to_string();
    let light = postroom_console::auth::hash_password(PASSWORD).unwrap();
    let users = Users::parse(&format!("heavy viewer {heavy}\nlight viewer {light}")).unwrap();
    let (base, _stop) = serve(&p.store, Auth::Users(users)).await;
    let mut times = Vec::new();
    for user in ["heavy", "light", "nobody"] {
        let t = median(7, async || {
            let (status, t) = attempt(&base, user, "wrong").await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{user}");
            t
        })
        .await;
        times.push((user, t));
    }
    for (a, ta) in &times {
        for (b, tb) in &times {
            let ratio = ta.as_secs_f64() / tb.as_secs_f64();
            assert!(
                ratio < 1.5,
                "refusing {a} took {ta:?}, {b} {tb:?} (ratio {ratio:.2}): {times:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_api_token_is_checked_once_and_wrong_tokens_lock_the_client_out() {
    let p = parked(1, 0, 0).await;
    let h = |t: &str| postroom_console::auth::hash_password(t).unwrap();
    let users = Users::parse(&format!(
        "token a viewer {}\ntoken b viewer {}\ntoken c viewer {}",
        h("token-a"),
        h("token-b"),
        h("token-c")
    ))
    .unwrap();
    let (base, _stop) = serve(&p.store, Auth::Users(users)).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let call = async |token: &str| {
        let start = Instant::now();
        let status = client
            .get(format!("{base}/parking"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status();
        (status, start.elapsed())
    };
    let (status, first) = call("wrong-token").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let mut again = Duration::ZERO;
    for _ in 0..9 {
        let (status, t) = call("wrong-token").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        again += t;
    }
    assert!(
        again < first,
        "nine repeats of a wrong token took {again:?}, its first check {first:?}: each was checked again"
    );
    for i in 0..20 {
        let (status, _) = call(&format!("guess-{i}")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let (status, _) = call("token-a").await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "the client was not locked out after 30 wrong tokens"
    );
}
