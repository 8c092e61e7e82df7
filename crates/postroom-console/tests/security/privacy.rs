//! Payloads stay with the roles allowed to see them: the audit of an edit-and-redrive tells a
//! viewer who changed a payload and where, never the values; a decode error names where a body
//! did not fit and what was expected, never the value; and viewers neither see nor search
//! error texts (a handler's own message may quote the payload).

use crate::common::{
    CONSUMER, SECRET, logged_in, parked, parked_from, serve_to_users, wait_for_run_end,
};
use crate::first_id;
use postroom_core::{Envelope, OutgoingMessage, ParkingFilter, ParkingStore};
use reqwest::StatusCode;

const CARD: &str = "4111 1111 1111 1111";
const NEW_EMAIL: &str = "alice@example.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_who_edited_a_payload_and_where_but_never_the_values() {
    let p = parked(1, 0, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let id = first_id(&p.store).await;
    let parked = p.store.get(id.parse().unwrap()).await.unwrap().remove(0);
    let mut body: serde_json::Value = serde_json::from_slice(&parked.body).unwrap();
    body["data"]["sku"] = "A-9".into();
    body["data"]["email"] = NEW_EMAIL.into();
    let mut admin = logged_in(&base, "admin").await;
    admin
        .get(&format!("/messages/{id}/edit?consumer={CONSUMER}"))
        .await;
    let (status, page, location) = admin
        .post(
            &format!("/messages/{id}/edit"),
            &[("consumer", CONSUMER), ("body", &body.to_string())],
            true,
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{page}");
    let run = location.expect("the run's page");
    wait_for_run_end(&p.store, run.trim_start_matches("/runs/")).await;

    // A role that may see payloads sees the old and new values: the check below can fail.
    let mut operator = logged_in(&base, "operator").await;
    for path in ["/audit", run.as_str()] {
        let (_, page, _) = operator.get(path).await;
        assert!(
            page.contains(SECRET) && page.contains(NEW_EMAIL),
            "the operator's {path} lacks the edit's values:\n{page}"
        );
    }
    let mut viewer = logged_in(&base, "viewer").await;
    for path in ["/audit", run.as_str()] {
        let (status, page, _) = viewer.get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        for value in [SECRET, NEW_EMAIL, "A-9"] {
            assert!(
                !page.contains(value),
                "a viewer's {path} shows the payload value {value:?}:\n{page}"
            );
        }
        assert!(
            page.contains("admin") && page.contains("redrive.start"),
            "a viewer's {path} says who changed the payload:\n{page}"
        );
        assert!(
            page.contains("/data/email") && page.contains("/data/sku"),
            "a viewer's {path} says which fields changed:\n{page}"
        );
    }
}

/// An order envelope whose `schema_version` is a card number (the decoder refuses it), and
/// one whose quantity is negative (the handler refuses it, quoting the quantity).
fn hostile_orders() -> Vec<OutgoingMessage> {
    let order = |qty: i64| {
        Envelope::builder("order.created", "shop")
            .aggregate("order", "o-1", 1)
            .data(serde_json::json!({"order": 1, "sku": "A-1", "qty": qty, "email": SECRET}))
            .build()
    };
    let mut card: serde_json::Value = serde_json::from_slice(&order(1).to_bytes()).unwrap();
    card["schema_version"] = format!("card {CARD}").into();
    vec![
        postroom_testkit::cases::raw_message("order.created", card.to_string()),
        OutgoingMessage::from_envelope(&order(-4111), "order.created"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_error_names_the_field_not_its_value_and_viewers_neither_see_nor_search_error_texts()
 {
    let p = parked_from(hostile_orders(), 2, 0).await;
    let (base, _stop) = serve_to_users(&p.store).await;
    let id_with_code = async |code: &str| {
        ParkingStore::search(
            &p.store,
            &ParkingFilter {
                error_code: Some(code.into()),
                ..ParkingFilter::default()
            },
            1,
        )
        .await
        .unwrap()[0]
            .message_id
    };
    let undecodable = id_with_code("malformed").await;
    let negative = id_with_code("bad_quantity").await;

    let stored = &p.store.get(undecodable).await.unwrap()[0].error_message;
    assert!(
        !stored.contains("4111"),
        "the decoder's error quotes the payload: {stored}"
    );
    assert!(
        stored.contains("schema_version") && stored.contains("expected u32"),
        "the decoder's error names the field and the expected type: {stored}"
    );

    // An operator reads the handler's own words, payload and all: the checks below can fail.
    let mut operator = logged_in(&base, "operator").await;
    let (_, page, _) = operator.get(&format!("/messages/{negative}")).await;
    assert!(page.contains("quantity -4111 is negative"), "{page}");
    let (status, page, _) = operator.get("/parking?q=4111").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"<span id="count">1</span>"#), "{page}");

    let mut viewer = logged_in(&base, "viewer").await;
    for path in [
        "/parking".to_string(),
        "/groups".to_string(),
        format!("/messages/{undecodable}"),
        format!("/messages/{negative}"),
    ] {
        let (status, page, _) = viewer.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(
            !page.contains("4111") && !page.contains("is negative"),
            "a viewer's {path} shows an error text:\n{page}"
        );
    }
    let (status, page, _) = viewer.get("/parking?q=4111").await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a viewer searched the error texts:\n{page}"
    );
    // What a viewer may filter by still works.
    let (status, page, _) = viewer.get("/parking?code=bad_quantity").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"<span id="count">1</span>"#), "{page}");
}
