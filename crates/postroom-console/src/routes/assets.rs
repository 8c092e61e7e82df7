//! The stylesheet and script, compiled into the binary: the console works offline.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("../../assets/console.css");
const JS: &str = include_str!("../../assets/console.js");

pub(crate) async fn get(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "console.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        body,
    )
        .into_response()
}
