//! The audit log: who changed what, newest first.

use super::{OrFailure, Page, Params, State};
use crate::auth::Session;
use crate::html::{self, esc, time};
use axum::Extension;
use axum::response::{Html, IntoResponse};
use std::fmt::Write;

pub(crate) async fn show(state: State, Extension(s): Extension<Session>, p: Params) -> Page {
    let entries = state
        .parking
        .lot()
        .audit_entries(p.get("target"), 500)
        .await
        .or_failure(&s)?;
    let mut table = String::from(
        r#"<table class="audit" id="audit"><thead><tr><th>When</th><th>Who</th><th>What</th><th>On</th><th>Details</th></tr></thead><tbody>"#,
    );
    for e in &entries {
        let target = if e.action.starts_with("redrive") {
            format!(r#"<a href="/runs/{t}">{t}</a>"#, t = esc(&e.target))
        } else {
            esc(&e.target)
        };
        let _ = write!(
            table,
            r#"<tr class="entry"><td>{}</td><td class="actor">{}</td><td class="action">{}</td><td>{target}</td><td><code>{}</code></td></tr>"#,
            time(e.at),
            esc(&e.actor),
            esc(&e.action),
            esc(&e.detail.to_string()),
        );
    }
    table.push_str("</tbody></table>");
    Ok(Html(html::page("Audit", &s, &table)).into_response())
}
