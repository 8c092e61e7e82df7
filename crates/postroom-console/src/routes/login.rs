//! Logging in and out. A successful login stores a new session (new id, new CSRF token) and
//! ends the visitor cookie it came with, so nothing known before the login is worth anything
//! after it. Failed logins are throttled per client and per user name (known or not); a
//! refused login is audited once, with the typed name cut short.

use super::guard::{VISITOR_COOKIE_AGE, locked_out};
use super::visit::Visit;
use super::{Params, State, refusal};
use crate::auth::session::{self, cookie};
use crate::auth::visitor::{self, VisitorKey};
use crate::auth::{Auth, Session};
use crate::html::{self, esc};
use crate::metrics as cm;
use axum::Extension;
use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use postroom_core::message::truncate;
use serde_json::json;

/// The most characters of a typed user name that are kept (in the audit, as a throttle key).
pub(crate) const MAX_NAME_CHARS: usize = 64;

pub(crate) async fn form(Extension(s): Extension<Session>) -> Response {
    if s.user.is_some() {
        return Redirect::to("/parking").into_response();
    }
    Html(login_page(&s, None)).into_response()
}

fn login_page(s: &Session, error: Option<&str>) -> String {
    let error = error.map_or(String::new(), |e| {
        format!(r#"<p class="error" id="login-error">{}</p>"#, esc(e))
    });
    html::page(
        "Log in",
        s,
        &format!(
            r#"{error}<form method="post" action="/login" class="login">{csrf}
<label>User <input name="username" id="username" autocomplete="username" required></label>
<label>Password <input name="password" id="password" type="password" autocomplete="current-password" required></label>
<button type="submit" id="login">Log in</button></form>"#,
            csrf = html::csrf_field(s)
        ),
    )
}

fn set_cookie(resp: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

pub(crate) async fn submit(
    state: State,
    Extension(s): Extension<Session>,
    Extension(visit): Extension<Visit>,
    body: Bytes,
) -> Response {
    let p = Params::parse(&body);
    let typed = p.get("username").unwrap_or("");
    // Cut short: what is audited and what keys the throttle.
    let name = truncate(typed, MAX_NAME_CHARS);
    let password =
        p.0.iter()
            .find(|(k, _)| k == "password")
            .map_or("", |(_, v)| v.as_str())
            .to_string();
    let users = match &state.auth {
        Auth::Users(u) => u.clone(),
        Auth::Disabled => return Redirect::to("/parking").into_response(),
    };
    let client = visit.client_key();
    if let Some(wait) = state.logins.locked(client.as_deref(), Some(&name)) {
        metrics::counter!(cm::LOGINS, "result" => "locked").increment(1);
        let (status, headers, text) = locked_out(wait);
        return (status, headers, Html(login_page(&s, Some(text.trim())))).into_response();
    }
    // A name longer than any user's is nobody's; it is checked all the same (the time a
    // refusal takes tells nothing).
    let exact = typed.to_string();
    // argon2 takes tens of milliseconds of CPU: off the async workers.
    let found = tokio::task::spawn_blocking(move || {
        users
            .verify(&exact, &password)
            .map(|u| (u.name.clone(), u.role))
    })
    .await
    .ok()
    .flatten();
    let Some((user, role)) = found else {
        metrics::counter!(cm::LOGINS, "result" => "refused").increment(1);
        let locked = state.logins.failed(client.as_deref(), Some(&name));
        let _ = state
            .audit
            .record(
                &name,
                "login.refused",
                "login",
                json!({"client": client, "locked_out": locked}),
            )
            .await;
        return (
            StatusCode::UNAUTHORIZED,
            Html(login_page(&s, Some("Unknown user or wrong password."))),
        )
            .into_response();
    };
    state.logins.succeeded(&name);
    if !s.id.is_empty() {
        state.sessions.remove(&s.id);
    }
    let fresh = state.sessions.create((user.clone(), role));
    metrics::counter!(cm::LOGINS, "result" => "ok").increment(1);
    if let Err(e) = state
        .audit
        .record(&user, "login", &user, json!({"role": role.as_str()}))
        .await
    {
        return refusal(&s, StatusCode::SERVICE_UNAVAILABLE, "Error", &e.to_string());
    }
    let mut resp = Redirect::to("/parking").into_response();
    set_cookie(&mut resp, &state.sessions.cookie(&fresh, visit.secure));
    set_cookie(&mut resp, &cookie(visitor::COOKIE, "", None, visit.secure));
    resp
}

pub(crate) async fn logout(
    state: State,
    Extension(s): Extension<Session>,
    Extension(visit): Extension<Visit>,
) -> Response {
    if !s.id.is_empty() {
        state.sessions.remove(&s.id);
    }
    let _ = state
        .audit
        .record(s.name(), "logout", s.name(), json!({}))
        .await;
    let mut resp = Redirect::to("/login").into_response();
    set_cookie(&mut resp, &cookie(session::COOKIE, "", None, visit.secure));
    set_cookie(
        &mut resp,
        &cookie(
            visitor::COOKIE,
            &VisitorKey::nonce(),
            Some(VISITOR_COOKIE_AGE),
            visit.secure,
        ),
    );
    resp
}
