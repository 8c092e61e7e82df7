//! Anonymous visitors hold no server-side state: the login form's CSRF token lives in a
//! signed cookie, so a flood of cookie-less requests cannot push a logged-in session out.

use crate::common::agent::{Agent, csrf_in};
use crate::common::{PASSWORD, logged_in, parked, serve_to_users};
use futures::StreamExt;
use reqwest::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_cookieless_requests_do_not_log_an_operator_out() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let mut operator = logged_in(&base, "operator").await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = format!("{base}/login");
    futures::stream::iter(0..10_400)
        .for_each_concurrent(16, |_| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                let r = client.get(url).send().await.expect("GET /login");
                assert_eq!(r.status(), StatusCode::OK);
            }
        })
        .await;
    let (status, _, location) = operator.get("/parking").await;
    assert_eq!(
        (status, location.as_deref()),
        (StatusCode::OK, None),
        "the operator was logged out by anonymous visitors"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_forms_token_works_only_with_the_cookie_it_came_with() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let mut first = Agent::new(&base);
    let (_, page, _) = first.get("/login").await;
    let token = csrf_in(&page).expect("a token in the login form");
    let mut second = Agent::new(&base);
    second.get("/login").await;
    second.csrf = Some(token);
    let (status, _, _) = second
        .post(
            "/login",
            &[("username", "operator"), ("password", PASSWORD)],
            true,
        )
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "another visitor's token was taken"
    );
    let (status, _, _) = first
        .post(
            "/login",
            &[("username", "operator"), ("password", PASSWORD)],
            true,
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "its own token is taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logged_out_session_is_worth_nothing_afterwards() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let mut operator = logged_in(&base, "operator").await;
    let session = operator.cookie().expect("a session cookie");
    let (status, _, _) = operator.post("/logout", &[], true).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let mut replay = Agent::new(&base).with_header("cookie", &session);
    let (status, _, location) = replay.get("/parking").await;
    assert_eq!(
        (status, location.as_deref()),
        (StatusCode::SEE_OTHER, Some("/login")),
        "the session outlived its logout"
    );
}
