//! Logging in and out. A successful login replaces the session (new id, new CSRF token), so
//! a session id known before the login is worth nothing after it.

use super::{Params, State, refusal};
use crate::auth::{Auth, Session};
use crate::html::{self, esc};
use crate::metrics as cm;
use axum::Extension;
use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde_json::json;

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

pub(crate) async fn submit(
    state: State,
    Extension(s): Extension<Session>,
    body: Bytes,
) -> Response {
    let p = Params::parse(&body);
    let name = p.get("username").unwrap_or("").to_string();
    let password =
        p.0.iter()
            .find(|(k, _)| k == "password")
            .map_or("", |(_, v)| v.as_str());
    let users = match &state.auth {
        Auth::Users(u) => u.clone(),
        Auth::Disabled => return Redirect::to("/parking").into_response(),
    };
    let password = password.to_string();
    let name_for_check = name.clone();
    // argon2 takes tens of milliseconds of CPU: off the async workers.
    let found = tokio::task::spawn_blocking(move || {
        users
            .verify(&name_for_check, &password)
            .map(|u| (u.name.clone(), u.role))
    })
    .await
    .ok()
    .flatten();
    let Some((user, role)) = found else {
        metrics::counter!(cm::LOGINS, "result" => "refused").increment(1);
        let _ = state
            .audit
            .record(&name, "login.refused", &name, json!({}))
            .await;
        return (
            StatusCode::UNAUTHORIZED,
            Html(login_page(&s, Some("Unknown user or wrong password."))),
        )
            .into_response();
    };
    state.sessions.remove(&s.id);
    let fresh = state.sessions.create(Some((user.clone(), role)));
    metrics::counter!(cm::LOGINS, "result" => "ok").increment(1);
    if let Err(e) = state
        .audit
        .record(&user, "login", &user, json!({"role": role.as_str()}))
        .await
    {
        return refusal(&s, StatusCode::SERVICE_UNAVAILABLE, "Error", &e.to_string());
    }
    let mut resp = Redirect::to("/parking").into_response();
    if let Ok(v) = HeaderValue::from_str(&state.sessions.cookie(&fresh)) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

pub(crate) async fn logout(state: State, Extension(s): Extension<Session>) -> Response {
    state.sessions.remove(&s.id);
    let _ = state
        .audit
        .record(s.name(), "logout", s.name(), json!({}))
        .await;
    let anonymous = state.sessions.create(match state.auth {
        Auth::Disabled => Some(("local".to_string(), crate::auth::Role::Admin)),
        Auth::Users(_) => None,
    });
    let mut resp = Redirect::to("/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&state.sessions.cookie(&anonymous)) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}
