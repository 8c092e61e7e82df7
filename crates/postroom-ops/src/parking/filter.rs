//! A parking filter as typed by an operator (flags or query parameters), checked and turned
//! into the store's [`ParkingFilter`].

use crate::error::{OpsError, OpsResult};
use crate::time::parse_time;
use chrono::{DateTime, Utc};
use postroom_core::{MessageId, ParkingFilter};

/// Which parked messages, as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterSpec {
    /// Message type.
    pub message_type: Option<String>,
    /// Error class: transient, permanent or unknown.
    pub error_class: Option<String>,
    /// Error code.
    pub error_code: Option<String>,
    /// Consumer that parked them.
    pub consumer: Option<String>,
    /// Parked at or after: RFC 3339 or an age (`2h`).
    pub since: Option<String>,
    /// Parked before: RFC 3339 or an age.
    pub until: Option<String>,
    /// Message ids.
    pub ids: Vec<String>,
    /// Also messages already redriven (listings only).
    pub include_redriven: bool,
}

impl FilterSpec {
    /// The store filter, with ages counted back from `now`.
    pub fn to_filter(&self, now: DateTime<Utc>) -> OpsResult<ParkingFilter> {
        let time = |s: &Option<String>| s.as_deref().map(|t| parse_time(t, now)).transpose();
        let (since, until) = (time(&self.since)?, time(&self.until)?);
        if let (Some(s), Some(u)) = (since, until)
            && s >= u
        {
            let at = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            return Err(OpsError::usage(format!(
                "the time span is empty: since {} ({}) is not before until {} ({}), so no parked message can match",
                self.since.as_deref().unwrap_or_default(),
                at(s),
                self.until.as_deref().unwrap_or_default(),
                at(u),
            )));
        }
        Ok(ParkingFilter {
            message_type: self.message_type.clone(),
            error_class: self
                .error_class
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(OpsError::usage)?,
            error_code: self.error_code.clone(),
            consumer: self.consumer.clone(),
            since,
            until,
            ids: self
                .ids
                .iter()
                .map(|s| parse_id(s))
                .collect::<OpsResult<_>>()?,
            include_redriven: self.include_redriven,
        })
    }
}

/// A message id.
pub fn parse_id(s: &str) -> OpsResult<MessageId> {
    s.trim()
        .parse::<MessageId>()
        .map_err(|e| OpsError::usage(format!("bad message id {s:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use postroom_core::ErrorClass;

    #[test]
    fn filters_from_text() {
        let now = Utc::now();
        let f = FilterSpec {
            error_class: Some("permanent".into()),
            since: Some("2h".into()),
            ids: vec![MessageId::new().to_string()],
            ..FilterSpec::default()
        }
        .to_filter(now)
        .unwrap();
        assert_eq!(f.error_class, Some(ErrorClass::Permanent));
        assert_eq!(f.since, Some(now - chrono::Duration::hours(2)));
        assert_eq!(f.ids.len(), 1);
        for bad in [
            FilterSpec {
                error_class: Some("fatal".into()),
                ..FilterSpec::default()
            },
            FilterSpec {
                since: Some("9000000000000s".into()),
                ..FilterSpec::default()
            },
            FilterSpec {
                until: Some("yesterday".into()),
                ..FilterSpec::default()
            },
            FilterSpec {
                ids: vec!["42".into()],
                ..FilterSpec::default()
            },
            // Until two hours ago, since one hour ago: nothing can match.
            FilterSpec {
                since: Some("1h".into()),
                until: Some("2h".into()),
                ..FilterSpec::default()
            },
        ] {
            assert!(bad.to_filter(now).is_err(), "{bad:?}");
        }
    }
}
