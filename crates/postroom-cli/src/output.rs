//! A command's results on standard output. A reader that goes away early (`postroom parking
//! list --json | head -1`) has what it wanted: the write fails with a broken pipe, the command
//! stops there, and the process ends quietly with success.

pub use postroom_ops::output::{line, write_error};

/// `println!` for a command's results: returns an [`postroom_ops::OpsResult`] where
/// `println!` panics.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
pub(crate) use out;
