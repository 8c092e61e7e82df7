//! A command's results on standard output. A reader that goes away early (`postroom parking
//! list --json | head -1`) has what it wanted: the write fails with a broken pipe, the command
//! stops there, and the process ends quietly with success.

use postroom_ops::{OpsError, OpsErrorKind, OpsResult};
use std::io::{self, Write};

/// Write one line to standard output.
pub fn line(args: std::fmt::Arguments<'_>) -> OpsResult {
    writeln!(io::stdout().lock(), "{args}").map_err(write_error)
}

/// The error of a failed write to standard output: [`OpsErrorKind::OutputClosed`] when its
/// reader went away.
#[must_use]
pub fn write_error(e: io::Error) -> OpsError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        OpsError::new(
            OpsErrorKind::OutputClosed,
            "the reader of the output went away",
        )
    } else {
        OpsError::failed(format!("cannot write output: {e}"))
    }
}

/// `println!` for a command's results: returns an [`OpsResult`] where `println!` panics.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
pub(crate) use out;
