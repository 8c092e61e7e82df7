//! The headers every answer carries, however its visitor authenticated (a cookie, an API
//! token, nobody): a Content-Security-Policy that allows nothing but the console's own
//! assets, `nosniff`, and no referrer beyond the console.

use axum::http::HeaderValue;
use axum::response::Response;

/// What pages may load and who may frame them.
const CSP: &str = "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'";

/// Add the protective headers to `resp` (a handler's own are kept).
pub(crate) async fn protect(mut resp: Response) -> Response {
    let headers = resp.headers_mut();
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "same-origin"),
    ] {
        if !headers.contains_key(name) {
            headers.insert(name, HeaderValue::from_static(value));
        }
    }
    resp
}
