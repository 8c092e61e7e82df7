//! The console in a real headless Chromium, driven over WebDriver, against a SQLite store
//! whose parked messages the real consumer loop produced: an operator logs in, filters,
//! opens a failure group, previews a redrive, redrives it at a rate and watches the progress
//! reach the end, then finds the run in the audit; a POST without the CSRF token is refused;
//! a viewer sees no payload and no redrive button. Screenshots of the main pages are kept in
//! `target/console-screenshots/`.

mod common;

use common::webdriver::Browser;
use common::{CONSUMER, PASSWORD, SECRET, parked, serve, users};
use postroom_console::Auth;
use postroom_core::{ParkingFilter, ParkingStore};
use std::path::PathBuf;
use std::time::Duration;

fn shots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("console-screenshots")
}

async fn login(b: &Browser, base: &str, user: &str) {
    b.goto(&format!("{base}/login")).await;
    b.find("#username").await.set(user).await;
    b.find("#password").await.set(PASSWORD).await;
    b.find("#login").await.click().await;
    b.wait_text(
        "#whoami",
        &format!("{user} ({user})"),
        Duration::from_secs(10),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_redrives_a_group_from_the_browser_and_a_viewer_cannot() {
    let p = parked(5, 2, 3).await;
    let (base, _stop) = serve(&p.store, Auth::Users(users())).await;
    let b = Browser::start().await;
    let dir = shots();

    // Not logged in: the login page.
    b.goto(&format!("{base}/parking")).await;
    b.find("#login").await;
    b.screenshot(&dir.join("login.png")).await;
    login(&b, &base, "operator").await;

    // Filter by error code, then by text in the error message.
    b.wait_text("#count", "7", Duration::from_secs(10)).await;
    b.find("#f-code").await.set("bad_payload").await;
    b.find("#apply-filters").await.click().await;
    b.wait_text("#count", "5", Duration::from_secs(10)).await;
    b.find("#f-code").await.set("").await;
    b.find("#f-q").await.set("NEGATIVE quantity").await;
    b.find("#apply-filters").await.click().await;
    b.wait_text("#count", "2", Duration::from_secs(10)).await;
    // A time range: nothing parked in the future, everything since a year ago.
    b.find("#f-q").await.set("").await;
    b.find("#f-since").await.set("2999-01-01T00:00").await;
    b.find("#apply-filters").await.click().await;
    b.wait_text("#count", "0", Duration::from_secs(10)).await;
    let year_ago = (chrono::Utc::now() - chrono::Duration::days(365))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    b.find("#f-since").await.set(&year_ago).await;
    b.find("#apply-filters").await.click().await;
    b.wait_text("#count", "7", Duration::from_secs(10)).await;
    b.goto(&format!("{base}/parking")).await;
    b.screenshot(&dir.join("parking.png")).await;

    // A selection of two messages previews as two.
    b.find("#messages tbody tr:nth-child(1) input.sel")
        .await
        .click()
        .await;
    b.find("#messages tbody tr:nth-child(2) input.sel")
        .await
        .click()
        .await;
    b.find("#preview-selected").await.click().await;
    b.wait_text("#preview-count", "2", Duration::from_secs(10))
        .await;

    // A message with every diagnostic; the operator sees its payload.
    let id = ParkingStore::search(&p.store, &ParkingFilter::default(), 1)
        .await
        .unwrap()[0]
        .message_id;
    b.goto(&format!("{base}/messages/{id}")).await;
    assert!(b.text("#payload").await.contains(SECRET));
    b.screenshot(&dir.join("message.png")).await;

    // A POST from the page without the CSRF token is refused, and starts nothing.
    let status = b
        .execute(&format!(
            "return fetch('/redrive/start', {{method: 'POST', headers: {{'content-type': 'application/x-www-form-urlencoded'}}, body: 'rate=5&sel={id}+{CONSUMER}'}}).then(r => r.status)"
        ))
        .await;
    assert_eq!(status, 403);
    assert!(p.store.redrive_runs(10).await.unwrap().is_empty());

    // Failure groups: the cause of five messages, then the other.
    b.goto(&format!("{base}/groups")).await;
    b.wait_text("#group-count", "2", Duration::from_secs(10))
        .await;
    b.wait_text(
        "#groups tr.group:first-child td.count",
        "5",
        Duration::from_secs(10),
    )
    .await;
    b.screenshot(&dir.join("groups.png")).await;
    b.find("#groups tr.group:first-child a.group-link")
        .await
        .click()
        .await;
    b.wait_text("#group-size", "5", Duration::from_secs(10))
        .await;
    assert_eq!(b.text("#template").await, "order <n> has no sku");

    // Dry run: how many, which consumers, a histogram by type; nothing sent.
    b.find("#preview-group").await.click().await;
    b.wait_text("#preview-count", "5", Duration::from_secs(10))
        .await;
    assert_eq!(b.text("#preview-consumers").await, "inventory: 5");
    assert!(b.text("#histogram").await.contains("order.created"));
    b.screenshot(&dir.join("dry-run.png")).await;
    assert!(
        p.store.redrive_runs(10).await.unwrap().is_empty(),
        "a dry run records nothing"
    );

    // Redrive at 4 messages a second and watch the progress reach the end.
    b.find("#rate").await.set("4").await;
    b.find("#start-redrive").await.click().await;
    b.find("#run-progress").await;
    b.wait_text("#run-total", "5", Duration::from_secs(10))
        .await;
    // The page polls the progress and reloads itself once the run ended: the page after the
    // reload (rendered by the server with the run final) is the one to read. Reading the
    // audit as soon as the polled state said "finished" read the page before its reload.
    b.wait_for(r#"#run[data-final="true"]"#, Duration::from_secs(60))
        .await;
    assert_eq!(b.text("#run-state").await, "finished");
    assert_eq!(b.text("#run-done").await, "5");
    b.screenshot(&dir.join("run.png")).await;
    let run_audit = b.text("#run-audit").await;
    assert!(
        run_audit.contains("redrive.start") && run_audit.contains("redrive.end"),
        "{run_audit}"
    );
    let runs = p.store.redrive_runs(10).await.unwrap();
    assert_eq!(
        (runs.len(), runs[0].done, runs[0].operator.as_str()),
        (1, 5, "operator")
    );

    // The audit names who redrove what.
    b.goto(&format!("{base}/audit")).await;
    let audit = b.text("#audit").await;
    assert!(audit.contains("operator redrive.start"), "{audit}");
    b.screenshot(&dir.join("audit.png")).await;

    // The redriven messages wait in the consumer's queue.
    b.goto(&format!("{base}/pipeline")).await;
    b.wait_text(
        &format!("tr[data-consumer=\"{CONSUMER}\"] td.ready"),
        "5",
        Duration::from_secs(10),
    )
    .await;
    b.screenshot(&dir.join("pipeline.png")).await;

    // A viewer: no payload, no redrive, and refused when trying anyway.
    b.find("#logout").await.click().await;
    b.find("#login").await;
    login(&b, &base, "viewer").await;
    let other = ParkingStore::search(&p.store, &ParkingFilter::default(), 1)
        .await
        .unwrap()[0]
        .message_id;
    b.goto(&format!("{base}/messages/{other}")).await;
    b.find("#payload-hidden").await;
    assert!(b.try_find("#payload").await.is_none());
    assert!(
        b.try_find(".preview-one").await.is_none(),
        "no redrive button for a viewer"
    );
    let page = b.execute("return document.documentElement.outerHTML").await;
    assert!(
        !page.as_str().unwrap_or("").contains(SECRET),
        "the payload reached a viewer's page"
    );
    let status = b
        .execute(&format!(
            "const t = document.querySelector('input[name=csrf]').value; return fetch('/redrive/start', {{method: 'POST', headers: {{'content-type': 'application/x-www-form-urlencoded'}}, body: 'rate=5&sel={other}+{CONSUMER}&csrf=' + t}}).then(r => r.status)"
        ))
        .await;
    assert_eq!(
        status, 403,
        "a viewer's redrive is refused even with the token"
    );
    assert_eq!(p.store.redrive_runs(10).await.unwrap().len(), 1);
    b.quit().await;
}
