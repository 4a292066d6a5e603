//! Slurm hostlists (`gpu[001-004,009]`), expanded by the `hostlist-parser` crate after a bound
//! on their size, and node names checked before they reach any command line.

/// Most nodes one hostlist may name.
pub const MAX_NODES: u64 = 100_000;

/// Longest hostlist accepted, in bytes.
const MAX_LEN: usize = 64 * 1024;

/// Why a hostlist or node name was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostlistError {
    /// Not a hostlist.
    #[error("not a hostlist: {0}")]
    Syntax(String),
    /// More nodes than [`MAX_NODES`].
    #[error("the hostlist names more than {MAX_NODES} nodes")]
    TooLarge,
    /// A name with characters no node name has.
    #[error("{0:?} is not a node name (letters, digits, '-', '_' and '.' only)")]
    BadName(String),
}

/// Whether `name` is a plain node name: nothing a shell, `scontrol` or a template would read
/// as syntax.
pub fn check_name(name: &str) -> Result<(), HostlistError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('-')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok { Ok(()) } else { Err(HostlistError::BadName(name.to_string())) }
}

/// The node names of `list`, in order, each checked.
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let list = list.trim();
    if list.is_empty() || list.len() > MAX_LEN {
        return Err(HostlistError::Syntax(format!("{} bytes", list.len())));
    }
    if upper_bound(list) > MAX_NODES {
        return Err(HostlistError::TooLarge);
    }
    let names = hostlist_parser::parse(list).map_err(|e| HostlistError::Syntax(e.to_string()))?;
    for name in &names {
        check_name(name)?;
    }
    Ok(names)
}

/// An upper bound on the names `list` expands to, without expanding it: the sum over its
/// comma-separated hosts of the product of their bracket groups' sizes. Unparsable ranges
/// count as one name; the parser refuses them after.
fn upper_bound(list: &str) -> u64 {
    let mut total: u64 = 0;
    let mut host: u64 = 1;
    let mut group: u64 = 0;
    let mut inside = false;
    let mut range = String::new();
    let range_size = |r: &str| -> u64 {
        match r.split_once('-') {
            Some((a, b)) => match (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 1,
            },
            None => 1,
        }
    };
    for c in list.chars() {
        match (c, inside) {
            ('[', false) => {
                inside = true;
                group = 0;
                range.clear();
            }
            (']', true) => {
                inside = false;
                group = group.saturating_add(range_size(&range));
                host = host.saturating_mul(group.max(1));
            }
            (',', true) => {
                group = group.saturating_add(range_size(&range));
                range.clear();
            }
            (',', false) => {
                total = total.saturating_add(host);
                host = 1;
            }
            (c, true) => range.push(c),
            _ => {}
        }
    }
    total.saturating_add(host)
}

/// `names` as one argument Slurm's commands accept (comma-separated).
pub fn join(names: &[String]) -> String {
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_lists_and_padding_expand_as_slurm_does() {
        assert_eq!(expand("gpu[001-003,009]").unwrap(), ["gpu001", "gpu002", "gpu003", "gpu009"]);
        assert_eq!(expand("n1,n3").unwrap(), ["n1", "n3"]);
        assert_eq!(expand("a[1-2]b[1-2]").unwrap().len(), 4);
    }

    #[test]
    fn hostile_lists_are_refused_before_anything_is_expanded() {
        assert_eq!(expand("n[1-100000000]"), Err(HostlistError::TooLarge));
        assert_eq!(expand("a[1-1000]b[1-1000]"), Err(HostlistError::TooLarge));
        for bad in ["n1;reboot", "n$(id)", "-n1", "n`x`", "n1|x", ""] {
            assert!(expand(bad).is_err(), "{bad:?} accepted");
        }
    }
}
