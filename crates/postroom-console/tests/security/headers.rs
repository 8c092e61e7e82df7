//! The same protective headers on every page, however the visitor authenticated; the
//! request-size limit is the one the code states (an edited payload up to 4 MiB); the session
//! cookie is Secure when the console is reached over TLS.

use crate::common::agent::Agent;
use crate::common::{CONSUMER, PASSWORD, logged_in, parked, serve, users};
use crate::first_id;
use postroom_console::Users;
use postroom_core::ParkingStore;
use reqwest::StatusCode;

const PROTECTIVE: [&str; 3] = [
    "content-security-policy",
    "x-content-type-options",
    "referrer-policy",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_served_to_an_api_token_carry_the_headers_pages_served_to_a_cookie_carry() {
    let p = parked(1, 0, 0).await;
    let token_hash = postroom_console::auth::hash_password("script-token").unwrap();
    let h = postroom_console::auth::hash_password(PASSWORD).unwrap();
    let users = Users::parse(&format!(
        "operator operator {h}\ntoken bot operator {token_hash}"
    ))
    .unwrap();
    let (base, _stop) = serve(&p.store, postroom_console::Auth::Users(users)).await;
    let id = first_id(&p.store).await;
    let mut cookie = logged_in(&base, "operator").await;
    let mut token = Agent::new(&base).with_header("authorization", "Bearer script-token");
    for path in ["/parking".to_string(), format!("/messages/{id}")] {
        cookie.get(&path).await;
        let (status, _, _) = token.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        for name in PROTECTIVE {
            let want = cookie.last_headers.get(name);
            assert!(want.is_some(), "{name} on {path} for a cookie");
            assert_eq!(
                token.last_headers.get(name),
                want,
                "{name} on {path} for a token"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_payload_just_over_2_mib_goes_back_and_one_over_4_mib_is_refused() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve(&p.store, postroom_console::Auth::Users(users())).await;
    let id = first_id(&p.store).await;
    let parked = p.store.get(id.parse().unwrap()).await.unwrap().remove(0);
    let body: serde_json::Value = serde_json::from_slice(&parked.body).unwrap();
    let mut admin = logged_in(&base, "admin").await;
    admin
        .get(&format!("/messages/{id}/edit?consumer={CONSUMER}"))
        .await;
    let edit_of = |bytes: usize| {
        let mut b = body.clone();
        b["data"]["sku"] = "A-9".into();
        b["data"]["note"] = "n".repeat(bytes).into();
        b.to_string()
    };
    let path = format!("/messages/{id}/edit");
    let (status, _, _) = admin
        .post(
            &path,
            &[("consumer", CONSUMER), ("body", &edit_of(4 * 1024 * 1024))],
            true,
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "over 4 MiB");
    let (status, page, _) = admin
        .post(
            &path,
            &[
                ("consumer", CONSUMER),
                ("body", &edit_of(2 * 1024 * 1024 + 100_000)),
            ],
            true,
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "just over 2 MiB: {page}");
}

/// Log in as the operator; the `Set-Cookie` header that carries the new session.
async fn session_cookie_of(mut a: Agent) -> String {
    a.get("/login").await;
    let (status, _, _) = a
        .post(
            "/login",
            &[("username", "operator"), ("password", PASSWORD)],
            true,
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    a.set_cookies
        .iter()
        .find(|c| c.starts_with("postroom_session=") && !c.contains("Max-Age=0"))
        .cloned()
        .unwrap_or_else(|| panic!("no session cookie in {:?}", a.set_cookies))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_cookie_is_secure_when_the_console_is_reached_over_tls() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve(&p.store, postroom_console::Auth::Users(users())).await;
    let over_tls =
        session_cookie_of(Agent::new(&base).with_header("x-forwarded-proto", "https")).await;
    assert!(
        over_tls.contains("; Secure"),
        "reached through a TLS proxy: {over_tls}"
    );
    let plain = session_cookie_of(Agent::new(&base)).await;
    assert!(
        !plain.contains("Secure"),
        "reached over plain HTTP: {plain}"
    );
}
