//! A lab with a backup slurmctld, on one machine and on loopback only. Two slurmctld cannot
//! share a machine as a lab runs them: each binds its port on every address, so the backup
//! answers at the primary's address too and never takes over (measured). Here each runs in
//! its own UTS and mount namespace, as the host its `SlurmctldHost` line names (`ctl1` at
//! 127.0.0.1, `ctl2` at 127.0.0.3), with a hosts file naming both and a pid file of its own,
//! and `CommunicationParameters=NoCtldInAddrAny` makes each listen on its own address only.
//! This machine's Slurm only (a release's root runs its programs in a chroot).

use std::fs;
use std::path::Path;
use std::process::Command;

use super::daemons::daemon_bin;
use super::{SlurmLab, release};

/// The controllers' host names and addresses, primary first.
pub const CONTROLLERS: [(&str, &str); 2] = [("ctl1", "127.0.0.1"), ("ctl2", "127.0.0.3")];

/// A command running `program` on host `host` (its own UTS namespace, named `host`), as a
/// program beside that controller sees it. Needs root.
pub fn beside(host: &str, program: &Path) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["-u", "sh", "-c", &format!("hostname {host} && exec \"$0\" \"$@\"")]).arg(program);
    cmd
}

impl SlurmLab {
    /// slurm.conf's controller lines: one `SlurmctldHost`, or both with their addresses.
    pub(super) fn controller_conf(&self, backup: bool) -> String {
        let lab = self.path.display();
        if !backup {
            return format!("SlurmctldHost=localhost\nSlurmctldPidFile={lab}/run/slurmctld.pid\n");
        }
        assert!(release().name.is_none(), "slurm_lab: a backup controller runs on this machine's Slurm only");
        let mut conf: String =
            CONTROLLERS.iter().map(|(host, addr)| format!("SlurmctldHost={host}({addr})\n")).collect();
        conf.push_str(&format!(
            "SlurmctldPidFile={lab}/pid/slurmctld.pid\nCommunicationParameters=NoCtldInAddrAny\nSlurmctldTimeout=5\n"
        ));
        let hosts: String = CONTROLLERS.iter().map(|(host, addr)| format!("{addr} {host}\n")).collect();
        fs::write(self.path.join("etc/hosts"), format!("127.0.0.1 localhost\n{hosts}")).expect("write hosts");
        for dir in ["pid"].into_iter().chain(CONTROLLERS.map(|(host, _)| host)) {
            fs::create_dir_all(self.path.join(dir)).expect("create a pid directory");
        }
        conf
    }

    /// Starts the slurmctld of controller `k` of [`CONTROLLERS`] in its namespaces; the primary
    /// logs to `log/slurmctld.log`, the backup to `log/slurmctld-ctl2.log`.
    pub(super) fn spawn_controller(&mut self, k: usize) -> std::process::Child {
        let (host, _) = CONTROLLERS[k];
        let lab = self.path.display().to_string();
        let log = if k == 0 {
            format!("{lab}/log/slurmctld.log")
        } else {
            format!("{lab}/log/slurmctld-{host}.log")
        };
        let script = format!(
            "hostname {host} && mount --bind {lab}/etc/hosts /etc/hosts && mount --bind {lab}/{host} {lab}/pid \
             && exec \"$0\" -D -i -f {conf} -L {log}",
            conf = self.conf.display()
        );
        let slurmctld = daemon_bin("slurmctld").display().to_string();
        let args = ["-u", "-m", "sh", "-c", &script, &slurmctld].map(String::from);
        let name = if k == 0 { "slurmctld".to_string() } else { format!("slurmctld-{host}") };
        self.spawn_machine_daemon(&name, "unshare".into(), &args)
    }

    /// Starts the backup slurmctld (the primary is up).
    pub(super) fn start_backup(&mut self) {
        let child = self.spawn_controller(1);
        self.backup = Some(child);
    }

    /// Kills the primary slurmctld at once (`SIGKILL`), as a crashed controller host: the
    /// backup takes over after `SlurmctldTimeout` (5 s).
    pub fn kill_primary(&mut self) {
        let mut child = self.slurmctld.take().expect("the primary slurmctld running");
        let _ = child.kill();
        let _ = child.wait();
    }
}
