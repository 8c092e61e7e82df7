//! Server-rendered HTML: escaping, the page layout, and small pieces (times, ages, forms,
//! inline SVG charts) the pages share. No template engine and nothing loaded from elsewhere.

use crate::auth::{Role, Session};
use chrono::{DateTime, Utc};
use std::fmt::Write;
use std::time::Duration;

/// Escape text for HTML content and attribute values.
#[must_use]
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escape for a URL query value.
#[must_use]
pub fn url(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A time as `2026-01-31 12:00:00`.
#[must_use]
pub fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A duration as `4s`, `3m 20s`, `2h 5m`.
#[must_use]
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{}s", s)
    } else if s < 3600 {
        format!("{}m {}s", s / 60, s % 60)
    } else {
        format!("{}h {}m", s / 3600, (s % 3600) / 60)
    }
}

/// The hidden CSRF field every form carries.
#[must_use]
pub fn csrf_field(s: &Session) -> String {
    format!(
        r#"<input type="hidden" name="csrf" value="{}">"#,
        esc(&s.csrf)
    )
}

/// A whole page: header with navigation and the user, then `body`.
#[must_use]
pub fn page(title: &str, s: &Session, body: &str) -> String {
    let mut nav = String::new();
    if s.user.is_some() {
        for (href, label) in [
            ("/parking", "Parking lot"),
            ("/groups", "Failure groups"),
            ("/runs", "Redrive runs"),
            ("/pipeline", "Pipeline"),
            ("/archive", "Archive"),
            ("/audit", "Audit"),
        ] {
            let _ = write!(nav, r#"<a href="{href}">{label}</a>"#);
        }
    }
    let user = match &s.user {
        Some((name, role)) => format!(
            r#"<span class="user" id="whoami">{} ({})</span>
               <form method="post" action="/logout" class="inline">{}<button type="submit" id="logout">Log out</button></form>"#,
            esc(name),
            role_name(*role),
            csrf_field(s)
        ),
        None => String::new(),
    };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{t} · postroom</title>
<link rel="stylesheet" href="/assets/console.css">
<script src="/assets/console.js" defer></script>
</head><body>
<header><strong class="brand">postroom</strong><nav>{nav}</nav><div class="who">{user}</div></header>
<main><h1>{t}</h1>
{body}
</main></body></html>"#,
        t = esc(title)
    )
}

fn role_name(r: Role) -> &'static str {
    r.as_str()
}

/// An inline SVG line chart of `points` (x = seconds, y = value), with its maximum labelled.
#[must_use]
pub fn chart(id: &str, label: &str, points: &[(f64, f64)]) -> String {
    let (w, h) = (320.0, 80.0);
    let max_y = points.iter().map(|p| p.1).fold(0.0_f64, f64::max);
    let (min_x, max_x) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let span_x = (max_x - min_x).max(1.0);
    let scale_y = if max_y > 0.0 { max_y } else { 1.0 };
    let path: Vec<String> = points
        .iter()
        .map(|(x, y)| {
            format!(
                "{:.1},{:.1}",
                (x - min_x) / span_x * w,
                h - y / scale_y * (h - 4.0)
            )
        })
        .collect();
    format!(
        r#"<figure class="chart" id="{id}"><figcaption>{label} <span class="max">max {max_y:.1}</span></figcaption>
<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{label}">
<rect x="0" y="0" width="{w}" height="{h}" class="bg"/>
<polyline points="{pts}" class="line"/></svg></figure>"#,
        id = esc(id),
        label = esc(label),
        pts = path.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(url("a b&c"), "a+b%26c");
        assert_eq!(age(Duration::from_secs(200)), "3m 20s");
    }
}
