//! The router: pages, the guard every request passes (session, login, CSRF), and the pieces
//! handlers share (parameters, refusals, errors).

// Handlers return a ready page as their error: its size does not matter on this path.
#![allow(clippy::result_large_err)]

mod assets;
mod audit;
mod feeds;
mod guard;
mod health;
pub(crate) mod hosts;
mod login;
mod message;
mod parking;
mod pipeline;
mod protective;
mod redrive;
mod selection;
mod visit;

use crate::audit::Auditor;
use crate::auth::tokens::TokenCache;
use crate::auth::visitor::VisitorKey;
use crate::auth::{Auth, Logins, Permission, Session, Sessions};
use crate::backend::{ParkingConsole, PipelineProbe};
use crate::html;
use crate::metrics as cm;
use crate::pipeline::History;
use crate::redrive::Runs;
use axum::Router;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use postroom_core::ErrorKind;
use std::sync::Arc;
use std::time::Duration;

/// What every handler reaches.
pub(crate) struct AppState {
    pub parking: Arc<dyn ParkingConsole>,
    pub probe: Arc<dyn PipelineProbe>,
    /// Sessions of logged-in users.
    pub sessions: Sessions,
    /// Signs the nonces of visitors without a session.
    pub visitors: VisitorKey,
    /// API tokens already checked (argon2 runs once per token, right or wrong).
    pub tokens: TokenCache,
    /// Failed logins and wrong tokens, per client and per user name.
    pub logins: Logins,
    /// The host names served and the origins that may post.
    pub hosts: hosts::HostPolicy,
    /// The header a proxy in front names the client in, when configured.
    pub client_header: Option<String>,
    /// Mark cookies Secure whatever the request says.
    pub secure_cookies: bool,
    pub auth: Auth,
    pub runs: Arc<Runs>,
    pub audit: Auditor,
    pub history: Arc<History>,
    pub prometheus: Option<PrometheusHandle>,
    pub feeds: Arc<crate::feeds::FeedScraper>,
    pub retention: Duration,
}

pub(crate) type State = axum::extract::State<Arc<AppState>>;

/// The console's routes over `state`.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/parking") }))
        .route("/login", get(login::form).post(login::submit))
        .route("/logout", post(login::logout))
        .route("/parking", get(parking::list))
        .route("/groups", get(parking::groups))
        .route("/groups/{key}", get(parking::group))
        .route("/archive", get(parking::archived).post(parking::archive))
        .route("/purge", post(parking::purge))
        .route("/messages/{id}", get(message::show))
        .route(
            "/messages/{id}/edit",
            get(message::edit_form).post(message::edit_submit),
        )
        .route("/redrive/preview", post(redrive::preview))
        .route("/redrive/start", post(redrive::start))
        .route("/runs", get(redrive::runs))
        .route("/runs/{id}", get(redrive::show))
        .route("/runs/{id}/progress", get(redrive::progress))
        .route("/runs/{id}/{action}", post(redrive::act))
        .route("/pipeline", get(pipeline::show))
        .route("/pipeline.json", get(pipeline::json))
        .route("/audit", get(audit::show))
        .route("/assets/{name}", get(assets::get))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        // The guard holds bodies to what each request needs; handlers take what it let by.
        .layer(axum::extract::DefaultBodyLimit::max(guard::MAX_EDIT_BODY))
        .layer(axum::middleware::map_response(protective::protect))
        .with_state(state)
}

/// Query or form parameters as pairs, repeated keys kept.
#[derive(Clone, Debug, Default)]
pub(crate) struct Params(pub Vec<(String, String)>);

impl Params {
    pub fn parse(raw: &[u8]) -> Self {
        Self(form_urlencoded::parse(raw).into_owned().collect())
    }

    pub fn query(raw: Option<&str>) -> Self {
        Self::parse(raw.unwrap_or("").as_bytes())
    }

    /// The first non-empty value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == key && !v.trim().is_empty())
            .map(|(_, v)| v.trim())
    }

    /// Every non-empty value of `key`.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// A handler's `Params` argument: the parameters of the request's query string.
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Params {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self::query(parts.uri.query()))
    }
}

/// A page that says no.
pub(crate) fn refusal(s: &Session, status: StatusCode, title: &str, text: &str) -> Response {
    (
        status,
        Html(html::page(
            title,
            s,
            &format!(r#"<p class="error" id="refusal">{}</p>"#, html::esc(text)),
        )),
    )
        .into_response()
}

/// `Err(403 page)` unless the session's role grants `p`.
pub(crate) fn require(s: &Session, p: Permission) -> Result<(), Response> {
    match s.role() {
        Some(r) if r.allows(p) => Ok(()),
        Some(r) => {
            metrics::counter!(cm::REFUSED, "reason" => "role").increment(1);
            Err(refusal(
                s,
                StatusCode::FORBIDDEN,
                "Not allowed",
                &format!("The role {} may not do this ({p:?}).", r.as_str()),
            ))
        }
        None => Err(Redirect::to("/login").into_response()),
    }
}

/// A store or transport error as a page.
pub(crate) fn failure(s: &Session, e: &postroom_core::Error) -> Response {
    let status = match e.kind() {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Config | ErrorKind::InvalidData => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    refusal(s, status, "Error", &e.to_string())
}

/// The error for a lookup that found nothing, saying in `message` what is missing.
pub(crate) fn not_found(message: String) -> postroom_core::Error {
    postroom_core::Error::new(ErrorKind::NotFound, message)
}

/// What a page handler returns: the page, or the page that says why not (a refusal or a
/// failure), so that a handler can give up with `?`.
pub(crate) type Page = std::result::Result<Response, Response>;

/// A store error as the failure page of a session.
pub(crate) trait OrFailure<T> {
    /// The value, or the failure page saying what went wrong.
    fn or_failure(self, s: &Session) -> std::result::Result<T, Response>;
}

impl<T> OrFailure<T> for postroom_core::Result<T> {
    fn or_failure(self, s: &Session) -> std::result::Result<T, Response> {
        self.map_err(|e| failure(s, &e))
    }
}
