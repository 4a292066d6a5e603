//! The controller's fan-out over the link (`wattson_ctld::nodes`), against fake nodes that
//! answer or hang (the lab is there for its munged): a hung node holds one worker, not the
//! others' answers, and no fan-out outlasts its deadline.

use std::time::{Duration, Instant};

use wattson_config::link::LinkConfig;
use wattson_ctld::nodes::Nodes;
use wattson_harness::fake_link::FakeLink;
use wattson_harness::slurm_lab::{LabNode, LabOptions, SlurmLab};

/// `count` nodes named `prefix<i>` at `addr`.
fn candidates(prefix: &str, count: usize, addr: &str) -> Vec<(String, String)> {
    (0..count).map(|i| (format!("{prefix}{i}"), addr.to_string())).collect()
}

#[test]
fn a_hung_node_holds_one_worker_and_the_fan_out_ends_by_its_deadline() {
    let lab =
        SlurmLab::start(LabOptions { nodes: vec![LabNode::new("n1", 1, "h100")], ..Default::default() });
    let munge = lab.dir().join("run/munge.sock");
    let fake = FakeLink::start(&munge);
    let config = LinkConfig {
        port: fake.port,
        munge_socket: Some(munge),
        timeout: Duration::from_secs(3),
        ..LinkConfig::default()
    };

    // A hung node every 51 among answering ones: every answering node confirms, and the
    // whole costs about one link timeout (asked in fixed batches of 32, every batch with a hung
    // node would cost one: 10 here).
    let hung = candidates("hung", 10, FakeLink::HANGS);
    let up = candidates("up", 500, FakeLink::ANSWERS);
    let asked: Vec<_> =
        hung.iter().zip(up.chunks(50)).flat_map(|(h, u)| std::iter::once(h).chain(u)).cloned().collect();
    let nodes = Nodes::new(config.clone()).within(Duration::from_secs(20));
    let started = Instant::now();
    let (confirmed, kept) = nodes.confirm_idle(&asked);
    let took = started.elapsed();
    assert_eq!(confirmed.len(), 500, "{kept:?}");
    assert!(kept.iter().all(|(name, _)| name.starts_with("hung")), "{kept:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");

    // More hung nodes than workers, first in line: the deadline ends the fan-out, and the
    // nodes it did not reach are kept up, saying so.
    let mut asked = candidates("hung", 200, FakeLink::HANGS);
    asked.extend(candidates("up", 100, FakeLink::ANSWERS));
    let nodes = Nodes::new(config).within(Duration::from_secs(1));
    let started = Instant::now();
    let (confirmed, kept) = nodes.confirm_idle(&asked);
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    assert!(confirmed.is_empty(), "{confirmed:?}");
    assert_eq!(kept.len(), 300);
    let not_asked = kept.iter().filter(|(_, why)| why.contains("deadline")).count();
    assert!(not_asked >= 100, "{not_asked} of 300 not asked: {kept:?}");
    lab.stop();
}
