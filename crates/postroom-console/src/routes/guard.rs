//! The guard in front of every page: find or start the visitor's session, refuse a
//! state-changing request whose CSRF token is missing or wrong, and send visitors who are not
//! logged in to the login page. Health, metrics and assets pass without a session.
//!
//! A request with `Authorization: Bearer <API token>` is authenticated by the token alone
//! (cookies are ignored): a browser never adds that header to a cross-site request by
//! itself, so it needs no CSRF token.

use super::{AppState, refusal};
use crate::auth::csrf::{self, tokens_equal};
use crate::auth::session::cookie_value;
use crate::auth::{Auth, Role, Session};
use crate::metrics as cm;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use std::sync::Arc;

/// Largest request body accepted (an edited payload is the largest thing posted).
const MAX_BODY: usize = 4 * 1024 * 1024;

fn public(path: &str) -> bool {
    path.starts_with("/assets/") || matches!(path, "/healthz" | "/readyz" | "/metrics")
}

pub(crate) async fn guard(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_string();
    if public(&path) {
        return next.run(req).await;
    }
    if let (Auth::Users(users), Some(token)) = (&state.auth, bearer(&req)) {
        return with_token(&state, users, token, req, next).await;
    }
    let existing = req
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(cookie_value)
        .and_then(|id| state.sessions.get(id));
    let (session, fresh) = match existing {
        Some(s) => (s, false),
        None => {
            let user = match state.auth {
                Auth::Disabled => Some(("local".to_string(), Role::Admin)),
                Auth::Users(_) => None,
            };
            (state.sessions.create(user), true)
        }
    };
    let (mut parts, body) = req.into_parts();
    let body = if parts.method == Method::GET || parts.method == Method::HEAD {
        body
    } else {
        let Ok(bytes) = to_bytes(body, MAX_BODY).await else {
            return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response();
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
            set_cookie(&state, &session, fresh, &mut resp);
            return resp;
        }
        Body::from(bytes)
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
        parts.extensions.insert(session.clone());
        next.run(Request::from_parts(parts, body)).await
    };
    set_cookie(&state, &session, fresh, &mut resp);
    resp.headers_mut().insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    resp.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp.headers_mut()
        .insert("referrer-policy", HeaderValue::from_static("same-origin"));
    resp
}

fn bearer(req: &Request) -> Option<String> {
    req.headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(|t| t.trim().to_string())
}

/// Most verified tokens remembered.
const TOKEN_CACHE: usize = 1000;

async fn with_token(
    state: &Arc<AppState>,
    users: &crate::auth::Users,
    token: String,
    mut req: Request,
    next: Next,
) -> Response {
    let cached = state
        .verified_tokens
        .lock()
        .expect("token cache lock")
        .get(&token)
        .cloned();
    let user = match cached {
        Some(u) => Some(u),
        None => {
            let users = users.clone();
            let t = token.clone();
            // argon2 takes tens of milliseconds of CPU: off the async workers.
            let found = tokio::task::spawn_blocking(move || {
                users.verify_token(&t).map(|u| (u.name.clone(), u.role))
            })
            .await
            .ok()
            .flatten();
            if let Some(u) = &found {
                let mut cache = state.verified_tokens.lock().expect("token cache lock");
                if cache.len() >= TOKEN_CACHE {
                    cache.clear();
                }
                cache.insert(token, u.clone());
            }
            found
        }
    };
    let Some(user) = user else {
        metrics::counter!(cm::REFUSED, "reason" => "token").increment(1);
        return (StatusCode::UNAUTHORIZED, "unknown API token\n").into_response();
    };
    req.extensions_mut()
        .insert(state.sessions.for_request(user));
    next.run(req).await
}

fn set_cookie(state: &AppState, session: &Session, fresh: bool, resp: &mut Response) {
    // A handler that logged in or out set its own cookie.
    if fresh
        && !resp.headers().contains_key(header::SET_COOKIE)
        && let Ok(v) = HeaderValue::from_str(&state.sessions.cookie(session))
    {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
}
