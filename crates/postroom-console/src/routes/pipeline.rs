//! The pipeline page: per consumer the backlog, retry stages, oldest-message age, and
//! handled / retried / parked rates; the relay's lag; the inbox feeds watched; charts over
//! the samples the console kept (the last hour). `/pipeline.json` has the same figures for
//! scripts.

use super::{State, feeds};
use crate::auth::Session;
use crate::html::{self, age, esc};
use crate::pipeline::{Sample, retried_per_minute};
use axum::Extension;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Json, Response};
use serde_json::json;
use std::fmt::Write;

fn series(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Vec<(f64, f64)> {
    samples
        .iter()
        .filter_map(|s| f(s).map(|v| (s.at.timestamp_millis() as f64 / 1000.0, v)))
        .collect()
}

pub(crate) async fn show(state: State, Extension(s): Extension<Session>) -> Response {
    // The page shows figures read now, and the charts what the sampler kept.
    let now =
        crate::pipeline::sample(&*state.probe, &*state.parking, state.prometheus.as_ref()).await;
    let samples = state.history.samples();
    let mut body = String::new();
    let latest = match now {
        Ok(s) => s,
        Err(e) => {
            let _ = write!(
                body,
                r#"<p class="error">Cannot read the pipeline: {}</p>"#,
                esc(&e.to_string())
            );
            return Html(html::page("Pipeline", &s, &body)).into_response();
        }
    };
    let lag = latest.relay_lag.map_or("none waiting".to_string(), age);
    let next_due = latest.scheduled.next_due.map_or("none".to_string(), |t| {
        t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string()
    });
    let _ = write!(
        body,
        r#"<section class="relay"><h2>Relay</h2><p>Oldest unpublished outbox row: <strong id="relay-lag">{lag}</strong>; <span id="outbox-pending">{}</span> row(s) waiting, of them <span id="scheduled-waiting">{}</span> scheduled for later (next due: <span id="scheduled-next-due">{next_due}</span>).</p><div class="charts">{}</div></section>"#,
        latest.outbox_pending,
        latest.scheduled.waiting,
        html::chart(
            "chart-relay-lag",
            "relay lag (s)",
            &series(&samples, |s| Some(
                s.relay_lag.map_or(0.0, |d| d.as_secs_f64())
            ))
        ),
    );
    body.push_str(
        r#"<h2>Consumers</h2><table class="pipeline" id="pipeline"><thead><tr><th>Consumer</th><th>Ready</th><th>In flight</th><th>Delayed</th><th>Retry stages</th><th>Oldest ready</th><th>Handled/min</th><th>Retried/min</th><th>Parked/min</th><th>Waiting in parking</th></tr></thead><tbody>"#,
    );
    for (name, c) in &latest.consumers {
        let f = &c.figures;
        let stages: Vec<String> = f
            .stages
            .iter()
            .map(|(l, n)| format!("{}: {n}", esc(l)))
            .collect();
        let retried =
            retried_per_minute(&samples, name).map_or("—".to_string(), |r| format!("{r:.1}"));
        let _ = write!(
            body,
            r#"<tr class="consumer" data-consumer="{n}"><td>{n}</td><td class="ready">{}</td><td>{}</td><td>{}</td><td>{}</td><td class="oldest">{}</td><td>{}</td><td>{retried}</td><td>{}</td><td class="parked">{}</td></tr>"#,
            f.backlog.ready,
            f.backlog.unacked,
            f.backlog.delayed,
            if stages.is_empty() {
                "—".to_string()
            } else {
                stages.join(", ")
            },
            f.backlog.oldest_ready_age.map_or("—".to_string(), age),
            f.handled_last_minute,
            f.parked_last_minute,
            c.parked_waiting,
            n = esc(name),
        );
    }
    body.push_str("</tbody></table>");
    body.push_str(&feeds::section(&samples));
    let _ = write!(
        body,
        r#"<h2>Last hour</h2><p class="note">{} sample(s) kept by the console (every {:.1} s; no Prometheus needed).</p><div class="charts">"#,
        samples.len(),
        state.history.every().as_secs_f64(),
    );
    for name in latest.consumers.keys() {
        let pick = |f: fn(&crate::pipeline::ConsumerSample) -> f64| {
            series(&samples, move |s| s.consumers.get(name).map(f))
        };
        body.push_str(&html::chart(
            &format!("chart-{name}-ready"),
            &format!("{name}: ready"),
            &pick(|c| c.figures.backlog.ready as f64),
        ));
        body.push_str(&html::chart(
            &format!("chart-{name}-oldest"),
            &format!("{name}: oldest ready (s)"),
            &pick(|c| {
                c.figures
                    .backlog
                    .oldest_ready_age
                    .map_or(0.0, |d| d.as_secs_f64())
            }),
        ));
        body.push_str(&html::chart(
            &format!("chart-{name}-parked"),
            &format!("{name}: parked/min"),
            &pick(|c| c.figures.parked_last_minute as f64),
        ));
        body.push_str(&html::chart(
            &format!("chart-{name}-handled"),
            &format!("{name}: handled/min"),
            &pick(|c| c.figures.handled_last_minute as f64),
        ));
    }
    body.push_str("</div>");
    Html(html::page("Pipeline", &s, &body)).into_response()
}

/// The page's figures as JSON: the pipeline read now, the feeds as the sampler last read
/// them.
pub(crate) async fn json(state: State) -> Response {
    let now =
        crate::pipeline::sample(&*state.probe, &*state.parking, state.prometheus.as_ref()).await;
    let samples = state.history.samples();
    let latest = match now {
        Ok(s) => s,
        Err(e) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": e.to_string(), "feeds": feeds::json(&samples)})),
            )
                .into_response();
        }
    };
    let consumers: Vec<_> = latest
        .consumers
        .iter()
        .map(|(name, c)| {
            let f = &c.figures;
            json!({
                "consumer": name,
                "ready": f.backlog.ready,
                "in_flight": f.backlog.unacked,
                "delayed": f.backlog.delayed,
                "retry_stages": f.stages.iter().map(|(l, n)| json!({"stage": l, "messages": n})).collect::<Vec<_>>(),
                "oldest_ready_seconds": f.backlog.oldest_ready_age.map(|d| d.as_secs_f64()),
                "handled_per_minute": f.handled_last_minute,
                "retried_per_minute": retried_per_minute(&samples, name),
                "parked_per_minute": f.parked_last_minute,
                "parked_waiting": c.parked_waiting,
            })
        })
        .collect();
    Json(json!({
        "at": latest.at.to_rfc3339(),
        "relay_lag_seconds": latest.relay_lag.map(|d| d.as_secs_f64()),
        "outbox_pending": latest.outbox_pending,
        "scheduled_waiting": latest.scheduled.waiting,
        "scheduled_next_due": latest.scheduled.next_due.map(|t| t.to_rfc3339()),
        "consumers": consumers,
        "feeds": feeds::json(&samples),
        "samples_kept": samples.len(),
        "sample_every_seconds": state.history.every().as_secs_f64(),
    }))
    .into_response()
}
