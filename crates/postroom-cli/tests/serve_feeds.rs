//! `postroom serve --feed`: the console watches real `postroom feed` processes. A feed from
//! RabbitMQ (`POSTROOM_TEST_AMQP`) into a PostgreSQL inbox queue (`POSTROOM_TEST_PG`) stores
//! what is published and absorbs a second copy of one message; the console's pipeline page
//! and `/pipeline.json` show its stored count, the duplicate absorbed and its lag, as the
//! feed's own `/metrics` reports them; a feed address that nothing listens on, and one
//! that takes the connection but never answers, are shown down with the reason, without
//! keeping the first from being read.

mod common;
// The console's browser driver; this test reads pages and clicks nothing.
#[allow(dead_code)]
#[path = "../../postroom-console/tests/common/webdriver.rs"]
mod webdriver;

use common::daemon::{Daemon, get, wait_for};
use common::{TestDb, amqp, cleanup, workload};
use postroom_core::{Envelope, OutgoingMessage, Transport};
use postroom_ops::{Endpoint, Registry, TransportSpec};
use postroom_postgres::{PgStore, TablePrefix};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use webdriver::Browser;

const CONSUMER: &str = "inventory";
const ROUTE: &str = "order.created";

/// The workload's transport, its topology declared from an empty state.
async fn open(prefix: &str) -> Arc<dyn Transport> {
    let workload =
        postroom_ops::Workload::new(prefix, postroom_ops::time::parse_ladder("1s").unwrap())
            .consumer(CONSUMER, &[ROUTE]);
    let mut spec = TransportSpec::of(workload);
    spec.fresh = true;
    Registry::builtin()
        .open_transport(&Endpoint::broker(&amqp()).unwrap(), &spec)
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ is required for these tests: {e}"))
}

fn order(n: u64) -> OutgoingMessage {
    let e = Envelope::builder("order.created", "orders")
        .aggregate("order", format!("o-{n}"), 1)
        .build();
    OutgoingMessage::from_envelope(&e, ROUTE)
}

