//! `/healthz` (the process answers), `/readyz` (the stores and the broker answer) and
//! `/metrics` (Prometheus text: the pipeline's metrics and the console's own).

use super::State;
use crate::metrics as cm;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

pub(crate) async fn readyz(state: State) -> Response {
    match state.probe.ready().await {
        Ok(()) => {
            metrics::gauge!(cm::READY).set(1.0);
            (StatusCode::OK, "ready\n").into_response()
        }
        Err(e) => {
            metrics::gauge!(cm::READY).set(0.0);
            (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}\n")).into_response()
        }
    }
}

pub(crate) async fn metrics(state: State) -> Response {
    match &state.prometheus {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "no Prometheus recorder is installed in this process\n",
        )
            .into_response(),
    }
}
