//! Which controller acts. A cluster with a backup slurmctld runs `wattson ctld` beside each;
//! only the one beside the slurmctld in control acts, and the other waits. The one in control
//! is the first, in `SlurmctldHost` order, that `scontrol ping` finds up: Slurm's own rule (a
//! backup takes over while the primary is down, and hands control back when it returns).
//! Everything a controller acts on (node states, power, reasons, jobs) is Slurm's, so a
//! backup that takes over starts from where the other left off.

/// One controller as `scontrol ping` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Controller {
    /// Its `SlurmctldHost` name.
    pub host: String,
    /// Whether it answered.
    pub up: bool,
}

/// Whether this controller acts (also in `wattson power status`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The slurmctld beside it is in control, or the cluster has one slurmctld.
    #[default]
    Acting,
    /// Another slurmctld (named) is in control, or none answers (`None`): it waits.
    Standby(Option<String>),
}

/// Parses `scontrol ping` (`Slurmctld(primary) at ctl1 is UP`, one line per controller, in
/// `SlurmctldHost` order; the same words from 22.05 to 26.05).
pub fn parse_ping(text: &str) -> Vec<Controller> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("Slurmctld(")?;
            let (_, rest) = rest.split_once(") at ")?;
            let (host, state) = rest.rsplit_once(" is ")?;
            Some(Controller { host: host.trim().to_string(), up: state.trim() == "UP" })
        })
        .collect()
}

/// The role of the controller on host `me` among `controllers`. With one slurmctld (or none
/// listed) it always acts, wherever it runs, as before backups were known.
pub fn role(controllers: &[Controller], me: &str) -> Role {
    if controllers.len() < 2 {
        return Role::Acting;
    }
    match controllers.iter().find(|c| c.up) {
        Some(c) if short(&c.host) == short(me) => Role::Acting,
        Some(c) => Role::Standby(Some(c.host.clone())),
        None => Role::Standby(None),
    }
}

/// A host name without its domain, as Slurm matches `SlurmctldHost` to the host.
fn short(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

/// This host's name (empty if it cannot be read).
pub fn this_host() -> String {
    nix::unistd::gethostname().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH_UP: &str = "Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is UP\n";
    const PRIMARY_DOWN: &str = "Slurmctld(primary) at ctl1 is DOWN\nSlurmctld(backup) at ctl2 is UP\n\
        *****************************************\n** RESTORE SLURMCTLD DAEMON TO SERVICE **\n\
        *****************************************\n";

    #[test]
    fn the_first_controller_up_acts_and_the_others_wait() {
        let both = parse_ping(BOTH_UP);
        assert_eq!(both.len(), 2);
        assert_eq!(role(&both, "ctl1"), Role::Acting);
        assert_eq!(role(&both, "ctl1.cluster.example"), Role::Acting, "Slurm matches the short name");
        assert_eq!(role(&both, "ctl2"), Role::Standby(Some("ctl1".into())));
        let failed_over = parse_ping(PRIMARY_DOWN);
        assert_eq!(
            failed_over,
            [Controller { host: "ctl1".into(), up: false }, Controller { host: "ctl2".into(), up: true }]
        );
        assert_eq!(role(&failed_over, "ctl2"), Role::Acting);
        assert_eq!(role(&failed_over, "ctl1"), Role::Standby(Some("ctl2".into())));
        let none = parse_ping("Slurmctld(primary) at a is DOWN\nSlurmctld(backup1) at b is DOWN\n");
        assert_eq!(role(&none, "a"), Role::Standby(None));
    }

    #[test]
    fn one_slurmctld_is_always_followed_wherever_the_controller_runs() {
        let one = parse_ping("Slurmctld(primary) at localhost is UP\n");
        assert_eq!(role(&one, "head7"), Role::Acting);
        assert_eq!(role(&parse_ping("garbage"), "head7"), Role::Acting);
        assert!(!this_host().is_empty());
    }
}
