//! Bad input gets a clear error and a trustworthy exit code.

use std::process::Command;

fn postroom(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_postroom"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_config_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("postroom.toml"), "database = [1, 2\n").unwrap();
    let (code, err) = postroom(dir.path(), &["parking", "list"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("bad config file postroom.toml"), "{err}");
}

#[test]
fn unwritable_database_path() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = postroom(
        dir.path(),
        &["demo", "--database", "/nonexistent-dir/x/demo.db"],
    );
    assert_eq!(code, Some(2));
    assert!(
        err.contains("/nonexistent-dir/x") && err.contains("does not exist"),
        "{err}"
    );
}

#[test]
fn demo_refuses_to_overwrite_a_foreign_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.db"), b"not a database of ours").unwrap();
    let (code, err) = postroom(dir.path(), &["demo", "--database", "precious.db"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("not a postroom demo database"), "{err}");
    assert_eq!(
        std::fs::read(dir.path().join("precious.db")).unwrap(),
        b"not a database of ours"
    );
}

#[test]
fn bad_flags() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = postroom(dir.path(), &["demo", "--ladder", "5x"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("bad duration unit"), "{err}");
    let (code, err) = postroom(dir.path(), &["parking", "list", "--database", "missing.db"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("does not exist"), "{err}");
    let (code, err) = postroom(
        dir.path(),
        &[
            "parking",
            "list",
            "--database",
            "x.db",
            "--error-class",
            "fatal",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
}
