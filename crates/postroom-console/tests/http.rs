//! The console over HTTP without a browser: login, roles, CSRF, payload hiding, archive and
//! purge, edit-and-redrive, health and metrics. Each guard has a test that fails when the
//! guard is broken.

mod common;

use common::agent::Agent;
use common::{
    CONSUMER, PASSWORD, SECRET, logged_in, parked, serve, serve_to_users, wait_for,
    wait_for_run_end,
};
use postroom_console::Auth;
use postroom_core::{AuditLog, ParkingArchive, ParkingFilter, ParkingStore};
use reqwest::StatusCode;
use std::time::Duration;

async fn first_id(store: &postroom_sqlite::SqliteStore) -> String {
    ParkingStore::search(store, &ParkingFilter::default(), 1)
        .await
        .unwrap()[0]
        .message_id
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_need_a_login_and_a_wrong_password_is_refused() {
    let p = parked(2, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let mut a = Agent::new(&base);
    let (status, _, location) = a.get("/parking").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location.as_deref(), Some("/login"));
    let cookie = a.cookie().expect("a session cookie").to_string();
    a.get("/login").await;
    let (status, body, _) = a
        .post(
            "/login",
            &[("username", "operator"), ("password", "wrong")],
            true,
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("wrong password"));
    let (status, _, location) = a.get("/parking").await;
    assert_eq!(
        (status, location.as_deref()),
        (StatusCode::SEE_OTHER, Some("/login"))
    );
    a.login("operator", PASSWORD).await;
    assert_ne!(
        a.cookie().as_deref(),
        Some(cookie.as_str()),
        "login replaces the session id"
    );
    let (status, body, _) = a.get("/parking").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"<span id="count">2</span>"#), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookies_are_http_only_and_same_site_strict() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{base}/login"))
        .send()
        .await
        .unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_without_the_csrf_token_is_refused() {
    let p = parked(2, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let mut a = Agent::new(&base);
    // Even the login form needs the token.
    a.get("/login").await;
    let (status, _, _) = a
        .post(
            "/login",
            &[("username", "operator"), ("password", PASSWORD)],
            false,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    a.login("operator", PASSWORD).await;
    let id = first_id(&p.store).await;
    let sel = format!("{id} {CONSUMER}");
    let (status, body, _) = a
        .post("/redrive/start", &[("sel", &sel), ("rate", "5")], false)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("CSRF"));
    let (status, _, _) = a
        .post(
            "/redrive/start",
            &[("sel", &sel), ("rate", "5"), ("csrf", "forged")],
            false,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        p.store.redrive_runs(10).await.unwrap().is_empty(),
        "nothing started"
    );
    // The same request with the token goes through.
    let (status, _, location) = a
        .post("/redrive/start", &[("sel", &sel), ("rate", "5")], true)
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.unwrap().starts_with("/runs/"));
    assert_eq!(p.store.redrive_runs(10).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_no_payload_and_cannot_redrive_or_archive() {
    let p = parked(2, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let id = first_id(&p.store).await;
    let sel = format!("{id} {CONSUMER}");

    let mut viewer = logged_in(&base, "viewer").await;
    let (status, page, _) = viewer.get(&format!("/messages/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains(SECRET), "a viewer saw the payload");
    assert!(page.contains("payload-hidden"));
    assert!(
        !page.contains("Dry-run redrive"),
        "no redrive button for a viewer"
    );
    for (path, form) in [
        ("/redrive/preview", vec![("sel", sel.as_str())]),
        ("/redrive/start", vec![("sel", sel.as_str()), ("rate", "5")]),
        ("/archive", vec![("sel", sel.as_str())]),
        ("/purge", vec![]),
    ] {
        let (status, _, _) = viewer.post(path, &form, true).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "viewer POST {path}");
    }
    assert!(p.store.redrive_runs(10).await.unwrap().is_empty());

    let mut operator = logged_in(&base, "operator").await;
    let (_, page, _) = operator.get(&format!("/messages/{id}")).await;
    assert!(page.contains(SECRET), "an operator sees the payload");
    // Editing a payload is an admin's permission.
    let (status, _, _) = operator.get(&format!("/messages/{id}/edit")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_hides_purge_deletes_after_retention_and_both_are_audited() {
    let p = parked(3, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let id = first_id(&p.store).await;
    let mut admin = logged_in(&base, "admin").await;
    let (status, _, _) = admin
        .post("/archive", &[("sel", &format!("{id} {CONSUMER}"))], true)
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (_, page, _) = admin.get("/parking").await;
    assert!(
        page.contains(r#"<span id="count">2</span>"#),
        "archived copy hidden"
    );
    let (_, page, _) = admin.get("/archive").await;
    assert!(page.contains(r#"<span id="archived-count">1</span>"#));
    // Retention has not ended: purge deletes nothing.
    admin.post("/purge", &[], true).await;
    assert_eq!(p.store.get(id.parse().unwrap()).await.unwrap().len(), 1);
    // Once it has, the copy goes.
    let past = chrono::Utc::now() - chrono::Duration::days(1);
    p.store
        .archive_parked(&[(CONSUMER.into(), id.parse().unwrap())], "admin", past)
        .await
        .unwrap();
    admin.post("/purge", &[], true).await;
    assert!(p.store.get(id.parse().unwrap()).await.unwrap().is_empty());
    let audit = p.store.audit_entries(None, 50).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|e| e.action.as_str()).collect();
    assert!(
        actions.contains(&"archive") && actions.contains(&"purge"),
        "{actions:?}"
    );
    let purge = audit
        .iter()
        .find(|e| e.action == "purge" && e.detail["purged"] == 1);
    assert_eq!(purge.map(|e| e.actor.as_str()), Some("admin"));
}

/// Submit `body` as the edited payload of message `id` of [`CONSUMER`].
async fn post_edit(
    a: &mut Agent,
    id: &str,
    body: &serde_json::Value,
) -> (StatusCode, String, Option<String>) {
    a.post(
        &format!("/messages/{id}/edit"),
        &[("consumer", CONSUMER), ("body", &body.to_string())],
        true,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_and_redrive_keeps_the_id_and_audits_the_diff() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let id = first_id(&p.store).await;
    let parked = p.store.get(id.parse().unwrap()).await.unwrap().remove(0);
    let mut body: serde_json::Value = serde_json::from_slice(&parked.body).unwrap();
    let mut admin = logged_in(&base, "admin").await;
    admin
        .get(&format!("/messages/{id}/edit?consumer={CONSUMER}"))
        .await;
    // Changing the id is refused.
    let mut other = body.clone();
    other["id"] = serde_json::Value::String(postroom_core::MessageId::new().to_string());
    let (status, page, _) = post_edit(&mut admin, &id, &other).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("message id must stay"));
    body["data"]["sku"] = "A-9".into();
    let (status, _, location) = post_edit(&mut admin, &id, &body).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let run_id = location.unwrap().trim_start_matches("/runs/").to_string();
    let store = p.store.clone();
    wait_for(
        Duration::from_secs(30),
        "the edited copy to be sent",
        async || {
            store
                .redrive_run(&run_id)
                .await
                .unwrap()
                .is_some_and(|r| r.done == 1)
        },
    )
    .await;
    // The queue holds the edited copy under the same id.
    let (queued_id, queued_body): (String, Vec<u8>) =
        sqlx::query_as("SELECT message_id, body FROM postroom_queue WHERE consumer = ?")
            .bind(CONSUMER)
            .fetch_one(p.store.pool())
            .await
            .unwrap();
    assert_eq!(queued_id, id);
    let queued: serde_json::Value = serde_json::from_slice(&queued_body).unwrap();
    assert_eq!(queued["data"]["sku"], "A-9");
    let audit = p.store.audit_entries(Some(&run_id), 10).await.unwrap();
    let start = audit.iter().find(|e| e.action == "redrive.start").unwrap();
    assert_eq!(start.actor, "admin");
    assert_eq!(
        start.detail["edit"]["diff"],
        serde_json::json!([{"path": "/data/sku", "before": null, "after": "A-9"}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics() {
    let p = parked(2, 1, 1).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let get = |path: &'static str| {
        let base = base.clone();
        async move {
            let r = reqwest::get(format!("{base}{path}")).await.unwrap();
            (r.status(), r.text().await.unwrap())
        }
    };
    assert_eq!(get("/healthz").await.0, StatusCode::OK);
    assert_eq!(get("/readyz").await.0, StatusCode::OK);
    postroom_testkit::metrics::assert_lists_once_sampled(
        async || get("/metrics").await.1,
        "a pipeline sample in /metrics",
        r#"postroom_console_parked_messages{consumer="inventory"} 3"#,
        &[
            postroom_core::metrics::PARKED,
            postroom_core::metrics::HANDLED,
            postroom_core::metrics::READY,
            postroom_core::metrics::OUTBOX_PENDING,
            postroom_console::metrics::RELAY_LAG,
        ],
    )
    .await;
}

/// An operator logged in to a console over `store`, and the key of the first cause group
/// (keep the switch: dropping it stops the console).
async fn operator_at_the_first_group(
    store: &postroom_sqlite::SqliteStore,
) -> (Agent, String, tokio::sync::watch::Sender<bool>) {
    let (base, stop) = serve_to_users(store).await;
    let mut a = logged_in(&base, "operator").await;
    let key = a.group_key().await;
    (a, key, stop)
}

async fn run_state(store: &postroom_sqlite::SqliteStore, run_id: &str) -> postroom_core::RunState {
    store.run_control(run_id).await.unwrap().unwrap().state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_run_pauses_resumes_and_warns_of_messages_that_joined_the_group() {
    use postroom_core::RunState;
    let p = parked(4, 0, 0).await;
    let (mut a, key, _stop) = operator_at_the_first_group(&p.store).await;
    a.post("/redrive/preview", &[("group", &key)], true).await;
    // One message every two seconds: the pause comes long before the last.
    let (run, run_id) = a.start_run(&key, "0.5").await;
    a.get(&run).await;
    let (status, _, _) = a.post(&format!("{run}/pause"), &[], true).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(run_state(&p.store, &run_id).await, RunState::Paused);
    // A message with the same cause is parked while the run is paused.
    let mut newcomer = ParkingStore::search(&p.store, &ParkingFilter::default(), 1)
        .await
        .unwrap()[0]
        .clone();
    newcomer.message_id = postroom_core::MessageId::new();
    newcomer.error_message = "order 999 has no sku".into();
    newcomer.parked_at = chrono::Utc::now();
    p.store.park(&newcomer).await.unwrap();
    let (_, progress, _) = a.get(&format!("{run}/progress")).await;
    let progress: serde_json::Value = serde_json::from_str(&progress).unwrap();
    assert_eq!(progress["state"], "paused");
    assert_eq!(progress["joined"], 1, "{progress}");
    assert_eq!(progress["total"], 4, "the newcomer is not part of the run");
    a.post(&format!("{run}/resume"), &[], true).await;
    wait_for_run_end(&p.store, &run_id).await;
    assert_eq!(run_state(&p.store, &run_id).await, RunState::Finished);
    let r = p.store.redrive_run(&run_id).await.unwrap().unwrap();
    assert_eq!((r.done, r.total), (4, 4));
    let (_, page, _) = a.get(&run).await;
    assert!(
        page.contains(r#"<span id="run-joined-n">1</span>"#),
        "the warning shows"
    );
    let audit = p.store.audit_entries(Some(&run_id), 10).await.unwrap();
    let actions: Vec<&str> = audit.iter().rev().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "redrive.start",
            "redrive.pause",
            "redrive.resume",
            "redrive.end"
        ]
    );
    assert_eq!(audit[0].detail["joined"], 1);
    // The newcomer still waits in the parking lot.
    assert_eq!(
        p.store.get(newcomer.message_id).await.unwrap()[0].status,
        postroom_core::ParkedStatus::Parked
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_stops_and_cannot_be_resumed() {
    use postroom_core::RunState;
    let p = parked(5, 0, 0).await;
    let (mut a, key, _stop) = operator_at_the_first_group(&p.store).await;
    // One message every five seconds: the cancel comes long before the last.
    let (run, run_id) = a.start_run(&key, "0.2").await;
    a.get(&run).await;
    a.post(&format!("{run}/cancel"), &[], true).await;
    wait_for_run_end(&p.store, &run_id).await;
    assert_eq!(run_state(&p.store, &run_id).await, RunState::Cancelled);
    let r = p.store.redrive_run(&run_id).await.unwrap().unwrap();
    assert!(
        r.done < r.total,
        "cancelled before the end: {}/{}",
        r.done,
        r.total
    );
    let (status, _, _) = a.post(&format!("{run}/resume"), &[], true).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a cancelled run stays cancelled"
    );
    assert_eq!(run_state(&p.store, &run_id).await, RunState::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_users_on_loopback_everyone_is_the_local_admin_and_csrf_still_applies() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve(&p.store, Auth::Disabled).await;
    let mut a = Agent::new(&base);
    let (status, page, _) = a.get("/parking").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("local (admin)"));
    let (status, _, _) = a.post("/purge", &[], false).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = a.post("/purge", &[], true).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_tokens_authenticate_scripts_with_their_role() {
    let p = parked(1, 0, 0).await;
    let h = |t: &str| postroom_console::auth::hash_password(t).unwrap();
    let users = postroom_console::Users::parse(&format!(
        "token reader viewer {}\ntoken bot operator {}",
        h("viewer-token"),
        h("operator-token")
    ))
    .unwrap();
    let (base, _stop) = serve(&p.store, Auth::Users(users)).await;
    let id = first_id(&p.store).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let call = |token: &'static str, path: &'static str, post: bool| {
        let client = client.clone();
        let url = format!("{base}{path}");
        let form = format!("rate=5&sel={id}+{CONSUMER}");
        async move {
            let req = if post {
                client
                    .post(url)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(form)
            } else {
                client.get(url)
            };
            req.bearer_auth(token).send().await.unwrap().status()
        }
    };
    assert_eq!(
        call("viewer-token", "/parking", false).await,
        StatusCode::OK
    );
    assert_eq!(
        call("wrong-token", "/parking", false).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call("viewer-token", "/redrive/start", true).await,
        StatusCode::FORBIDDEN
    );
    assert!(p.store.redrive_runs(10).await.unwrap().is_empty());
    assert_eq!(
        call("operator-token", "/redrive/start", true).await,
        StatusCode::SEE_OTHER
    );
    let runs = p.store.redrive_runs(10).await.unwrap();
    assert_eq!((runs.len(), runs[0].operator.as_str()), (1, "bot"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_page_that_shows_the_run_ended_shows_its_end_in_the_audit() {
    // The run page reloads itself once when the run turns final and then stops polling:
    // the page rendered with the run final must already hold the end in its audit.
    let p = parked(3, 0, 0).await;
    let (mut a, key, _stop) = operator_at_the_first_group(&p.store).await;
    let (run, _) = a.start_run(&key, "100").await;
    let start = std::time::Instant::now();
    loop {
        let (_, page, _) = a.get(&run).await;
        if page.contains(r#"data-final="true""#) {
            assert!(
                page.contains("redrive.end"),
                "the page shows the run ended without its end in the audit:\n{page}"
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the run did not end"
        );
    }
}

/// The dry run and the run judge every message alike: one its consumer already applied (its
/// inbox holds the id: the commit went through though the outcome looked unknown) is counted
/// as skipped before the run, skipped by it, named on the run's page, and stays parked; the
/// rest go back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_its_consumer_already_applied_is_shown_skipped_before_and_after_the_run() {
    use postroom_core::ParkedStatus;
    let p = parked(3, 0, 0).await;
    let ids: Vec<_> = ParkingStore::search(&p.store, &ParkingFilter::default(), 3)
        .await
        .unwrap()
        .iter()
        .map(|m| m.message_id)
        .collect();
    assert_eq!(ids.len(), 3);
    let applied = ids[0];
    let mut conn = p.store.pool().acquire().await.unwrap();
    assert!(
        postroom_sqlite::inbox::claim(&mut conn, CONSUMER, applied)
            .await
            .unwrap()
    );
    drop(conn);
    let (mut a, key, _stop) = operator_at_the_first_group(&p.store).await;
    let (_, page, _) = a.post("/redrive/preview", &[("group", &key)], true).await;
    assert!(
        page.contains(r#"<strong id="preview-count">2</strong>"#),
        "two would go back: {page}"
    );
    assert!(
        page.contains(r#"<strong id="preview-skipped-n">1</strong>"#),
        "one would be skipped: {page}"
    );
    assert!(page.contains("already applied"), "{page}");
    let (run, run_id) = a.start_run(&key, "100").await;
    wait_for_run_end(&p.store, &run_id).await;
    let (_, page, _) = a.get(&run).await;
    assert!(
        page.contains(r#"<span id="run-skipped-n">1</span>"#),
        "the run's page names the skip: {page}"
    );
    assert_eq!(
        p.store.get(applied).await.unwrap()[0].status,
        ParkedStatus::Parked
    );
    for id in &ids[1..] {
        assert_eq!(
            p.store.get(*id).await.unwrap()[0].status,
            ParkedStatus::Redriven
        );
    }
}
