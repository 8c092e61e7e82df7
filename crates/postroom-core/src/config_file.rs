//! What every broker's topology configuration does when it is loaded from the text of a
//! file: the parser's error becomes a configuration error that says which configuration it
//! was, the parsed configuration checks itself before anyone uses it, and each consumer is
//! listed once.
//!
//! The helpers take what the parser returned, so they serve any text format.

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
    fn a_consumer_listed_twice_is_refused() {
        let mut seen = ConsumersSeen::new();
        seen.note("orders").unwrap();
        seen.note("billing").unwrap();
        let err = seen.note("orders").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert_eq!(err.message(), "consumer \"orders\" is listed twice");
    }
}
