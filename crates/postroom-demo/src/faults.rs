//! Faults the soak injects into a broker: a restart (every connection drops, the broker keeps
//! its data). A restart is a list of commands run in order: a transport's own where there is
//! one, or a shell command the operator gives (`--restart-command`) for any transport — a
//! broker run by a service manager, a container, or a server of a test's own.

use postroom_ops::{OpsError, OpsResult};
use std::time::Duration;

/// The commands that restart a transport's broker, by the transport's name.
const RESTARTS: [(&str, &[&[&str]]); 1] = [(
    "rabbitmq",
    &[
        &["rabbitmqctl", "-q", "stop_app"],
        &["rabbitmqctl", "-q", "start_app"],
    ],
)];

/// How a soak restarts its broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restart {
    steps: Vec<Vec<String>>,
}

impl Restart {
    /// The restart of `transport`'s broker: `command` (run by `sh -c`) when given, else the
    /// transport's own; an error naming `--restart-command` when there is neither.
    pub fn of(transport: &str, command: Option<&str>) -> OpsResult<Self> {
        if let Some(c) = command {
            if c.trim().is_empty() {
                return Err(OpsError::usage("--restart-command is empty"));
            }
            return Ok(Self {
                steps: vec![vec!["sh".into(), "-c".into(), c.into()]],
            });
        }
        RESTARTS
            .iter()
            .find(|(t, _)| *t == transport)
            .map(|(_, steps)| Self {
                steps: steps
                    .iter()
                    .map(|s| s.iter().map(|w| (*w).to_string()).collect())
                    .collect(),
            })
            .ok_or_else(|| {
                OpsError::usage(format!(
                    "--restart-broker: the soak cannot restart a {transport} broker by itself; \
                     give the command that does with --restart-command"
                ))
            })
    }

    /// Run the commands in order, pausing between them.
    pub async fn run(&self) -> OpsResult {
        for (i, step) in self.steps.iter().enumerate() {
            eprintln!("         restarting the broker: {}", step.join(" "));
            if i > 0 {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            let status = tokio::process::Command::new(&step[0])
                .args(&step[1..])
                .status()
                .await
                .map_err(|e| OpsError::failed(format!("cannot run {}: {e}", step[0])))?;
            if !status.success() {
                return Err(OpsError::failed(format!(
                    "{} failed: {status}",
                    step.join(" ")
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Restart;

    #[test]
    fn a_command_serves_any_transport_and_a_missing_one_is_named() {
        assert_eq!(Restart::of("rabbitmq", None).unwrap().steps.len(), 2);
        let own = Restart::of("nats", Some("my-restart --now")).unwrap();
        assert_eq!(own.steps, [["sh", "-c", "my-restart --now"]]);
        let e = Restart::of("nats", None).unwrap_err();
        assert!(e.message.contains("--restart-command"), "{e}");
        assert!(Restart::of("nats", Some("  ")).is_err());
    }

    #[tokio::test]
    async fn a_failing_command_fails_the_restart() {
        assert!(Restart::of("x", Some("true")).unwrap().run().await.is_ok());
        let e = Restart::of("x", Some("exit 3"))
            .unwrap()
            .run()
            .await
            .unwrap_err();
        assert!(e.message.contains("failed"), "{e}");
    }
}