/// A loopback address nothing listens on.
fn silent_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// Sum of a series' values in Prometheus text.
fn metric(text: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_each_feeds_stored_count_duplicates_absorbed_and_lag_and_feeds_that_do_not_answer_as_down()
 {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let prefix = workload("feeds");
    std::fs::write(
        d.join("topology.toml"),
        format!(
            "prefix = \"{prefix}\"\nladder = \"1s\"\n[[consumers]]\nname = \"{CONSUMER}\"\nbindings = [\"{ROUTE}\"]\n"
        ),
    )
    .unwrap();
    let db = TestDb::create().await;
    let store = PgStore::from_pool(db.pool(2).await, TablePrefix::default());
    store.migrate().await.unwrap();
    let transport = open(&prefix).await;

    let feed = Daemon::start(
        d,
        &[
            "feed",
            "--database",
            &db.url,
            "--broker",
            &amqp(),
            "--topology",
            "topology.toml",
            "--consumer",
            CONSUMER,
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    let feed_addr = feed.base.trim_start_matches("http://").to_string();
    let silent = silent_addr();
    // A socket that is listened on but never accepted: connections are made, nothing
    // answers.
    let stuck = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stuck_addr = stuck.local_addr().unwrap().to_string();

    // Three orders, the second one published twice: three stored, one copy absorbed.
    let publisher = transport.publisher();
    let second = order(2);
    for m in [order(1), second.clone(), second, order(3)] {
        publisher.publish(&m).await.unwrap();
    }

    let console = Daemon::start(
        d,
        &[
            "serve",
            "--database",
            &db.url,
            "--listen",
            "127.0.0.1:0",
            "--sample-every",
            "1s",
            "--feed",
            &format!("rabbit={feed_addr}"),
            "--feed",
            &format!("gone={silent}"),
            "--feed",
            &format!("stuck={stuck_addr}"),
        ],
        &[],
    );
    let json_url = format!("{}/pipeline.json", console.base);
    let settled = |j: &Value| {
        let c = &j["feeds"][0]["consumers"][0];
        c["stored"] == 3 && c["duplicates_absorbed"] == 1 && c["lag"] == 0
    };
    wait_for(
        Duration::from_secs(60),
        "the console to read 3 stored, 1 absorbed, lag 0 from the feed",
        async || {
            let (code, body) = get(&json_url).await;
            code == 200 && serde_json::from_str::<Value>(&body).is_ok_and(|j| settled(&j))
        },
    )
    .await;

    // The JSON: the feed up with its consumer's figures, the silent one down with the reason.
    let (_, body) = get(&json_url).await;
    let j: Value = serde_json::from_str(&body).unwrap();
    let feeds = j["feeds"].as_array().unwrap();
    assert_eq!(feeds.len(), 3, "{j}");
    let (up, down) = (&feeds[0], &feeds[1]);
    assert_eq!(up["name"], "rabbit", "{j}");
    assert_eq!(up["address"], feed_addr.as_str(), "{j}");
    assert_eq!(up["up"], true, "{j}");
    assert_eq!(up["error"], Value::Null, "{j}");
    assert_eq!(up["consumers"][0]["consumer"], CONSUMER, "{j}");
    assert!(up["read_at"].as_str().is_some_and(|t| !t.is_empty()), "{j}");
    assert_eq!(down["name"], "gone", "{j}");
    assert_eq!(down["address"], silent.as_str(), "{j}");
    assert_eq!(down["up"], false, "{j}");
    assert!(
        down["error"].as_str().is_some_and(|e| !e.is_empty()),
        "the reason a feed is down: {j}"
    );
    assert_eq!(down["consumers"], Value::Array(vec![]), "{j}");
    // The stuck one is given up on after the timeout (the sampling interval, 1 s, here).
    assert_eq!(feeds[2]["name"], "stuck", "{j}");
    assert_eq!(feeds[2]["up"], false, "{j}");
    assert!(
        feeds[2]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no answer within 1s")),
        "{j}"
    );
    // The sampler keeps sampling: samples are kept one after another despite the stuck feed.
    let kept = j["samples_kept"].as_u64().unwrap();
    wait_for(Duration::from_secs(20), "two more samples", async || {
        let (_, body) = get(&json_url).await;
        serde_json::from_str::<Value>(&body)
            .is_ok_and(|j| j["samples_kept"].as_u64().is_some_and(|n| n >= kept + 2))
    })
    .await;

    // The feed's own /metrics says the same.
    let (code, own) = get(&format!("{}/metrics", feed.base)).await;
    assert_eq!(code, 200);
    assert_eq!(
        metric(&own, "postroom_inbox_feed_stored_total"),
        Some(3.0),
        "{own}"
    );
    assert_eq!(
        metric(&own, "postroom_inbox_feed_duplicates_total"),
        Some(1.0),
        "{own}"
    );
    assert_eq!(
        metric(&own, "postroom_inbox_feed_lag_messages"),
        Some(0.0),
        "{own}"
    );

    // The pipeline page.
    let (code, page) = get(&format!("{}/pipeline", console.base)).await;
    assert_eq!(code, 200);
    let row = format!(r#"data-feed="rabbit" data-consumer="{CONSUMER}" data-up="true""#);
    let at = page.find(&row).unwrap_or_else(|| panic!("{row} in {page}"));
    let tr = &page[at..at + page[at..].find("</tr>").unwrap()];
    assert!(
        tr.contains(&format!(r#"<td class="feed-addr">{feed_addr}</td>"#)),
        "{tr}"
    );
    assert!(tr.contains(r#"<td class="feed-lag">0</td>"#), "{tr}");
    assert!(tr.contains(r#"<td class="feed-stored">3</td>"#), "{tr}");
    assert!(tr.contains(r#"<td class="feed-duplicates">1</td>"#), "{tr}");
    let gone = page
        .find(r#"data-feed="gone" data-consumer="" data-up="false""#)
        .unwrap_or_else(|| panic!("the silent feed's row in {page}"));
    let tr = &page[gone..gone + page[gone..].find("</tr>").unwrap()];
    assert!(tr.contains(r#"<span class="down">down</span>"#), "{tr}");

    // As a browser shows it (headless Chromium); a screenshot in
    // target/console-screenshots/feeds.png.
    let b = Browser::start().await;
    b.goto(&format!("{}/pipeline", console.base)).await;
    b.wait_text(
        r#"tr[data-feed="rabbit"] td.feed-duplicates"#,
        "1",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        b.text(r#"tr[data-feed="rabbit"] td.feed-stored"#).await,
        "3"
    );
    assert_eq!(b.text(r#"tr[data-feed="gone"] .down"#).await, "down");
    let shots = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("console-screenshots");
    b.screenshot(&shots.join("feeds.png")).await;
    b.quit().await;

    // The console's /metrics re-exports the figures.
    let (_, mine) = get(&format!("{}/metrics", console.base)).await;
    for (line, value) in [
        ("postroom_console_feed_up{feed=\"rabbit\"}", 1.0),
        ("postroom_console_feed_up{feed=\"gone\"}", 0.0),
        (
            "postroom_console_feed_stored{feed=\"rabbit\",consumer=\"inventory\"}",
            3.0,
        ),
        (
            "postroom_console_feed_duplicates{feed=\"rabbit\",consumer=\"inventory\"}",
            1.0,
        ),
        (
            "postroom_console_feed_lag_messages{feed=\"rabbit\",consumer=\"inventory\"}",
            0.0,
        ),
    ] {
        let read = mine
            .lines()
            .find_map(|l| l.strip_prefix(line)?.trim().parse::<f64>().ok());
        assert_eq!(read, Some(value), "{line} in {mine}");
    }

    assert!(console.terminate(Duration::from_secs(30)).success());
    drop(stuck);
    assert!(feed.terminate(Duration::from_secs(30)).success());
    transport.close().await;
    cleanup(&prefix).await;
}
