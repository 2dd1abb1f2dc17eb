//! A user who follows the README's Usage example but leaves out `create_table`, `check` and
//! `on_error`, with no tracing subscriber: the failing job is still visible, on standard error,
//! once, naming the lock and saying how to create the table — not once per fire.

use std::process::Command;

#[test]
fn a_job_whose_table_is_missing_is_reported_on_stderr_once_without_a_subscriber() {
    // 4 s with a job every second: at least 3 fire times, each of which fails the same way.
    let out = Command::new(env!("CARGO_BIN_EXE_forgot-the-table")).arg("4").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    let count = |prefix: &str| -> u64 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix:?} line in stdout:\n{stdout}"))
    };
    let fires = count("fire times passed:");
    assert!(
        fires >= 3,
        "the run saw {fires} fire times; it needs several to show the report is not repeated"
    );
    assert_eq!(count("task runs:"), 0, "the task ran although its lock could never be tried");

    let reports = stderr.matches("cannot run").count();
    assert_eq!(reports, 1, "{fires} failing fires must give exactly one report:\n{stderr}");
    assert!(stderr.contains("\"nightly-report\""), "the report names the lock:\n{stderr}");
    assert!(
        stderr.contains("create_table()"),
        "the report says how to create the table:\n{stderr}"
    );
    assert_eq!(
        stderr.matches("CREATE TABLE").count(),
        1,
        "the DDL is quoted once, in the one report:\n{stderr}"
    );
}
