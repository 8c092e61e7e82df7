//! `postroom console …`: the web console's users file. `hash-password` reads a password (or
//! an API token) from stdin and prints the argon2 hash a users line takes, made as the
//! console makes hashes ([`postroom_console::auth::hash_password`]): no other tool needed,
//! and the password never on the command line.

use clap::{Args, Subcommand};
use postroom_ops::{OpsError, OpsResult};
use std::io::{BufRead, IsTerminal, Write};
use std::process::{Command, Stdio};

/// `postroom console …`.
#[derive(Debug, Subcommand)]
pub enum ConsoleCommand {
    /// Read a password from stdin (one line; its line end is not part of it) and print its
    /// argon2id hash, made with the console's own settings (m=19456 KiB, t=2, p=1, a random
    /// salt), for a line of the users file (POSTROOM_CONSOLE_USERS_FILE): `NAME ROLE HASH`,
    /// or `token NAME ROLE HASH` when the line read is an API token. At a terminal the
    /// password is asked for and not shown; otherwise it is read from the pipe or file:
    /// `postroom console hash-password < secret.txt`. An empty password is refused.
    HashPassword(HashPasswordArgs),
}

/// `postroom console hash-password` (it takes no flags: the password comes from stdin).
#[derive(Debug, Args)]
pub struct HashPasswordArgs {}

/// Run a `console` command.
pub fn run(cmd: ConsoleCommand) -> OpsResult {
    match cmd {
        ConsoleCommand::HashPassword(HashPasswordArgs {}) => {
            let password = read_password()?;
            let hash = postroom_console::auth::hash_password(&password)?;
            crate::output::out!("{hash}")?;
            Ok(())
        }
    }
}

/// One line of stdin without its line end; asked for without echo at a terminal.
fn read_password() -> OpsResult<String> {
    let stdin = std::io::stdin();
    let at_terminal = stdin.is_terminal();
    let echo_off = at_terminal && stty("-echo");
    if at_terminal {
        eprint!("Password{}: ", if echo_off { "" } else { " (shown)" });
        let _ = std::io::stderr().flush();
    }
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if echo_off {
        stty("echo");
        eprintln!();
    }
    read.map_err(|e| OpsError::usage(format!("cannot read the password from stdin: {e}")))?;
    let password = line
        .strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(&line);
    if password.is_empty() {
        return Err(OpsError::usage(
            "no password on stdin: give it as one line (postroom console hash-password < file)",
        ));
    }
    Ok(password.to_string())
}

/// Set the terminal's `mode` with `stty` (on the terminal stdin is); whether it worked.
fn stty(mode: &str) -> bool {
    Command::new("stty")
        .arg(mode)
        .stdin(Stdio::inherit())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
