//! What every broker's topology configuration does when it is loaded from the text of a
//! file: the parser's error becomes a configuration error that says which configuration it
//! was, the parsed configuration checks itself before anyone uses it, and each consumer is
//! listed once.
//!
//! The helpers take what the parser returned, so they serve any text format; [`text`] and
//! [`duration_text`] write values the way the files do (`#[serde(with = "…")]`).

use crate::{Error, ErrorKind, Result};
use std::collections::BTreeSet;
use std::fmt::Display;

/// A configuration just parsed from text, ready to use once `validate` accepts it.
///
/// A parse error becomes an [`ErrorKind::Config`] error reading `<what>: <parse error>`
/// (e.g. `SQS topology config: missing field ...`); an error of `validate` is returned as it
/// is.
pub fn parse_checked<T, E: Display>(
    what: &str,
    parsed: std::result::Result<T, E>,
    validate: impl FnOnce(&T) -> Result<()>,
) -> Result<T> {
    let config = parsed.map_err(|e| Error::new(ErrorKind::Config, format!("{what}: {e}")))?;
    validate(&config)?;
    Ok(config)
}

/// The consumer names met so far while checking a configuration's list of consumers, to
/// refuse a consumer listed twice.
#[derive(Debug, Default)]
pub struct ConsumersSeen<'a> {
    names: BTreeSet<&'a str>,
}

impl<'a> ConsumersSeen<'a> {
    /// No consumer met yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Note the consumer `name`; an [`ErrorKind::Config`] error if it was met before.
    pub fn note(&mut self, name: &'a str) -> Result<()> {
        if self.names.insert(name) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Config,
                format!("consumer {name:?} is listed twice"),
            ))
        }
    }
}

/// A value kept in a file as its text (`Display` writes it, `FromStr` reads it back), e.g. a
/// [`RetryLadder`](crate::RetryLadder) as `5s,30s,5m`. For `#[serde(with = "…")]`.
pub mod text {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::fmt::Display;
    use std::str::FromStr;

    /// Write `value` as its text.
    pub fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&value.to_string())
    }

    /// Read a value from its text; the parse error is the deserializer's error.
    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr<Err: Display>,
        D: Deserializer<'de>,
    {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A [`Duration`](std::time::Duration) kept in a file as text: `250ms`, `5s`, `2m`, `1h` (the
/// way the retry ladder writes its delays), zero as `0s`. For `#[serde(with = "…")]`.
pub mod duration_text {
    use crate::retry::ladder::{format_duration, parse_duration};
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Write `d` as text.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    /// Read a duration from its text ([`parse_duration`]).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parse_error_names_the_configuration_and_the_check_runs_after_parsing() {
        let err = parse_checked("topology config", "x".parse::<u32>(), |_| Ok(())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert_eq!(
            err.message(),
            "topology config: invalid digit found in string"
        );
        let refused = parse_checked("c", "7".parse::<u32>(), |n| {
            Err(Error::new(ErrorKind::Config, format!("{n} is odd")))
        })
        .unwrap_err();
        assert_eq!(refused.message(), "7 is odd");
        assert_eq!(
            parse_checked("c", "8".parse::<u32>(), |_| Ok(())).unwrap(),
            8
        );
    }

    #[test]
    fn ladders_and_durations_round_trip_as_text() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct File {
            #[serde(with = "text")]
            ladder: crate::RetryLadder,
            #[serde(with = "duration_text")]
            wait: std::time::Duration,
        }
        let json = r#"{"ladder":"5s,30s,5m","wait":"0s"}"#;
        let file: File = serde_json::from_str(json).unwrap();
        assert_eq!(file.ladder, crate::RetryLadder::default());
        assert!(file.wait.is_zero());
        assert_eq!(serde_json::to_string(&file).unwrap(), json);
        let err = serde_json::from_str::<File>(r#"{"ladder":"5s","wait":"5x"}"#).unwrap_err();
        assert!(err.to_string().contains("bad duration unit"), "{err}");
    }

    #[test]
    fn a_consumer_listed_twice_is_refused() {
        let mut seen = ConsumersSeen::new();
        seen.note("orders").unwrap();
        seen.note("billing").unwrap();
        let err = seen.note("orders").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert_eq!(err.message(), "consumer \"orders\" is listed twice");
    }
}
