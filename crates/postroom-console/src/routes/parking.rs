//! Parking lot pages: the filtered listing, failure groups, one group, the archive, and the
//! archive and purge actions.

use super::selection::{GROUP_SCAN, find_group, query_of, query_string, selection_of};
use super::{OrFailure, Page, Params, State, failure, require};
use crate::auth::{Permission, Session};
use crate::groups::group as group_rows;
use crate::html::{self, esc, time, url};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::Utc;
use postroom_core::{ParkedMessage, ParkingQuery, message::truncate};
use serde_json::json;
use std::fmt::Write;

const PAGE: usize = 50;

/// What a reader who may not see payloads sees instead of an error text: a handler's own
/// message may quote the payload.
pub(crate) const ERROR_HIDDEN: &str = "error text hidden";

/// The error text of `m` for `s`: whole for roles that may see payloads, else hidden.
pub(crate) fn error_text(s: &Session, text: &str) -> String {
    if s.allows(Permission::ViewPayload) {
        text.to_string()
    } else {
        ERROR_HIDDEN.to_string()
    }
}

/// The listing query of `p`, refused for a reader who may not search error texts (a search
/// of them would tell what they hold).
pub(crate) fn query_for(s: &Session, p: &Params) -> Result<ParkingQuery, Response> {
    if p.get("q").is_some() && !s.allows(Permission::ViewPayload) {
        metrics::counter!(crate::metrics::REFUSED, "reason" => "role").increment(1);
        return Err(super::refusal(
            s,
            StatusCode::FORBIDDEN,
            "Not allowed",
            "Your role may not search error texts: they may quote message payloads.",
        ));
    }
    query_of(p).or_failure(s)
}

fn filter_form(s: &Session, p: &Params) -> String {
    let v = |k: &str| esc(p.get(k).unwrap_or(""));
    let class = p.get("class").unwrap_or("");
    let opt = |value: &str, label: &str, current: &str| {
        format!(
            r#"<option value="{value}"{}>{label}</option>"#,
            if value == current { " selected" } else { "" }
        )
    };
    let status = p.get("status").unwrap_or("");
    format!(
        r#"<form method="get" class="filters" id="filters">
<label>Type <input name="type" id="f-type" value="{}"></label>
<label>Consumer <input name="consumer" id="f-consumer" value="{}"></label>
<label>Class <select name="class" id="f-class">{}{}{}{}</select></label>
<label>Code <input name="code" id="f-code" value="{}"></label>
<label>Parked from <input name="since" id="f-since" placeholder="2026-01-31T12:00" value="{}"></label>
<label>until <input name="until" id="f-until" placeholder="UTC" value="{}"></label>
{}
<label>Status <select name="status" id="f-status">{}{}</select></label>
<button type="submit" id="apply-filters">Filter</button></form>"#,
        v("type"),
        v("consumer"),
        opt("", "any", class),
        opt("transient", "transient", class),
        opt("permanent", "permanent", class),
        opt("unknown", "unknown", class),
        v("code"),
        v("since"),
        v("until"),
        if s.allows(Permission::ViewPayload) {
            format!(
                r#"<label>Error text <input name="q" id="f-q" value="{}"></label>"#,
                v("q")
            )
        } else {
            String::new()
        },
        opt("", "waiting", status),
        opt("all", "with redriven", status),
    )
}

/// Table rows of parked copies as `s` may see them, with a checkbox each when `select`.
pub(crate) fn rows(s: &Session, ms: &[ParkedMessage], select: bool) -> String {
    let mut out = String::from(
        r#"<table class="messages" id="messages"><thead><tr><th></th><th>Parked at</th><th>Consumer</th><th>Type</th><th>Class</th><th>Code</th><th>Error</th><th>Att.</th><th>Status</th></tr></thead><tbody>"#,
    );
    for m in ms {
        let check = if select {
            format!(
                r#"<input type="checkbox" name="sel" class="sel" value="{} {}">"#,
                m.message_id,
                esc(&m.consumer)
            )
        } else {
            String::new()
        };
        let _ = write!(
            out,
            r#"<tr><td>{check}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><a href="/messages/{}">{}</a></td><td>{}</td><td>{}</td></tr>"#,
            time(m.parked_at),
            esc(&m.consumer),
            esc(m.message_type.as_deref().unwrap_or("?")),
            m.error_class.as_str(),
            esc(&m.error_code),
            m.message_id,
            esc(&truncate(&error_text(s, &m.error_message), 120)),
            m.attempts,
            m.status.as_str(),
        );
    }
    out.push_str("</tbody></table>");
    out
}

