//! `logonfault` (spec §14 step 8): when the displaced instruction of a
//! breakpoint faults, the thread gets the signal as it would untraced, and
//! the records of that hit are kept only with `logonfault = yes`; the hit
//! is counted as `faulted`, dropped records as `discarded`. On every
//! step-over path that executes the instruction: out of line (the fault
//! predicted from the operands) and single-step in place (the fault seen).

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, output_within, progs, scratch, wprobe, write};

pub const CASES: &[Case] = &[case!(
    records_of_a_faulting_step_follow_logonfault,
    Need::Ptrace
)];

fn faulting() -> std::path::PathBuf {
    gcc(
        "faulting",
        &progs().join("faulting.c"),
        &["-O2", "-fcf-protection=none"],
    )
}

/// (records' first words, stats, target's stdout, exit status).
fn run(logonfault: bool, policy: &str) -> (Vec<u64>, serde_json::Value, String, Option<i32>) {
    let exe = faulting();
    let prog = write(
        &format!("lof_{logonfault}.rpn"),
        format!(
            "name = {}\noffset = load\nlogonfault = {}\n push r, rdi\n log 1\n",
            exe.display(),
            if logonfault { "yes" } else { "no" }
        ),
    );
    // The ptrace transport executes the displaced instruction itself
    // (`step_faults`); the in-process one runs it relocated in the stub,
    // after the records are written.
    let mut c = wprobe();
    c.args(["run", "--transport", "ptrace"])
        .arg(&prog)
        .args(["--format", "json", "--"])
        .arg(&exe)
        .current_dir(scratch())
        .env("WPROBE_STEP_POLICY", policy);
    let o = output_within(c, 60);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let json: Vec<serde_json::Value> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let words = json
        .iter()
        .filter(|v| v["kind"] == "log")
        .map(|v| v["items"][0]["values"][0].as_u64().unwrap())
        .collect();
    let stats = json.last().cloned().unwrap_or_default();
    let target = out.lines().filter(|l| !l.starts_with('{')).collect();
    assert!(
        o.status.code().is_some(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    (words, stats, target, o.status.code())
}

fn records_of_a_faulting_step_follow_logonfault() {
    for policy in ["auto", "no-emulation", "single-step"] {
        // logonfault = no: the NULL call's record is discarded.
        let (words, stats, target, code) = run(false, policy);
        assert_eq!(
            target, "sum=10 caught=1",
            "the program as untraced ({policy})"
        );
        assert_eq!(code, Some(0));
        assert_eq!(words.len(), 2, "{policy}: {words:x?} {stats}");
        assert!(
            words.iter().all(|&w| w != 0),
            "{policy}: the NULL call's record went"
        );
        let p = &stats["probes"][0];
        assert_eq!(
            (
                &p["hits"],
                &p["runs"],
                &p["records"],
                &p["faulted"],
                &p["discarded"]
            ),
            (
                &serde_json::json!(3),
                &serde_json::json!(3),
                &serde_json::json!(2),
                &serde_json::json!(1),
                &serde_json::json!(1)
            ),
            "{policy}: {stats}"
        );
        // logonfault = yes: all three records.
        let (words, stats, target, _) = run(true, policy);
        assert_eq!(target, "sum=10 caught=1");
        assert_eq!(words.len(), 3, "{policy}: {words:x?}");
        assert_eq!(words[1], 0, "the NULL call's rdi");
        let p = &stats["probes"][0];
        assert_eq!(
            (&p["records"], &p["faulted"], &p["discarded"]),
            (
                &serde_json::json!(3),
                &serde_json::json!(1),
                &serde_json::json!(0)
            ),
            "{policy}: {stats}"
        );
    }
}
