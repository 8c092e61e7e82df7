//! What one request can write is bounded: a refused login records the typed name once and cut
//! short, a form far larger than any form needs is refused before it is read, and the audit
//! is shown a page at a time.

use crate::common::agent::Agent;
use crate::common::{logged_in, parked, serve_to_users};
use postroom_core::{AuditEntry, AuditLog};
use reqwest::StatusCode;

/// A login refused for a typed name of `chars` characters on a fresh console: the answer's
/// status and the audit entries written.
async fn login_with_a_name_of(chars: usize) -> (StatusCode, Vec<AuditEntry>) {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let mut a = Agent::new(&base);
    a.get("/login").await;
    let name = "x".repeat(chars);
    let (status, _, _) = a
        .post(
            "/login",
            &[("username", &name), ("password", "wrong")],
            true,
        )
        .await;
    (status, p.store.audit_entries(None, 10).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_writes_the_typed_name_once_and_cut_short() {
    let (status, audit) = login_with_a_name_of(200_000).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let refused: Vec<&AuditEntry> = audit
        .iter()
        .filter(|e| e.action == "login.refused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    let written =
        refused[0].actor.len() + refused[0].target.len() + refused[0].detail.to_string().len();
    assert!(
        written < 1024,
        "one refused login wrote {written} bytes to the audit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_far_larger_than_any_form_needs_is_refused_unread_and_writes_nothing() {
    let (status, audit) = login_with_a_name_of(1_900_000).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(audit.is_empty(), "{} audit entries written", audit.len());
}

/// The `href` of the element with id `id` in `page`.
fn href_of(page: &str, id: &str) -> Option<String> {
    let at = page.find(&format!(r#"id="{id}""#))?;
    let tag_start = page[..at].rfind('<')?;
    let tag = &page[tag_start..at + page[at..].find('>')?];
    let href = tag.split(r#"href=""#).nth(1)?.split('"').next()?;
    Some(href.replace("&amp;", "&"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_is_shown_a_page_at_a_time() {
    let p = parked(1, 0, 0).await;
    for i in 0..250 {
        p.store
            .append_audit(&AuditEntry {
                id: 0,
                at: chrono::Utc::now(),
                actor: "script".into(),
                action: "archive".into(),
                target: format!("entry-{i}"),
                detail: serde_json::json!({"n": i}),
            })
            .await
            .unwrap();
    }
    let (base, _stop) = serve_to_users(&p.store).await;
    // Logging in adds one entry: 251 in all.
    let mut admin = logged_in(&base, "admin").await;
    let mut seen = Vec::new();
    let mut path = "/audit".to_string();
    loop {
        let (status, page, _) = admin.get(&path).await;
        assert_eq!(status, StatusCode::OK);
        seen.push(page.matches(r#"<tr class="entry">"#).count());
        match href_of(&page, "audit-older") {
            Some(next) => path = next,
            None => break,
        }
        assert!(seen.len() < 10, "pages without end: {seen:?}");
    }
    assert_eq!(seen, [100, 100, 51], "entries per page");
}