fn actions(s: &Session) -> String {
    let mut out = String::new();
    if s.allows(Permission::Redrive) {
        out.push_str(r#"<button type="submit" formaction="/redrive/preview" id="preview-selected">Dry-run redrive of selected</button> "#);
    }
    if s.allows(Permission::Archive) {
        out.push_str(
            r#"<button type="submit" formaction="/archive" id="archive-selected">Archive selected</button>"#,
        );
    }
    out
}

pub(crate) async fn list(state: State, Extension(s): Extension<Session>, p: Params) -> Page {
    let q = query_for(&s, &p)?;
    let offset: usize = p.get("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
    let (total, ms) = tokio::try_join!(
        state.parking.lot().count_parked(&q),
        state.parking.lot().query_parked(&q, offset, PAGE)
    )
    .or_failure(&s)?;
    let qs = query_string(&p);
    let mut pager = String::new();
    if offset > 0 {
        let _ = write!(
            pager,
            r#"<a href="/parking?{qs}&offset={}">newer</a> "#,
            offset.saturating_sub(PAGE)
        );
    }
    if (offset + ms.len()) < total as usize {
        let _ = write!(
            pager,
            r#"<a href="/parking?{qs}&offset={}">older</a>"#,
            offset + PAGE
        );
    }
    let body = format!(
        r#"{form}
<p><span id="count">{total}</span> parked message(s) match. <a href="/groups?{qs}" id="to-groups">Group by cause</a></p>
<form method="post" action="/redrive/preview" id="selection">{csrf}
<p class="actions"><label><input type="checkbox" id="select-all"> all on this page</label> {actions}</p>
{table}</form><p class="pager">{pager}</p>"#,
        form = filter_form(&s, &p),
        csrf = html::csrf_field(&s),
        actions = actions(&s),
        table = rows(&s, &ms, true),
    );
    Ok(Html(html::page("Parking lot", &s, &body)).into_response())
}

pub(crate) async fn groups(state: State, Extension(s): Extension<Session>, p: Params) -> Page {
    let q = query_for(&s, &p)?;
    let summaries = state
        .parking
        .lot()
        .parked_summaries(&q, GROUP_SCAN)
        .await
        .or_failure(&s)?;
    let truncated = summaries.len() == GROUP_SCAN;
    let groups = group_rows(&summaries);
    let mut table = String::from(
        r#"<table class="groups" id="groups"><thead><tr><th>Count</th><th>Consumer</th><th>Type</th><th>Class</th><th>Code</th><th>Error (masked)</th><th>First seen</th><th>Last seen</th></tr></thead><tbody>"#,
    );
    for g in &groups {
        let _ = write!(
            table,
            r#"<tr class="group" data-key="{k}"><td class="count">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><a href="/groups/{k}" class="group-link">{}</a></td><td>{}</td><td>{}</td></tr>"#,
            g.count,
            esc(&g.consumer),
            esc(g.message_type.as_deref().unwrap_or("?")),
            g.error_class.as_str(),
            esc(&g.error_code),
            esc(&truncate(&error_text(&s, &g.template), 120)),
            time(g.first_seen),
            time(g.last_seen),
            k = g.key,
        );
    }
    table.push_str("</tbody></table>");
    let note = if truncated {
        format!(
            "<p class=\"warning\">Only the newest {GROUP_SCAN} parked messages were grouped; narrow the filter.</p>"
        )
    } else {
        String::new()
    };
    let body = format!(
        r#"{form}<p><span id="group-count">{}</span> group(s) of <span id="count">{}</span> parked message(s).</p>{note}{table}"#,
        groups.len(),
        summaries.len(),
        form = filter_form(&s, &p).replace(r#"method="get""#, r#"method="get" action="/groups""#),
    );
    Ok(Html(html::page("Failure groups", &s, &body)).into_response())
}

pub(crate) async fn group(
    state: State,
    Extension(s): Extension<Session>,
    Path(key): Path<String>,
) -> Page {
    let g = find_group(&*state.parking, &key).await.or_failure(&s)?;
    let q = ParkingQuery {
        filter: postroom_core::ParkingFilter {
            consumer: Some(g.consumer.clone()),
            ids: g.members.iter().take(PAGE).map(|(_, id)| *id).collect(),
            ..Default::default()
        },
        ..ParkingQuery::default()
    };
    let ms = state
        .parking
        .lot()
        .query_parked(&q, 0, PAGE)
        .await
        .or_failure(&s)?;
    let mut action = String::new();
    if s.allows(Permission::Redrive) {
        let _ = write!(
            action,
            r#"<form method="post" action="/redrive/preview" class="inline">{}<input type="hidden" name="group" value="{}"><button type="submit" id="preview-group">Dry-run redrive of the group</button></form>"#,
            html::csrf_field(&s),
            g.key
        );
    }
    if s.allows(Permission::Archive) {
        let _ = write!(
            action,
            r#" <form method="post" action="/archive" class="inline">{}<input type="hidden" name="group" value="{}"><button type="submit" id="archive-group">Archive the group</button></form>"#,
            html::csrf_field(&s),
            g.key
        );
    }
    let body = format!(
        r#"<dl class="facts">
<dt>Consumer</dt><dd>{}</dd><dt>Type</dt><dd>{}</dd><dt>Class</dt><dd>{}</dd><dt>Code</dt><dd>{}</dd>
<dt>Error</dt><dd id="template">{}</dd><dt>Messages</dt><dd id="group-size">{}</dd>
<dt>First seen</dt><dd>{}</dd><dt>Last seen</dt><dd>{}</dd></dl>
<p class="actions">{action}</p>{}"#,
        esc(&g.consumer),
        esc(g.message_type.as_deref().unwrap_or("?")),
        g.error_class.as_str(),
        esc(&g.error_code),
        esc(&error_text(&s, &g.template)),
        g.count,
        time(g.first_seen),
        time(g.last_seen),
        rows(&s, &ms, false),
    );
    Ok(Html(html::page(&format!("Group {}", g.key), &s, &body)).into_response())
}

pub(crate) async fn archived(state: State, Extension(s): Extension<Session>, p: Params) -> Page {
    let mut q = query_for(&s, &p)?;
    q.archived = true;
    q.filter.include_redriven = true;
    let now = Utc::now();
    let r = tokio::try_join!(
        state.parking.lot().count_parked(&q),
        state.parking.lot().query_parked(&q, 0, PAGE),
        state.parking.lot().purgeable(now)
    );
    let (total, ms, purgeable) = r.or_failure(&s)?;
    let purge = if s.allows(Permission::Purge) {
        format!(
            r#"<form method="post" action="/purge" class="inline">{}<button type="submit" id="purge" {}>Purge {purgeable} message(s) past retention</button></form>"#,
            html::csrf_field(&s),
            if purgeable == 0 { "disabled" } else { "" }
        )
    } else {
        String::new()
    };
    let body = format!(
        r#"<p>Archived messages are hidden from the parking lot and kept for {} days, then purged. <span id="archived-count">{total}</span> archived; {purgeable} past retention. {purge}</p>{}"#,
        state.retention.as_secs() / 86_400,
        rows(&s, &ms, false)
    );
    Ok(Html(html::page("Archive", &s, &body)).into_response())
}

pub(crate) async fn archive(state: State, Extension(s): Extension<Session>, body: Bytes) -> Page {
    require(&s, Permission::Archive)?;
    let p = Params::parse(&body);
    let sel = selection_of(&*state.parking, &p).await.or_failure(&s)?;
    let purge_after = Utc::now()
        + chrono::Duration::from_std(state.retention).unwrap_or(chrono::Duration::days(30));
    let n = state
        .parking
        .lot()
        .archive_parked(&sel.items, s.name(), purge_after)
        .await
        .or_failure(&s)?;
    let ids: Vec<String> = sel
        .items
        .iter()
        .map(|(c, id)| format!("{id} {c}"))
        .collect();
    let target = sel.group_key.clone().unwrap_or_else(|| {
        if ids.len() == 1 {
            ids[0].clone()
        } else {
            format!("{} messages", ids.len())
        }
    });
    if let Err(e) = state
        .audit
        .record(
            s.name(),
            "archive",
            &target,
            json!({"archived": n, "purge_after": purge_after, "group": sel.group_key, "messages": ids}),
        )
        .await
    {
        return Err(failure(&s, &e));
    }
    Ok(Redirect::to(&format!("/archive?done={}", url(&n.to_string()))).into_response())
}

pub(crate) async fn purge(state: State, Extension(s): Extension<Session>) -> Page {
    require(&s, Permission::Purge)?;
    let now = Utc::now();
    let n = state
        .parking
        .lot()
        .purge_archived(now)
        .await
        .or_failure(&s)?;
    if let Err(e) = state
        .audit
        .record(
            s.name(),
            "purge",
            "archive",
            json!({"purged": n, "before": now}),
        )
        .await
    {
        return Err(failure(&s, &e));
    }
    Ok(Redirect::to("/archive").into_response())
}
