//! The audit log: who changed what, newest first, a page at a time. Payload values in it
//! (an edit's old and new values) are shown only to roles that may see payloads.

use super::{OrFailure, Page, Params, State};
use crate::audit::visible_detail;
use crate::auth::{Permission, Session};
use crate::html::{self, esc, time, url};
use axum::Extension;
use axum::response::{Html, IntoResponse};
use postroom_core::AuditEntry;
use std::fmt::Write;

/// Entries on one page.
const PAGE: usize = 100;

/// Rows of audit `entries` as `s` may see them: with the target when `with_target`.
pub(crate) fn rows(s: &Session, entries: &[AuditEntry], with_target: bool) -> String {
    let payloads = s.allows(Permission::ViewPayload);
    let mut out = String::new();
    for e in entries {
        let target = if !with_target {
            String::new()
        } else if e.action.starts_with("redrive") {
            format!(
                r#"<td><a href="/runs/{t}">{t}</a></td>"#,
                t = esc(&e.target)
            )
        } else {
            format!("<td>{}</td>", esc(&e.target))
        };
        let _ = write!(
            out,
            r#"<tr class="entry"><td>{}</td><td class="actor">{}</td><td class="action">{}</td>{target}<td><code>{}</code></td></tr>"#,
            time(e.at),
            esc(&e.actor),
            esc(&e.action),
            esc(&visible_detail(&e.detail, payloads).to_string()),
        );
    }
    out
}

pub(crate) async fn show(state: State, Extension(s): Extension<Session>, p: Params) -> Page {
    let before = p.get("before").and_then(|b| b.parse::<i64>().ok());
    let target = p.get("target");
    let mut entries = state
        .parking
        .lot()
        .audit_page(target, before, PAGE + 1)
        .await
        .or_failure(&s)?;
    let more = entries.len() > PAGE;
    entries.truncate(PAGE);
    let mut table = String::from(
        r#"<table class="audit" id="audit"><thead><tr><th>When</th><th>Who</th><th>What</th><th>On</th><th>Details</th></tr></thead><tbody>"#,
    );
    table.push_str(&rows(&s, &entries, true));
    table.push_str("</tbody></table>");
    let mut pager = String::new();
    if before.is_some() {
        let _ = write!(
            pager,
            r#"<a href="/audit{}" id="audit-newest">newest</a> "#,
            target.map_or(String::new(), |t| format!("?target={}", url(t)))
        );
    }
    if let (true, Some(last)) = (more, entries.last()) {
        let _ = write!(
            pager,
            r#"<a href="/audit?before={}{}" id="audit-older">older</a>"#,
            last.id,
            target.map_or(String::new(), |t| format!("&amp;target={}", url(t)))
        );
    }
    let note = if s.allows(Permission::ViewPayload) {
        ""
    } else {
        r#"<p class="note">Payload values in the audit are shown only to roles that may see payloads.</p>"#
    };
    let body = format!(r#"{note}{table}<p class="pager">{pager}</p>"#);
    Ok(Html(html::page("Audit", &s, &body)).into_response())
}
