//! The next micro release of the lab's Slurm, made from the installed one, as a site gets it from
//! a security update. No suite of Debian's registry carries two micro releases of a series, and
//! rebuilding Slurm from source takes longer than the whole test suite on two cores, so this
//! renumbers a copy of the release's own binaries instead: in `libslurmfull.so` the number that
//! `plugin.c` compares every plugin's `plugin_version` with (one 32-bit immediate in its code)
//! and the version string (`22.05.8`), and in each of Slurm's own plugins its `plugin_version`.
//! Daemons and clients run with that copy first in `LD_LIBRARY_PATH` and `PluginDir`; then they
//! refuse any plugin still at the old number, exactly as the updated packages would.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{daemons::daemon_bin, release, system_plugin_dir};

/// A renumbered copy of the lab release's Slurm ([`MicroRelease::make`]).
#[derive(Clone, Debug)]
pub struct MicroRelease {
    /// The release the copy says it is (`22.05.9`).
    pub version: String,
    /// The installed release it was made from (`22.05.8`).
    pub from: String,
    /// Holds the renumbered `libslurmfull.so`: the daemons' and clients' `LD_LIBRARY_PATH`.
    pub lib_dir: PathBuf,
    /// Slurm's own plugins, renumbered: the lab's `PluginDir` in place of the installed one.
    pub plugin_dir: PathBuf,
}

impl MicroRelease {
    /// Makes the copy under `dir` (which must be visible at the same path inside a release's
    /// root: anywhere under /tmp). Panics, saying why, where the binaries are not as expected.
    pub fn make(dir: &Path) -> MicroRelease {
        let said = release().command(daemon_bin("slurmctld")).arg("-V").output().expect("slurmctld -V runs");
        let from =
            String::from_utf8_lossy(&said.stdout).split_whitespace().last().unwrap_or_default().to_string();
        let old = number(&from).unwrap_or_else(|| panic!("slurmctld -V printed no version: {said:?}"));
        // The next micro number, or the one before where the next would be longer as text.
        let micro = old & 0xff;
        let new_micro =
            if (micro + 1).to_string().len() == micro.to_string().len() { micro + 1 } else { micro - 1 };
        let new = (old & !0xff) | new_micro;
        let version = format!("{}.{:02}.{}", new >> 16, (new >> 8) & 0xff, new_micro);
        assert_eq!(version.len(), from.len(), "{from} -> {version}");

        let lib_dir = dir.join("lib");
        let plugin_dir = dir.join("plugins");
        fs::create_dir_all(&lib_dir).unwrap();
        fs::create_dir_all(&plugin_dir).unwrap();
        let installed = release().host_path(&system_plugin_dir());
        let mut renumbered = 0;
        for entry in fs::read_dir(&installed).unwrap().flatten() {
            let name = entry.file_name();
            let path = entry.path();
            if !name.to_string_lossy().ends_with(".so") || !path.is_file() {
                continue;
            }
            let mut bytes = fs::read(&path).unwrap();
            if name == "libslurmfull.so" {
                renumber_library(&mut bytes, &path, old, new, &from, &version);
                write(&lib_dir.join(&name), &bytes);
            } else if let Some(at) = symbol_offset(&path, &bytes, "plugin_version") {
                assert_eq!(
                    bytes[at..at + 4],
                    old.to_le_bytes(),
                    "{}: plugin_version is not {from}",
                    path.display()
                );
                bytes[at..at + 4].copy_from_slice(&new.to_le_bytes());
                renumbered += 1;
            }
            write(&plugin_dir.join(&name), &bytes);
        }
        assert!(lib_dir.join("libslurmfull.so").is_file(), "no libslurmfull.so in {}", installed.display());
        assert!(
            renumbered > 20,
            "only {renumbered} of Slurm's plugins in {} were renumbered",
            installed.display()
        );
        MicroRelease { version, from, lib_dir, plugin_dir }
    }
}

/// `22.05.8` as Slurm's `SLURM_VERSION_NUMBER` (0x160508).
fn number(version: &str) -> Option<u32> {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    let (major, minor, micro) = (parts.next()??, parts.next()??, parts.next()??);
    Some((major << 16) | (minor << 8) | micro)
}

fn write(path: &Path, bytes: &[u8]) {
    fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Changes libslurm's own release: the one immediate operand equal to `old` in its executable
/// code (the check in `plugin.c`) and every whole C string `from`.
fn renumber_library(bytes: &mut [u8], path: &Path, old: u32, new: u32, from: &str, to: &str) {
    let code: Vec<(usize, usize)> =
        load_segments(bytes).into_iter().filter(|s| s.2).map(|s| (s.0, s.1)).collect();
    let needle = old.to_le_bytes();
    let hits: Vec<usize> = code
        .iter()
        .flat_map(|&(start, len)| {
            (start..start + len.saturating_sub(3)).filter(|&i| bytes[i..i + 4] == needle)
        })
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "{}: {from} ({old:#x}) appears {} times in its code, not once",
        path.display(),
        hits.len()
    );
    bytes[hits[0]..hits[0] + 4].copy_from_slice(&new.to_le_bytes());
    let whole = [&[0u8][..], from.as_bytes(), &[0u8][..]].concat();
    let strings: Vec<usize> =
        (0..bytes.len() - whole.len()).filter(|&i| bytes[i..i + whole.len()] == whole[..]).collect();
    assert!(!strings.is_empty(), "{}: no string {from}", path.display());
    for at in strings {
        bytes[at + 1..at + 1 + to.len()].copy_from_slice(to.as_bytes());
    }
}

/// The file ranges of an ELF64 file's loadable segments: (offset, size, executable), with the
/// virtual address each starts at.
fn load_segments(bytes: &[u8]) -> Vec<(usize, usize, bool, u64)> {
    let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    assert!(bytes.starts_with(b"\x7fELF\x02\x01"), "not a little-endian ELF64 file");
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&h| u32_at(h) == 1) // PT_LOAD
        .map(|h| (u64_at(h + 8) as usize, u64_at(h + 32) as usize, u32_at(h + 4) & 1 == 1, u64_at(h + 16)))
        .collect()
}

/// The file offset of the dynamic symbol `name` (from `nm -D`), or None where the file has none.
fn symbol_offset(path: &Path, bytes: &[u8], name: &str) -> Option<usize> {
    let out =
        Command::new("nm").args(["-D", "--defined-only"]).arg(path).output().expect("nm runs (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let address = text.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        let (address, _, symbol) = (words.next()?, words.next()?, words.next()?);
        (symbol == name).then(|| u64::from_str_radix(address, 16).ok()).flatten()
    })?;
    load_segments(bytes).into_iter().find_map(|(offset, size, _, vaddr)| {
        (address >= vaddr && address + 4 <= vaddr + size as u64).then(|| offset + (address - vaddr) as usize)
    })
}
