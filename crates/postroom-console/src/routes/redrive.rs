//! Redrive pages: the dry run (how many, which consumers, a histogram by type), starting a
//! run at a rate, the list of runs, one run with live progress (polled as JSON), and pause,
//! resume and cancel.

use super::selection::selection_of;
use super::{OrFailure, Page, Params, State, failure, not_found, refusal, require};
use crate::auth::{Permission, Session};
use crate::html::{self, esc, time};
use crate::redrive::{RunAction, RunPlan};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Json, Redirect, Response};
use postroom_core::ParkingFilter;
use postroom_core::parking::redrive::RedriveSkip;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Most messages one run selects.
const MAX_SELECTION: usize = 100_000;
/// Rows listed in a dry run.
const PREVIEW_ROWS: usize = 20;

fn hidden_selection(p: &Params) -> String {
    let mut out = String::new();
    if let Some(g) = p.get("group") {
        let _ = write!(
            out,
            r#"<input type="hidden" name="group" value="{}">"#,
            esc(g)
        );
    }
    for v in p.all("sel") {
        let _ = write!(
            out,
            r#"<input type="hidden" name="sel" value="{}">"#,
            esc(v)
        );
    }
    out
}

pub(crate) async fn preview(state: State, Extension(s): Extension<Session>, body: Bytes) -> Page {
    require(&s, Permission::Redrive)?;
    let p = Params::parse(&body);
    let sel = selection_of(&*state.parking, &p).await.or_failure(&s)?;
    // Exactly what the run will select and skip: the core's dry run over the same filter,
    // judged by the same redriver.
    let redriver = crate::redrive::redriver(&*state.parking, state.parking.publisher());
    let (chosen, skips): (Vec<_>, Vec<_>) = redriver
        .preview_outcomes(&sel.filter, MAX_SELECTION)
        .await
        .or_failure(&s)?
        .into_iter()
        .unzip();
    let skipped = skips.iter().flatten().count();
    let mut by_consumer: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
    for m in &chosen {
        *by_consumer.entry(&m.consumer).or_default() += 1;
        *by_type
            .entry(m.message_type.as_deref().unwrap_or("?"))
            .or_default() += 1;
    }
    let max = by_type.values().copied().max().unwrap_or(1);
    let mut consumers = String::new();
    for (c, n) in &by_consumer {
        let _ = write!(
            consumers,
            r#"<li><span class="consumer">{}</span>: {n}</li>"#,
            esc(c)
        );
    }
    let mut histogram = String::from(r#"<table class="histogram" id="histogram">"#);
    for (t, n) in &by_type {
        let _ = write!(
            histogram,
            r#"<tr><td>{}</td><td><meter min="0" max="{max}" value="{n}"></meter></td><td class="n">{n}</td></tr>"#,
            esc(t)
        );
    }
    histogram.push_str("</table>");
    let rows = super::parking::rows(&s, &chosen[..chosen.len().min(PREVIEW_ROWS)], false);
    let more = if chosen.len() > PREVIEW_ROWS {
        format!("<p>… and {} more.</p>", chosen.len() - PREVIEW_ROWS)
    } else {
        String::new()
    };
    let start = if chosen.is_empty() {
        r#"<p class="warning">Nothing to redrive: the selection holds no waiting message.</p>"#
            .to_string()
    } else {
        format!(
            r#"<form method="post" action="/redrive/start" id="start-form">{csrf}{hidden}
<label>Rate (messages per second) <input name="rate" id="rate" type="number" min="0.1" step="0.1" value="10"></label>
<button type="submit" id="start-redrive">Redrive {n} message(s)</button></form>"#,
            csrf = html::csrf_field(&s),
            hidden = hidden_selection(&p),
            n = chosen.len()
        )
    };
    let group = sel.group_key.as_deref().map_or(String::new(), |k| {
        format!(r#"<p>Failure group <a href="/groups/{k}">{k}</a>.</p>"#)
    });
    let skipping = if skipped == 0 {
        String::new()
    } else {
        let reasons: Vec<String> = RedriveSkip::ALL
            .iter()
            .filter_map(|reason| {
                let n = skips.iter().filter(|s| **s == Some(*reason)).count();
                (n > 0).then(|| format!("{n} {}", reason.in_words()))
            })
            .collect();
        let force = if skips.contains(&Some(RedriveSkip::OlderThanReplayWindow)) {
            " Messages older than the replay window go back only from the command line (<code>postroom parking redrive --force</code>), after checking by hand that their effect was not applied."
        } else {
            ""
        };
        format!(
            r#"<p class="warning" id="preview-skipped"><strong id="preview-skipped-n">{skipped}</strong> would be skipped: {}.{force}</p>"#,
            esc(&reasons.join("; "))
        )
    };
    let body = format!(
        r#"<p class="dry-run">Dry run: nothing has been sent. <strong id="preview-count">{}</strong> message(s) would go back to their consumers.</p>
{skipping}{group}<h2>Consumers</h2><ul id="preview-consumers">{consumers}</ul>
<h2>By type</h2>{histogram}{start}<h2>First messages</h2>{rows}{more}"#,
        chosen.len() - skipped
    );
    Ok(Html(html::page("Redrive: dry run", &s, &body)).into_response())
}

pub(crate) async fn start(state: State, Extension(s): Extension<Session>, body: Bytes) -> Page {
    require(&s, Permission::Redrive)?;
    let p = Params::parse(&body);
    let rate: f64 = match p.get("rate").map(str::parse) {
        Some(Ok(r)) => r,
        _ => {
            return Err(refusal(
                &s,
                StatusCode::BAD_REQUEST,
                "Bad rate",
                "Give the rate as a number of messages per second.",
            ));
        }
    };
    let sel = selection_of(&*state.parking, &p).await.or_failure(&s)?;
    let plan = RunPlan {
        filter: sel.filter,
        limit: MAX_SELECTION,
        rate,
        group_key: sel.group_key,
        ..RunPlan::default()
    };
    let run = state.runs.start(s.name(), plan).await.or_failure(&s)?;
    Ok(Redirect::to(&format!("/runs/{}", run.id)).into_response())
}

pub(crate) async fn runs(state: State, Extension(s): Extension<Session>) -> Page {
    let runs = state
        .parking
        .store()
        .redrive_runs(100)
        .await
        .or_failure(&s)?;
    let mut table = String::from(
        r#"<table class="runs" id="runs"><thead><tr><th>Run</th><th>Started</th><th>By</th><th>Progress</th><th>State</th><th>Rate</th></tr></thead><tbody>"#,
    );
    for r in &runs {
        let control = state.parking.lot().run_control(&r.id).await.ok().flatten();
        let _ = write!(
            table,
            r#"<tr><td><a href="/runs/{id}">{id}</a></td><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td></tr>"#,
            time(r.created_at),
            esc(&r.operator),
            r.done,
            r.total,
            control.as_ref().map_or("recorded", |c| c.state.as_str()),
            control
                .as_ref()
                .map_or("—".to_string(), |c| format!("{}/s", c.rate)),
            id = esc(&r.id),
        );
    }
    table.push_str("</tbody></table>");
    Ok(Html(html::page("Redrive runs", &s, &table)).into_response())
}

pub(crate) async fn show(
    state: State,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
) -> Page {
    let status = state
        .runs
        .status(&id)
        .await
        .and_then(|st| st.ok_or_else(|| not_found(format!("no redrive run {id}"))))
        .or_failure(&s)?;
    let audit = state
        .parking
        .lot()
        .audit_entries(Some(&id), 50)
        .await
        .unwrap_or_default();
    let run = &status.run;
    let state_name = status
        .control
        .as_ref()
        .map_or("recorded", |c| c.state.as_str());
    let final_ = status.control.as_ref().is_none_or(|c| c.state.is_final());
    let joined = status.control.as_ref().map_or(0, |c| c.joined);
    let mut buttons = String::new();
    if !final_ && s.allows(Permission::Redrive) {
        for (action, label) in [
            ("pause", "Pause"),
            ("resume", "Resume"),
            ("cancel", "Cancel"),
        ] {
            let _ = write!(
                buttons,
                r#"<form method="post" action="/runs/{id}/{action}" class="inline">{}<button type="submit" id="run-{action}">{label}</button></form> "#,
                html::csrf_field(&s),
                id = esc(&run.id)
            );
        }
    }
    let group = status
        .control
        .as_ref()
        .and_then(|c| c.group_key.as_deref())
        .map_or(String::new(), |k| {
            format!(r#"<dt>Group</dt><dd><a href="/groups/{k}">{k}</a></dd>"#)
        });
    let error = status
        .control
        .as_ref()
        .and_then(|c| c.error.as_deref())
        .map_or(String::new(), |e| {
            format!(r#"<p class="error" id="run-error">{}</p>"#, esc(e))
        });
    let filter: Option<ParkingFilter> = serde_json::from_str(&run.filter).ok();
    let mut log = String::from(r#"<table class="audit" id="run-audit"><tbody>"#);
    log.push_str(&super::audit::rows(&s, &audit, false));
    log.push_str("</tbody></table>");
    let skipped = skipped_at_end(&audit);
    let body = format!(
        r#"<div id="run" data-progress-url="/runs/{id}/progress" data-final="{final_}">
<dl class="facts"><dt>Started by</dt><dd id="run-operator">{op}</dd><dt>Recorded at</dt><dd>{at}</dd>{group}
<dt>Selection</dt><dd><code>{filter}</code></dd><dt>Rate</dt><dd>{rate}</dd>
<dt>State</dt><dd id="run-state">{state_name}</dd></dl>
<p><progress id="run-progress" max="{total}" value="{done}"></progress> <span id="run-done">{done}</span>/<span id="run-total">{total}</span> done</p>
{skipped}<p class="warning" id="run-joined" {hide}><span id="run-joined-n">{joined}</span> new message(s) joined this group since the run started: they are not part of it. Redrive the group again once they are understood.</p>
{error}<p class="actions">{buttons}</p></div>
<h2>Audit</h2>{log}"#,
        id = esc(&run.id),
        op = esc(&run.operator),
        at = time(run.created_at),
        filter = esc(
            &filter.map_or(run.filter.clone(), |f| serde_json::to_string(&f)
                .unwrap_or_default())
        ),
        rate = status
            .control
            .as_ref()
            .map_or("—".to_string(), |c| format!("{}/s", c.rate)),
        total = run.total,
        done = run.done,
        hide = if joined > 0 { "" } else { "hidden" },
    );
    Ok(Html(html::page(&format!("Redrive run {}", run.id), &s, &body)).into_response())
}

/// What the end of a run (its `redrive.end` audit entry) says about messages it did not send
/// back, as a warning; empty when it skipped none or has not ended.
fn skipped_at_end(audit: &[postroom_core::AuditEntry]) -> String {
    let Some(end) = audit.iter().find(|e| e.action == "redrive.end") else {
        return String::new();
    };
    let counts: Vec<(RedriveSkip, u64)> = RedriveSkip::ALL
        .iter()
        .map(|r| (*r, end.detail["skipped"][r.as_str()].as_u64().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return String::new();
    }
    let reasons: Vec<String> = counts
        .iter()
        .map(|(r, n)| format!("{n} {}", r.in_words()))
        .collect();
    format!(
        r#"<p class="warning" id="run-skipped"><span id="run-skipped-n">{total}</span> of them were not sent back: {}. They stay parked.</p>"#,
        esc(&reasons.join("; "))
    )
}

pub(crate) async fn progress(
    state: State,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
) -> Response {
    match state.runs.status(&id).await {
        Ok(Some(st)) => Json(serde_json::json!({
            "done": st.run.done,
            "total": st.run.total,
            "state": st.control.as_ref().map_or("recorded", |c| c.state.as_str()),
            "final": st.control.as_ref().is_none_or(|c| c.state.is_final()),
            "joined": st.control.as_ref().map_or(0, |c| c.joined),
            "error": st.control.as_ref().and_then(|c| c.error.clone()),
        }))
        .into_response(),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({"error": "no such run"})),
        )
            .into_response(),
        Err(e) => failure(&s, &e),
    }
}

pub(crate) async fn act(
    state: State,
    Extension(s): Extension<Session>,
    Path((id, action)): Path<(String, String)>,
) -> Page {
    require(&s, Permission::Redrive)?;
    let action = match action.as_str() {
        "pause" => RunAction::Pause,
        "resume" => RunAction::Resume,
        "cancel" => RunAction::Cancel,
        other => {
            return Err(refusal(
                &s,
                StatusCode::NOT_FOUND,
                "Unknown action",
                &format!("no run action {other:?}"),
            ));
        }
    };
    state.runs.act(s.name(), &id, action).await.or_failure(&s)?;
    Ok(Redirect::to(&format!("/runs/{id}")).into_response())
}
