//! One parked message: every diagnostic of each copy (one per consumer that parked it), the
//! body only for roles that may see payloads, and edit-and-redrive for those allowed to.

use super::{OrFailure, Page, Params, State, failure, not_found, refusal, require};
use crate::auth::{Permission, Session};
use crate::html::{self, esc, time};
use crate::redrive::{RunPlan, edit};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use postroom_core::{Error, ErrorKind, MessageId, ParkedMessage, ParkingFilter};
use std::collections::HashMap;
use std::fmt::Write;

fn parse_id(s: &Session, id: &str) -> Result<MessageId, Response> {
    id.parse().map_err(|_| {
        failure(
            s,
            &Error::new(ErrorKind::Config, format!("bad message id {id:?}")),
        )
    })
}

/// The body as text for someone allowed to see it.
fn body_text(m: &ParkedMessage) -> String {
    match serde_json::from_slice::<serde_json::Value>(&m.body) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(&m.body).into_owned(),
    }
}

fn copy(s: &Session, m: &ParkedMessage) -> String {
    let opt = |v: &Option<String>| esc(v.as_deref().unwrap_or("—"));
    let mut headers = String::new();
    for (k, v) in &m.headers {
        let _ = write!(headers, "<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(v));
    }
    let body = if s.allows(Permission::ViewPayload) {
        format!(
            r#"<pre class="payload" id="payload">{}</pre>"#,
            esc(&body_text(m))
        )
    } else {
        format!(
            r#"<p class="hidden-payload" id="payload-hidden">Payload hidden ({} bytes): your role may not see message bodies.</p>"#,
            m.body.len()
        )
    };
    let mut actions = String::new();
    let sel = format!("{} {}", m.message_id, esc(&m.consumer));
    if s.allows(Permission::Redrive) {
        let _ = write!(
            actions,
            r#"<form method="post" action="/redrive/preview" class="inline">{}<input type="hidden" name="sel" value="{sel}"><button type="submit" class="preview-one">Dry-run redrive</button></form> "#,
            html::csrf_field(s)
        );
    }
    if s.allows(Permission::Archive) {
        let _ = write!(
            actions,
            r#"<form method="post" action="/archive" class="inline">{}<input type="hidden" name="sel" value="{sel}"><button type="submit" class="archive-one">Archive</button></form> "#,
            html::csrf_field(s)
        );
    }
    if s.allows(Permission::EditRedrive) {
        let _ = write!(
            actions,
            r#"<a href="/messages/{}/edit?consumer={}" class="edit-one">Edit and redrive</a>"#,
            m.message_id,
            html::url(&m.consumer)
        );
    }
    format!(
        r#"<section class="copy"><h2>Parked by {consumer}</h2>
<dl class="facts">
<dt>Message id</dt><dd>{id}</dd><dt>Status</dt><dd class="status">{status}</dd>
<dt>Type</dt><dd>{ty}</dd><dt>Schema version</dt><dd>{sv}</dd>
<dt>Consumer version</dt><dd>{cv}</dd><dt>Attempts</dt><dd>{att}</dd>
<dt>First failure</dt><dd>{ff}</dd><dt>Parked at</dt><dd>{pa}</dd>
<dt>Error class</dt><dd>{class}</dd><dt>Error code</dt><dd>{code}</dd>
<dt>Error</dt><dd class="error-text">{err}</dd>
<dt>Correlation id</dt><dd>{corr}</dd><dt>Trace parent</dt><dd>{trace}</dd>
<dt>Routing key</dt><dd>{rk}</dd><dt>Producer</dt><dd>{prod}</dd><dt>Redriven</dt><dd>{rc} time(s)</dd>
</dl>
<p class="actions">{actions}</p>
<h3>Headers</h3><table class="headers">{headers}</table>
<h3>Payload</h3>{body}</section>"#,
        consumer = esc(&m.consumer),
        id = m.message_id,
        status = m.status.as_str(),
        ty = opt(&m.message_type),
        sv = m.schema_version.map_or("—".to_string(), |v| v.to_string()),
        cv = esc(&m.consumer_version),
        att = m.attempts,
        ff = time(m.first_failure_at),
        pa = time(m.parked_at),
        class = m.error_class.as_str(),
        code = esc(&m.error_code),
        err = esc(&super::parking::error_text(s, &m.error_message)),
        corr = opt(&m.correlation_id),
        trace = opt(&m.traceparent),
        rk = esc(&m.routing_key),
        prod = opt(&m.producer),
        rc = m.redrive_count,
    )
}

pub(crate) async fn show(
    state: State,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
) -> Page {
    let id = parse_id(&s, &id)?;
    let copies = state.parking.store().get(id).await.or_failure(&s)?;
    if copies.is_empty() {
        return Err(failure(&s, &not_found(format!("no parked message {id}"))));
    }
    let body: String = copies.iter().map(|m| copy(&s, m)).collect();
    Ok(Html(html::page(&format!("Message {id}"), &s, &body)).into_response())
}

/// The copy an edit works on, once the session is found allowed to edit and redrive: the
/// message `id` (as the path gives it) parked by `consumer`, or by any consumer without one.
async fn copy_to_edit(
    state: &State,
    s: &Session,
    id: &str,
    consumer: Option<&str>,
) -> Result<ParkedMessage, Response> {
    require(s, Permission::EditRedrive)?;
    let id = parse_id(s, id)?;
    let copies = state.parking.store().get(id).await.or_failure(s)?;
    copies
        .into_iter()
        .find(|m| consumer.is_none_or(|c| c == m.consumer))
        .ok_or_else(|| failure(s, &not_found(format!("no parked message {id}"))))
}

fn edit_page(s: &Session, m: &ParkedMessage, text: &str, error: Option<&str>) -> String {
    let error = error.map_or(String::new(), |e| {
        format!(r#"<p class="error" id="edit-error">{}</p>"#, esc(e))
    });
    html::page(
        &format!("Edit and redrive {}", m.message_id),
        s,
        &format!(
            r#"<p>Fix the payload, then redrive it to <strong>{c}</strong> with the same message id. The change is stored in the audit.</p>{error}
<form method="post" action="/messages/{id}/edit">{csrf}<input type="hidden" name="consumer" value="{c}">
<textarea name="body" id="edit-body" rows="20" cols="100">{text}</textarea>
<p><button type="submit" id="edit-redrive">Redrive the edited copy</button></p></form>"#,
            c = esc(&m.consumer),
            id = m.message_id,
            csrf = html::csrf_field(s),
            text = esc(text),
        ),
    )
}

pub(crate) async fn edit_form(
    state: State,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
    p: Params,
) -> Page {
    let m = copy_to_edit(&state, &s, &id, p.get("consumer")).await?;
    Ok(Html(edit_page(&s, &m, &body_text(&m), None)).into_response())
}

pub(crate) async fn edit_submit(
    state: State,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
    body: Bytes,
) -> Page {
    let p = Params::parse(&body);
    let m = copy_to_edit(&state, &s, &id, p.get("consumer")).await?;
    let text =
        p.0.iter()
            .find(|(k, _)| k == "body")
            .map_or("", |(_, v)| v.as_str());
    // A JSON body is stored compact, as producers write it.
    let edited = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => serde_json::to_vec(&v).unwrap_or_else(|_| text.as_bytes().to_vec()),
        Err(_) => text.as_bytes().to_vec(),
    };
    if let Err(edit::EditRefused(why)) = edit::check(&m.body, &edited) {
        return Err((
            StatusCode::BAD_REQUEST,
            Html(edit_page(&s, &m, text, Some(&why))),
        )
            .into_response());
    }
    let diff = edit::diff(&m.body, &edited);
    let plan = RunPlan {
        filter: ParkingFilter {
            consumer: Some(m.consumer.clone()),
            ids: vec![m.message_id],
            ..ParkingFilter::default()
        },
        limit: 1,
        rate: 1.0,
        group_key: None,
        bodies: HashMap::from([(m.message_id, edited)]),
        detail: serde_json::json!({"message": m.message_id, "consumer": m.consumer, "diff": diff}),
    };
    let run = state.runs.start(s.name(), plan).await.or_failure(&s)?;
    if run.total != 1 {
        return Err(refusal(
            &s,
            StatusCode::CONFLICT,
            "Nothing redriven",
            &format!(
                "Message {} is no longer waiting in the parking lot (run {} selected nothing).",
                m.message_id, run.id
            ),
        ));
    }
    Ok(Redirect::to(&format!("/runs/{}", run.id)).into_response())
}
