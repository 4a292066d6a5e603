//! `wattson acct` takes sacct's flags as sacct users type them. Each flag set is given to the
//! real `sacct` (against a lab slurmctld with slurmdbd) to show that sacct accepts the same
//! spelling, and to `wattson acct` on a node with known records, whose output is checked.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::process::Output;

use common::{Node, assert_ok};
use slurm_lab::{LabOptions, SlurmLab};

fn text(out: &Output) -> String {
    assert_ok(out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Records: job 1 "train" (uid 0) with step 1.0, job 2 "eval" (uid 65534) still running.
fn node() -> Node {
    let mut node = Node::h100(2);
    node.start();
    common::assert_ok(
        &node.wattson(&["job", "begin", "--job", "1", "--uid", "0", "--name", "train", "--gpus", "0"]),
    );
    common::assert_ok(&node.wattson(&["job", "begin", "--job", "1.0", "--uid", "0", "--gpus", "0"]));
    common::assert_ok(&node.wattson(&["job", "end", "--job", "1.0"]));
    common::assert_ok(&node.wattson(&["job", "end", "--job", "1"]));
    common::assert_ok(
        &node.wattson(&["job", "begin", "--job", "2", "--uid", "65534", "--name", "eval", "--gpus", "1"]),
    );
    node
}

#[test]
fn sacct_flags_are_accepted_by_sacct_and_by_wattson_acct() {
    let lab = SlurmLab::start(LabOptions { accounting: true, ..Default::default() });
    let node = node();
    let host = node.record("1").node;
    let nodelist = format!("{host},other[1-3]");
    let window = ["-S", "2020-01-01", "-E", "now"];
    let cases: Vec<Vec<&str>> = vec![
        vec!["-n", "-o", "JobID"],
        vec!["--noheader", "-X", "-o", "JobID"],
        vec!["--allocations", "-o", "JobID,JobName"],
        vec!["-s", "CD", "-o", "JobID"],
        vec!["--state=R,COMPLETED", "-o", "JobID"],
        vec!["--name=train,other", "-o", "JobID"],
        vec!["-N", &nodelist, "-o", "JobID"],
        vec!["-o", "JobID%20,JobName%5"],
        vec!["-o", "JobID%-20,JobName%-5"],
        vec!["--units=K", "-o", "JobID"],
        vec!["-P", "--delimiter=,", "-o", "JobID,JobName"],
        vec!["-u", "root,nobody", "-o", "JobID"],
    ];
    for case in &cases {
        let args: Vec<&str> = case.iter().chain(window.iter()).copied().collect();
        let sacct = lab.run("sacct", &args);
        assert!(sacct.status.success(), "sacct {args:?}: {}", String::from_utf8_lossy(&sacct.stderr));
        assert_ok(&node.wattson(&[&["acct"], &args[..]].concat()));
    }

    let acct = |args: &[&str]| text(&node.wattson(&[&["acct", "-a", "-S", "2020-01-01"], args].concat()));
    // -n: no header; -X: no steps.
    assert_eq!(acct(&["-n", "-P", "-o", "JobID"]), "1\n1.0\n2\n");
    assert_eq!(acct(&["-X", "-P", "-o", "JobID"]), "JobID\n1\n2\n");
    // -s by sacct's short and long names.
    assert_eq!(acct(&["-s", "CD", "-X", "-P", "-n", "-o", "JobID"]), "1\n");
    assert_eq!(acct(&["-s", "running", "-P", "-n", "-o", "JobID"]), "2\n");
    assert_eq!(acct(&["-s", "F", "-P", "-n", "-o", "JobID"]), "", "no failed job is recorded");
    assert!(!node.wattson(&["acct", "-s", "DONE"]).status.success());
    assert!(!lab.run("sacct", &["-s", "DONE"]).status.success(), "sacct refuses it too");
    // -s without -S/-E: only jobs in that state now, as sacct (which accepts it) does.
    assert!(lab.run("sacct", &["-s", "CD", "-o", "JobID"]).status.success());
    let now =
        |state: &str| text(&node.wattson(&["acct", "-a", "-s", state, "-X", "-P", "-n", "-o", "JobID"]));
    assert_eq!(now("R"), "2\n");
    assert_eq!(now("CD"), "", "job 1 ended before now");
    // --name, -N (a hostlist), -u with a list.
    assert_eq!(acct(&["--name", "eval", "-P", "-n", "-o", "JobID"]), "2\n");
    assert_eq!(acct(&["-N", &nodelist, "-X", "-P", "-n", "-o", "JobID"]), "1\n2\n");
    assert_eq!(acct(&["-N", "elsewhere", "-P", "-n", "-o", "JobID"]), "");
    assert_eq!(acct(&["-u", "nobody,65533", "-P", "-n", "-o", "JobID"]), "2\n");
    assert_eq!(acct(&["-u", "root,nobody", "-X", "-P", "-n", "-o", "JobID"]), "1\n2\n");
    // -o Field%N sets the width; --delimiter; --units.
    let table = acct(&["-X", "-o", "JobID%3,JobName%8"]);
    assert_eq!(table.lines().nth(1), Some("--- -------- "), "{table}");
    // %N right-justifies, %-N left-justifies (sacct's man page).
    assert_eq!(table.lines().nth(2), Some("  1    train "), "{table}");
    let table = acct(&["-X", "-n", "-o", "JobID%-3,JobName%-8"]);
    assert_eq!(table.lines().next(), Some("1   train    "), "{table}");
    assert_eq!(acct(&["-X", "-p", "--delimiter=;", "-n", "-o", "JobID,JobName"]), "1;train;\n2;eval;\n");
    let energy = acct(&["-j", "1", "-X", "-P", "-n", "--units=M", "-o", "GPUEnergy"]);
    assert!(energy.trim().ends_with('M'), "{energy}");
    lab.stop();
}
