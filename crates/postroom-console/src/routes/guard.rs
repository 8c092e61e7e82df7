//! The guard in front of every page: refuse a request for another host (DNS rebinding) and a
//! state-changing one from another site's origin; find the visitor's session, or take them
//! as a visitor without one (their nonce in a signed cookie, nothing stored); refuse a
//! state-changing request whose CSRF token is missing or wrong, or whose body is larger than
//! such a request needs; and send visitors who are not logged in to the login page. Health,
//! metrics and assets pass without a session.
//!
//! A request with `Authorization: Bearer <API token>` is authenticated by the token alone
//! (cookies are ignored): a browser never adds that header to a cross-site request by
//! itself, so it needs no CSRF token. Each token costs its argon2 checks once (right or
//! wrong, it is remembered), and wrong ones count against the client like failed logins.

use super::visit::{Visit, visit_of};
use super::{AppState, refusal};
use crate::auth::csrf::{self, tokens_equal};
use crate::auth::session::{self, cookie, cookie_value};
use crate::auth::tokens::Checked;
use crate::auth::visitor::{self, VisitorKey, is_nonce};
use crate::auth::{Auth, Session};
use crate::metrics as cm;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Largest request body accepted: an edited payload, the largest thing posted.
pub(crate) const MAX_EDIT_BODY: usize = 4 * 1024 * 1024;
/// Largest body of any other form (a login, a selection of messages, a redrive).
pub(crate) const MAX_FORM_BODY: usize = 256 * 1024;

/// How long a visitor's nonce cookie lives (its form tokens with it).
pub(crate) const VISITOR_COOKIE_AGE: Duration = Duration::from_secs(24 * 3600);

fn public(path: &str) -> bool {
    path.starts_with("/assets/") || matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// The most a request to `path` may post.
fn body_limit(path: &str) -> usize {
    if path.starts_with("/messages/") && path.ends_with("/edit") {
        MAX_EDIT_BODY
    } else {
        MAX_FORM_BODY
    }
}

fn header_text(req: &Request, name: header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

pub(crate) async fn guard(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_string();
    let host = header_text(&req, header::HOST);
    if !state.hosts.serves(host) {
        metrics::counter!(cm::REFUSED, "reason" => "host").increment(1);
        let text = format!(
            "This console answers to {}, not to {:?}: reach it by one of those names (a name in front of it is given with --allowed-host).\n",
            state.hosts.names(),
            host.unwrap_or("")
        );
        return (StatusCode::FORBIDDEN, text).into_response();
    }
    if public(&path) {
        return next.run(req).await;
    }
    let changes_state = !(req.method() == Method::GET || req.method() == Method::HEAD);
    if changes_state
        && !state
            .hosts
            .accepts_origin(header_text(&req, header::ORIGIN), host)
    {
        metrics::counter!(cm::REFUSED, "reason" => "origin").increment(1);
        return (
            StatusCode::FORBIDDEN,
            "This request was sent from another site (its Origin is not this console).\n",
        )
            .into_response();
    }
    let visit = visit_of(&req, state.client_header.as_deref(), state.secure_cookies);
    if let (Auth::Users(users), Some(token)) = (&state.auth, bearer(&req)) {
        return with_token(&state, users, visit, token, req, next).await;
    }
    let cookies: Vec<String> = req
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    let named = |name: &str| cookies.iter().find_map(|c| cookie_value(c, name));
    let stored = named(session::COOKIE).and_then(|id| state.sessions.get(id));
    let (session, new_nonce) = match stored {
        Some(s) => (s, None),
        None => {
            let kept = named(visitor::COOKIE).filter(|n| is_nonce(n));
            let nonce = kept.map_or_else(VisitorKey::nonce, str::to_string);
            let token = state.visitors.token(&nonce);
            let fresh = kept.is_none().then_some(nonce);
            (Session::visitor(state.auth.visitor_user(), token), fresh)
        }
    };
    let (mut parts, body) = req.into_parts();
    let body = if changes_state {
        let Ok(bytes) = to_bytes(body, body_limit(&path)).await else {
            return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n").into_response();
        };
        let sent = parts
            .headers
            .get(csrf::HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| csrf::token_in_form(&bytes));
        if !sent.is_some_and(|t| tokens_equal(&t, &session.csrf)) {
            metrics::counter!(cm::REFUSED, "reason" => "csrf").increment(1);
            let mut resp = refusal(
                &session,
                StatusCode::FORBIDDEN,
                "Refused",
                "The form's CSRF token is missing or does not belong to this session. Reload the page and try again.",
            );
            set_visitor_cookie(new_nonce.as_deref(), visit.secure, &mut resp);
            return resp;
        }
        Body::from(bytes)
    } else {
        body
    };
    let mut resp = if session.user.is_none() && path != "/login" {
        if parts.method == Method::GET {
            Redirect::to("/login").into_response()
        } else {
            metrics::counter!(cm::REFUSED, "reason" => "login").increment(1);
            refusal(
                &session,
                StatusCode::UNAUTHORIZED,
                "Log in first",
                "This needs a logged-in user.",
            )
        }
    } else {
        parts.extensions.insert(session);
        parts.extensions.insert(visit.clone());
        next.run(Request::from_parts(parts, body)).await
    };
    set_visitor_cookie(new_nonce.as_deref(), visit.secure, &mut resp);
    resp
}

fn bearer(req: &Request) -> Option<String> {
    header_text(req, header::AUTHORIZATION)?
        .strip_prefix("Bearer ")
        .map(|t| t.trim().to_string())
}

/// The answer to an attempt from a client or for a user that is locked out.
pub(crate) fn locked_out(
    wait: Duration,
) -> (StatusCode, [(header::HeaderName, String); 1], String) {
    let minutes = wait.as_secs().div_ceil(60).max(1);
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, wait.as_secs().max(1).to_string())],
        format!(
            "Too many failed attempts from this address or for this user: try again in {minutes} minute(s).\n"
        ),
    )
}

