//! Exit codes scripts can trust, from the kind of an operation's error.

use postroom_ops::{OpsError, OpsErrorKind};
use std::process::ExitCode;

/// 0 success (a closed output pipe included); 1 the operation failed or an invariant did not
/// hold; 2 bad usage or configuration; 3 a server or file could not be reached.
#[must_use]
pub fn exit_code(e: &OpsError) -> ExitCode {
    match e.kind {
        OpsErrorKind::OutputClosed => ExitCode::SUCCESS,
        OpsErrorKind::InvariantFailed | OpsErrorKind::Failed => ExitCode::from(1),
        OpsErrorKind::Usage => ExitCode::from(2),
        OpsErrorKind::Unreachable => ExitCode::from(3),
    }
}
