//! From request parameters to what the stores understand: a listing query from the filter
//! form, and a redrive selection (one message, checked messages, or a failure group).

use super::{Params, not_found};
use crate::backend::ParkingConsole;
use crate::groups::{FailureGroup, group};
use chrono::{DateTime, NaiveDateTime, Utc};
use postroom_core::{Error, ErrorKind, MessageId, ParkingFilter, ParkingQuery, Result};

/// Most parked copies read to build failure groups.
pub(crate) const GROUP_SCAN: usize = 100_000;
/// Most messages one form may check (a page of the listing holds 50).
pub(crate) const MAX_CHECKED: usize = 1000;
/// The longest consumer name a selection may name.
const MAX_CONSUMER_CHARS: usize = 255;

/// A time from a form: RFC 3339, or `YYYY-MM-DDTHH:MM` (a browser's datetime-local), UTC.
fn parse_time(s: &str) -> Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    for fmt in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return Ok(t.and_utc());
        }
    }
    Err(Error::new(
        ErrorKind::Config,
        format!("bad time {s:?}: use 2026-01-31T12:00 (UTC) or RFC 3339"),
    ))
}

/// The listing query of the filter form.
pub(crate) fn query_of(p: &Params) -> Result<ParkingQuery> {
    Ok(ParkingQuery {
        filter: ParkingFilter {
            message_type: p.get("type").map(str::to_string),
            error_class: p
                .get("class")
                .map(str::parse)
                .transpose()
                .map_err(|e: String| Error::new(ErrorKind::Config, e))?,
            error_code: p.get("code").map(str::to_string),
            consumer: p.get("consumer").map(str::to_string),
            since: p.get("since").map(parse_time).transpose()?,
            until: p.get("until").map(parse_time).transpose()?,
            ids: Vec::new(),
            include_redriven: p.get("status") == Some("all"),
        },
        text: p.get("q").map(str::to_string),
        archived: false,
    })
}

/// The filter form's parameters again, for links.
pub(crate) fn query_string(p: &Params) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for k in [
        "type", "consumer", "class", "code", "since", "until", "q", "status",
    ] {
        if let Some(v) = p.get(k) {
            s.append_pair(k, v);
        }
    }
    s.finish()
}

/// A checked message: `"<id> <consumer>"`.
pub(crate) fn parse_item(v: &str) -> Result<(String, MessageId)> {
    let (id, consumer) = v.split_once(' ').ok_or_else(|| {
        Error::new(
            ErrorKind::Config,
            format!(
                "bad selection {:?}",
                postroom_core::message::truncate(v, 80)
            ),
        )
    })?;
    let id = id.parse::<MessageId>().map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!(
                "bad message id {:?}: {e}",
                postroom_core::message::truncate(id, 40)
            ),
        )
    })?;
    if consumer.chars().count() > MAX_CONSUMER_CHARS {
        return Err(Error::new(
            ErrorKind::Config,
            format!("a consumer name is at most {MAX_CONSUMER_CHARS} characters"),
        ));
    }
    Ok((consumer.to_string(), id))
}

/// The live failure group `key`; a not-found error when it has no members.
pub(crate) async fn find_group(parking: &dyn ParkingConsole, key: &str) -> Result<FailureGroup> {
    let rows = parking
        .lot()
        .parked_summaries(&ParkingQuery::default(), GROUP_SCAN)
        .await?;
    group(&rows)
        .into_iter()
        .find(|g| g.key == key)
        .ok_or_else(|| not_found(format!("failure group {key} has no parked messages")))
}

/// What a redrive form selects: a group (`group`), checked messages (`sel`), or none.
pub(crate) struct Selection {
    pub filter: ParkingFilter,
    pub group_key: Option<String>,
    pub items: Vec<(String, MessageId)>,
}

/// The selection of a redrive or archive form.
pub(crate) async fn selection_of(parking: &dyn ParkingConsole, p: &Params) -> Result<Selection> {
    if let Some(key) = p.get("group") {
        let g = find_group(parking, key).await?;
        return Ok(Selection {
            filter: ParkingFilter {
                message_type: g.message_type.clone(),
                error_class: Some(g.error_class),
                error_code: Some(g.error_code.clone()),
                consumer: Some(g.consumer.clone()),
                ids: g.members.iter().map(|(_, id)| *id).collect(),
                ..ParkingFilter::default()
            },
            group_key: Some(g.key),
            items: g.members,
        });
    }
    let checked = p.all("sel");
    if checked.len() > MAX_CHECKED {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "{} messages checked: at most {MAX_CHECKED} at once (redrive or archive a group instead)",
                checked.len()
            ),
        ));
    }
    let items = checked
        .into_iter()
        .map(parse_item)
        .collect::<Result<Vec<_>>>()?;
    if items.is_empty() {
        return Err(Error::new(ErrorKind::Config, "no message selected"));
    }
    let first = &items[0].0;
    let one_consumer = items.iter().all(|(c, _)| c == first);
    Ok(Selection {
        filter: ParkingFilter {
            consumer: one_consumer.then(|| first.clone()),
            ids: items.iter().map(|(_, id)| *id).collect(),
            ..ParkingFilter::default()
        },
        group_key: None,
        items,
    })
}
