//! Writing to standard output when its reader may go away early (`postroom parking list
//! --json | head -1`, `postroom demo | head`): a closed pipe is the reader having what it
//! wanted, never a panic or an error message.
//!
//! Two ways to end, by what the output is:
//! - [`line()`] for a command whose output is its result: the write fails with
//!   [`OpsErrorKind::OutputClosed`], the command stops there, and the command line ends quietly
//!   with success;
//! - [`say()`] for the printed summary of a run whose result is elsewhere (a demo's verdict,
//!   its JSON report, its exit status): the line is dropped and the run goes on.

use crate::{OpsError, OpsErrorKind, OpsResult};
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Write one line of a run's summary to standard output; a reader that went away drops it
/// quietly, and any other failure is said once on standard error. The run's outcome does
/// not depend on who reads its summary.
pub fn say(args: std::fmt::Arguments<'_>) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if let Err(e) = writeln!(io::stdout().lock(), "{args}")
        && e.kind() != io::ErrorKind::BrokenPipe
        && !SAID.swap(true, Ordering::Relaxed)
    {
        let _ = writeln!(
            io::stderr(),
            "cannot write the report to standard output: {e}"
        );
    }
}

/// `println!` for a run's summary, through [`say()`].
#[macro_export]
macro_rules! say {
    () => {
        $crate::output::say(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::say(format_args!($($arg)*))
    };
}