async fn with_token(
    state: &Arc<AppState>,
    users: &crate::auth::Users,
    visit: Visit,
    token: String,
    mut req: Request,
    next: Next,
) -> Response {
    let client = visit.client_key();
    if let Some(wait) = state.logins.locked(client.as_deref(), None) {
        metrics::counter!(cm::REFUSED, "reason" => "locked").increment(1);
        return locked_out(wait).into_response();
    }
    let checked = match state.tokens.get(&token) {
        Some(checked) => checked,
        None => {
            let users = users.clone();
            let t = token.clone();
            // argon2 takes tens of milliseconds of CPU: off the async workers.
            let Ok(found) = tokio::task::spawn_blocking(move || {
                users.verify_token(&t).map(|u| (u.name.clone(), u.role))
            })
            .await
            else {
                return (StatusCode::SERVICE_UNAVAILABLE, "cannot check the token\n")
                    .into_response();
            };
            let checked = found.map_or(Checked::Wrong, |(name, role)| Checked::Belongs(name, role));
            state.tokens.put(&token, &checked);
            checked
        }
    };
    let Checked::Belongs(name, role) = checked else {
        metrics::counter!(cm::REFUSED, "reason" => "token").increment(1);
        if state.logins.failed(client.as_deref(), None) {
            let _ = state
                .audit
                .record("-", "lockout", "api token", json!({"client": client}))
                .await;
        }
        return (StatusCode::UNAUTHORIZED, "unknown API token\n").into_response();
    };
    req.extensions_mut()
        .insert(state.sessions.for_request((name, role)));
    req.extensions_mut().insert(visit);
    next.run(req).await
}

/// Give a new visitor its nonce cookie, unless the handler set one itself (a login ends it,
/// a logout starts a new one).
fn set_visitor_cookie(nonce: Option<&str>, secure: bool, resp: &mut Response) {
    let Some(nonce) = nonce else {
        return;
    };
    let prefix = format!("{}=", visitor::COOKIE);
    let set_already = resp
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .any(|v| v.to_str().is_ok_and(|c| c.starts_with(&prefix)));
    if !set_already
        && let Ok(v) = HeaderValue::from_str(&cookie(
            visitor::COOKIE,
            nonce,
            Some(VISITOR_COOKIE_AGE),
            secure,
        ))
    {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}
