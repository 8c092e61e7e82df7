//! The operations registry's errors as postroom errors, so a program handles one type.

use postroom_core::{Error, ErrorKind};
use postroom_ops::{OpsError, OpsErrorKind};

/// An operations error as a postroom [`Error`] of the nearest kind (its message keeps every
/// detail, passwords already removed).
pub(crate) fn from_ops(e: OpsError) -> Error {
    let kind = match e.kind {
        OpsErrorKind::Usage => ErrorKind::Config,
        OpsErrorKind::Unreachable => ErrorKind::Connection,
        OpsErrorKind::InvariantFailed | OpsErrorKind::Failed => ErrorKind::Io,
    };
    Error::new(kind, e.message)
}
