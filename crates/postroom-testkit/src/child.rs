//! A test that needs a process of its own to kill, or one that dies of its handler, runs its
//! own test binary again as that process, with only itself selected.

use std::process::Command;

/// A command that runs this test binary again with `test` (its exact name) as the only test,
/// on one thread, its output not captured. The caller adds what tells the child it is one
/// (its environment) and spawns it.
pub fn this_test_again(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command.args([test, "--exact", "--test-threads=1", "--nocapture"]);
    command
}
