//! Asking before a state-changing command acts.

use postroom_ops::{OpsError, OpsResult};
use std::io::{IsTerminal, Write};

/// Ask `question` on the terminal; refuse (a usage error) when stdin is not a terminal.
/// `what` says what would not be done (`redrive`, `change the broker`).
pub fn confirm(question: &str, what: &str) -> OpsResult<bool> {
    if !std::io::stdin().is_terminal() {
        return Err(OpsError::usage(format!(
            "refusing to {what} without confirmation: stdin is not a terminal; pass --yes"
        )));
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| OpsError::failed(format!("cannot read the answer: {e}")))?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}
