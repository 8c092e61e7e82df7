//! Helpers shared by the CLI's broker tests.
#![allow(dead_code)]

use std::process::Command;

pub fn amqp() -> String {
    std::env::var("POSTROOM_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

pub fn pg_admin() -> String {
    std::env::var("POSTROOM_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub fn postroom(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_postroom"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run postroom")
}

pub fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "failed\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub async fn cleanup(prefix: &str) {
    let url = postroom_cli::stack::management_url(&amqp());
    let api = postroom_rabbitmq::ManagementApi::new(&url, "/").unwrap();
    let _ = api.delete_everything_named(prefix).await;
}
