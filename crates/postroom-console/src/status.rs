//! The status endpoints of a postroom process that is not the console — `postroom relay`,
//! `postroom ingest` —: `/metrics` (Prometheus text of this process's recorder), `/healthz`
//! (the process answers) and `/readyz` (its stores and broker answer). Nothing here changes
//! state, so nothing needs a login.

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use postroom_core::{Error, ErrorKind, Result, async_trait};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Whether a process can do its work now.
#[async_trait]
pub trait Readiness: Send + Sync + 'static {
    /// `Ok` when the stores and the broker the process uses answer.
    async fn ready(&self) -> Result<()>;
}

/// A store and its transport are ready when both answer.
#[async_trait]
impl Readiness for postroom_ops::Stack {
    async fn ready(&self) -> Result<()> {
        postroom_ops::Stack::ready(self).await
    }
}

struct Status {
    prometheus: PrometheusHandle,
    ready: Arc<dyn Readiness>,
}

/// The routes: `/metrics`, `/healthz`, `/readyz`.
pub fn router(prometheus: PrometheusHandle, ready: Arc<dyn Readiness>) -> Router {
    let state = Arc::new(Status { prometheus, ready });
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|s: axum::extract::State<Arc<Status>>| async move { readyz(&*s.ready).await }),
        )
        .route(
            "/metrics",
            get(|s: axum::extract::State<Arc<Status>>| async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    s.prometheus.render(),
                )
            }),
        )
        .with_state(state)
}

async fn readyz(ready: &dyn Readiness) -> Response {
    match ready.ready().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}\n")).into_response(),
    }
}

/// Serve the status routes on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    prometheus: PrometheusHandle,
    ready: Arc<dyn Readiness>,
    shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let mut stop = shutdown;
    axum::serve(listener, router(prometheus, ready))
        .with_graceful_shutdown(async move {
            while !*stop.borrow() {
                if stop.changed().await.is_err() {
                    break;
                }
            }
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Io, format!("status server: {e}")))
}
