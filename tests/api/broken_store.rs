//! Start-up against a store that cannot be used: the server says so in one plain line that
//! names the file and what to do, exits 1, and never says it is serving.

use std::process::Command;

use crate::helpers::fresh_db;

/// Runs the binary against `db`; returns its exit code, stdout and stderr.
fn start_against(db: &std::path::Path) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_retrylab"))
        .args(["--addr", "127.0.0.1:0", "--db"])
        .arg(db)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (output.status.code(), text(output.stdout), text(output.stderr))
}

fn assert_refused(db: &std::path::Path, says: &str) {
    let (code, stdout, stderr) = start_against(db);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(!stdout.contains("serving"), "it said it was serving: {stdout}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(&db.display().to_string()), "names the file: {stderr}");
    assert!(stderr.contains(says), "says {says:?}: {stderr}");
    assert!(!stderr.contains("Custom {") && !stderr.contains("StoreError"), "no debug form: {stderr}");
}

#[test]
fn a_corrupt_store_is_refused_before_serving_in_one_plain_line() {
    let db = fresh_db();
    let mut junk = b"SQLite format 3\0".to_vec();
    junk.extend(std::iter::repeat_n(0x5a, 8192));
    std::fs::write(&db, junk).unwrap();
    assert_refused(&db, "move it aside");
}

#[test]
fn a_read_only_store_is_refused_at_start_up() {
    let db = fresh_db();
    // A good store first, then made read-only.
    let connection = rusqlite::Connection::open(&db).unwrap();
    connection.execute_batch("CREATE TABLE t (x); PRAGMA user_version = 0;").unwrap();
    drop(connection);
    let mut permissions = std::fs::metadata(&db).unwrap().permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(&db, permissions).unwrap();
    // Root writes read-only files anyway: an immutable file it cannot.
    let immutable = rusqlite::Connection::open(&db).unwrap().execute_batch("CREATE TABLE u (x)").is_ok();
    if immutable {
        let made = Command::new("chattr").arg("+i").arg(&db).status().is_ok_and(|s| s.success());
        assert!(made, "could not make the file read-only for this user");
    }
    let refused = std::panic::catch_unwind(|| assert_refused(&db, "read-only"));
    if immutable {
        let _ = Command::new("chattr").arg("-i").arg(&db).status();
    }
    refused.unwrap();
}
