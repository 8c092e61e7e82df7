//! DNS rebinding: a page on another host name that resolves to 127.0.0.1 reaches a console
//! without auth on loopback as if it were its own origin. The console answers only to its own
//! names (the listen address, loopback, or names it is given), and refuses POSTs whose
//! `Origin` is another site's.

use crate::common::agent::Agent;
use crate::common::webdriver::Browser;
use crate::common::{CONSUMER, parked, serve, serve_to_users, serve_with, users};
use crate::{first_id, port_of};
use postroom_console::Auth;
use postroom_core::{ParkingArchive, ParkingFilter, ParkingQuery};
use reqwest::StatusCode;

async fn archived(store: &postroom_sqlite::SqliteStore) -> u64 {
    store
        .count_parked(&ParkingQuery {
            archived: true,
            filter: ParkingFilter {
                include_redriven: true,
                ..ParkingFilter::default()
            },
            ..ParkingQuery::default()
        })
        .await
        .unwrap()
}

/// What an attacker's script does once its host name resolves to the console: read a CSRF
/// token from a page, then archive `sel` with it. Returns what happened, in words.
fn attack(sel: &str) -> String {
    format!(
        r#"return fetch('/parking').then(r => r.text()).then(t => {{
  const m = t.match(/name="csrf" value="([^"]+)"/);
  if (!m) return 'no token';
  return fetch('/archive', {{method: 'POST',
    headers: {{'content-type': 'application/x-www-form-urlencoded'}},
    body: 'sel=' + encodeURIComponent('{sel}') + '&csrf=' + m[1]}}).then(r => 'posted: ' + r.status);
}}).catch(e => 'failed: ' + e)"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_whose_host_name_rebinds_to_loopback_cannot_act_on_a_console_without_auth() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve(&p.store, Auth::Disabled).await;
    let sel = format!("{} {CONSUMER}", first_id(&p.store).await);
    let b = Browser::start_with(&["--host-resolver-rules=MAP attacker.example 127.0.0.1"]).await;

    b.goto(&format!(
        "http://attacker.example:{}/parking",
        port_of(&base)
    ))
    .await;
    let outcome = b.execute(&attack(&sel)).await;
    assert_eq!(
        archived(&p.store).await,
        0,
        "a page on attacker.example archived a message ({outcome})"
    );
    assert_eq!(
        outcome.as_str(),
        Some("no token"),
        "the console gave attacker.example a page"
    );

    // The same script on the console's own address does archive: the check can fail.
    b.goto(&format!("{base}/parking")).await;
    let outcome = b.execute(&attack(&sel)).await;
    assert_eq!(archived(&p.store).await, 1, "{outcome}");
    b.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_for_another_host_and_posts_from_another_origin_are_refused() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve(&p.store, Auth::Disabled).await;
    let port = port_of(&base);
    let mut foreign = Agent::new(&base).with_header("host", &format!("attacker.example:{port}"));
    let (status, page, _) = foreign.get("/parking").await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "served to attacker.example: {page}"
    );
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let mut own = Agent::new(&base).with_header("host", &host);
        let (status, _, _) = own.get("/parking").await;
        assert_eq!(status, StatusCode::OK, "Host {host}");
    }

    // With or without auth, a POST carrying a valid token from another origin is refused.
    let (with_users, _stop_users) = serve_to_users(&p.store).await;
    for base in [base.as_str(), with_users.as_str()] {
        for (origin, want) in [
            ("http://attacker.example", StatusCode::FORBIDDEN),
            ("null", StatusCode::FORBIDDEN),
            (base, StatusCode::SEE_OTHER),
        ] {
            let mut a = Agent::new(base);
            if base == with_users {
                a.login("admin", crate::common::PASSWORD).await;
            } else {
                a.get("/parking").await;
            }
            a.add_header("origin", origin);
            let (status, _, _) = a.post("/purge", &[], true).await;
            assert_eq!(status, want, "a POST from {origin} to {base}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_given_its_host_name_answers_to_it_and_refuses_others_even_with_users() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve_with(&p.store, Auth::Users(users()), |c| {
        c.allowed_hosts(vec!["Console.Internal".into()])
    })
    .await;
    let port = port_of(&base);
    for (host, want) in [
        (format!("console.internal:{port}"), StatusCode::SEE_OTHER),
        ("console.internal".to_string(), StatusCode::SEE_OTHER),
        (format!("127.0.0.1:{port}"), StatusCode::SEE_OTHER),
        (format!("attacker.example:{port}"), StatusCode::FORBIDDEN),
    ] {
        let (status, page, _) = Agent::new(&base)
            .with_header("host", &host)
            .get("/parking")
            .await;
        assert_eq!(status, want, "Host {host}: {page}");
    }
    // A proxy in front that rewrites Host: a POST from the configured name is accepted.
    let mut a = Agent::new(&base);
    a.login("admin", crate::common::PASSWORD).await;
    a.add_header("origin", "https://console.internal");
    let (status, _, _) = a.post("/purge", &[], true).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
}
