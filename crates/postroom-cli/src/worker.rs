//! Child processes of `demo` and `soak`: started from this same binary, stopped gracefully by
//! closing their standard input, or killed with SIGKILL.

use std::ffi::OsString;
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// A running child.
pub struct Worker {
    child: Child,
    /// Its standard output, line by line.
    pub lines: Option<Lines<BufReader<ChildStdout>>>,
    args: Vec<OsString>,
}

impl Worker {
    /// Start `postroom <args>`.
    pub fn spawn(args: Vec<OsString>) -> std::io::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let lines = child.stdout.take().map(|o| BufReader::new(o).lines());
        Ok(Self { child, lines, args })
    }

    /// The same command again (after a kill).
    pub fn respawn(&self) -> std::io::Result<Self> {
        Self::spawn(self.args.clone())
    }

    /// Process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or_default()
    }

    /// SIGKILL, and reap.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Whether it has exited (without waiting).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Close stdin (the graceful stop signal) and wait up to `grace`, then SIGKILL.
    pub async fn stop(mut self, grace: std::time::Duration) {
        drop(self.child.stdin.take());
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
