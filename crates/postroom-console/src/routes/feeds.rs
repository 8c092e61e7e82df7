//! The inbox feeds on the pipeline page and in its JSON: per feed its address, whether it
//! answered the sampler's last reading (the reason when not) and when, and per consumer
//! its lag, what it stored and the duplicates it absorbed, with rates over the samples kept.

use crate::feeds::{FeedConsumer, FeedSample, per_minute};
use crate::html::{self, esc};
use crate::pipeline::Sample;
use serde_json::{Value, json};
use std::fmt::Write;

/// The readings of feed `name` in `samples`, oldest first.
fn readings<'a>(
    samples: &'a [Sample],
    name: &'a str,
) -> impl DoubleEndedIterator<Item = &'a FeedSample> + 'a {
    samples
        .iter()
        .filter_map(move |s| s.feeds.iter().find(|f| f.name == name))
}

fn rate(
    samples: &[Sample],
    feed: &str,
    consumer: &str,
    pick: fn(&FeedConsumer) -> u64,
) -> Option<f64> {
    per_minute(readings(samples, feed), consumer, pick)
}

fn shown(r: Option<f64>) -> String {
    r.map_or("—".to_string(), |r| format!("{r:.1}"))
}

/// The "Feeds" section: a table and a lag chart per feed and consumer.
pub(crate) fn section(samples: &[Sample]) -> String {
    let feeds = samples.last().map(|s| s.feeds.as_slice()).unwrap_or(&[]);
    let mut body = String::from(r#"<section class="feeds"><h2>Inbox feeds</h2>"#);
    if feeds.is_empty() {
        body.push_str(
            r#"<p class="note" id="no-feeds">No inbox feed is watched (<code>postroom serve --feed NAME=HOST:PORT</code>), or none was read yet.</p></section>"#,
        );
        return body;
    }
    body.push_str(
        r#"<table class="pipeline" id="feeds"><thead><tr><th>Feed</th><th>Address</th><th>State</th><th>Consumer</th><th>Lag</th><th>Stored</th><th>Duplicates absorbed</th><th>Stored/min</th><th>Absorbed/min</th><th>Read at</th></tr></thead><tbody>"#,
    );
    let mut charts = String::new();
    for f in feeds {
        let state = match &f.error {
            None => r#"<span class="up">up</span>"#.to_string(),
            Some(e) => format!(
                r#"<span class="down">down</span>: <span class="feed-error">{}</span>"#,
                esc(e)
            ),
        };
        let head = |consumer: &str| {
            format!(
                r#"<tr class="feed" data-feed="{n}" data-consumer="{c}" data-up="{up}"><td class="feed-name">{n}</td><td class="feed-addr">{a}</td><td class="feed-state">{state}</td><td class="feed-consumer">{c}</td>"#,
                n = esc(&f.name),
                a = esc(&f.addr),
                c = esc(consumer),
                up = f.up(),
            )
        };
        let read_at = html::time(f.at);
        if f.consumers.is_empty() {
            let _ = write!(
                body,
                r#"{}<td class="feed-lag">—</td><td class="feed-stored">—</td><td class="feed-duplicates">—</td><td>—</td><td>—</td><td>{read_at}</td></tr>"#,
                head("")
            );
            continue;
        }
        for (consumer, c) in &f.consumers {
            let _ = write!(
                body,
                r#"{}<td class="feed-lag">{}</td><td class="feed-stored">{}</td><td class="feed-duplicates">{}</td><td class="feed-stored-rate">{}</td><td class="feed-duplicates-rate">{}</td><td>{read_at}</td></tr>"#,
                head(consumer),
                c.lag.map_or("—".to_string(), |l| l.to_string()),
                c.stored,
                c.duplicates,
                shown(rate(samples, &f.name, consumer, |c| c.stored)),
                shown(rate(samples, &f.name, consumer, |c| c.duplicates)),
            );
            let points: Vec<(f64, f64)> = samples
                .iter()
                .filter_map(|s| {
                    let lag = s
                        .feeds
                        .iter()
                        .find(|x| x.name == f.name)?
                        .consumers
                        .get(consumer)?
                        .lag?;
                    Some((s.at.timestamp_millis() as f64 / 1000.0, lag as f64))
                })
                .collect();
            charts.push_str(&html::chart(
                &format!("chart-feed-{}-{consumer}-lag", f.name),
                &format!("feed {} ({consumer}): lag", f.name),
                &points,
            ));
        }
    }
    let _ = write!(
        body,
        r#"</tbody></table><div class="charts">{charts}</div></section>"#
    );
    body
}

/// The feeds as JSON, from the newest sample.
pub(crate) fn json(samples: &[Sample]) -> Value {
    let feeds = samples.last().map(|s| s.feeds.as_slice()).unwrap_or(&[]);
    Value::Array(
        feeds
            .iter()
            .map(|f| {
                let consumers: Vec<Value> = f
                    .consumers
                    .iter()
                    .map(|(consumer, c)| {
                        json!({
                            "consumer": consumer,
                            "lag": c.lag,
                            "stored": c.stored,
                            "duplicates_absorbed": c.duplicates,
                            "stored_per_minute": rate(samples, &f.name, consumer, |c| c.stored),
                            "duplicates_absorbed_per_minute": rate(samples, &f.name, consumer, |c| c.duplicates),
                        })
                    })
                    .collect();
                json!({
                    "name": f.name,
                    "address": f.addr,
                    "up": f.up(),
                    "error": f.error,
                    "read_at": f.at.to_rfc3339(),
                    "consumers": consumers,
                })
            })
            .collect(),
    )
}
