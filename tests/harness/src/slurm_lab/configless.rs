//! Nodes as a site's are, on one machine: each slurmd in a mount namespace of its own, holding
//! what a node has to itself, so that several nodes of a lab (and several labs) never share
//! it:
//! - `/run` and `/var/spool`: a configless slurmd (`LabOptions::configless`) starts with no
//!   slurm.conf, asks slurmctld for its configuration (`--conf-server`) with munge's default
//!   socket (linked here to the lab's), and keeps what it got under its default spool, linked
//!   at `/run/slurm/conf`;
//! - `/etc/wattson` (`LabNode::wattson_config`): the node's own `wattson.toml`, where wattson's
//!   plugins look with no setting, as on a node its package installed.
//!
//! Neither `SLURM_CONF` nor `WATTSON_CONFIG` reaches such a slurmd or its steps. This
//! machine's Slurm only (a release's root runs its programs in a chroot).

use std::fs;

use super::daemons::daemon_bin;
use super::{SlurmLab, release};

/// Where a node's wattson plugins find its configuration with no setting.
pub const ETC_WATTSON: &str = "/etc/wattson";

impl SlurmLab {
    /// Whether node `i`'s slurmd runs in a namespace of its own.
    pub(super) fn own_namespace(&self, i: usize) -> bool {
        self.configless || self.nodes[i].wattson_config.is_some()
    }

    /// Starts node `i`'s slurmd in its own mount namespace, with `extra` arguments.
    pub(super) fn start_own_slurmd(&mut self, i: usize, extra: &[&str]) -> std::process::Child {
        assert!(release().name.is_none(), "slurm_lab: a node of its own runs on this machine's Slurm only");
        let node = self.nodes[i].clone();
        let lab = self.path.display().to_string();
        let mut script = String::from(
            "set -e\nunset SLURM_CONF WATTSON_CONFIG\n\
             mount -t tmpfs -o mode=0755 tmpfs /run\nmount -t tmpfs -o mode=0755 tmpfs /var/spool\n",
        );
        script += &format!("mkdir -p /run/munge\nln -s {lab}/run/munge.sock /run/munge/munge.socket.2\n");
        if let Some(config) = &node.wattson_config {
            let etc = self.path.join(format!("etc/wattson-{}", node.name));
            fs::create_dir_all(&etc).expect("create the node's /etc/wattson");
            fs::copy(config, etc.join("wattson.toml")).expect("copy the node's wattson.toml");
            // The mount point, on this machine as on a node wattson's package set up.
            fs::create_dir_all(ETC_WATTSON).expect("create /etc/wattson");
            script += &format!("mount --bind {} {ETC_WATTSON}\n", etc.display());
        }
        script += "exec \"$0\" \"$@\"\n";
        let mut args = vec!["-m", "sh", "-c", &script].into_iter().map(String::from).collect::<Vec<_>>();
        args.push(daemon_bin("slurmd").display().to_string());
        args.extend(["-D".to_string(), "-N".to_string(), node.name.clone()]);
        if self.configless {
            args.extend(["--conf-server".to_string(), format!("127.0.0.1:{}", self.ctld_port)]);
        } else {
            args.extend(["-f".to_string(), self.conf.display().to_string()]);
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        self.spawn_machine_daemon(&format!("slurmd-{}", node.name), "unshare".into(), &args)
    }
}
