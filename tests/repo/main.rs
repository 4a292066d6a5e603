//! The repository's own rules: the crates' layering, and man pages and completions.
//! One test binary (Cargo.toml: `autotests = false`); each module was a binary of its own.

mod bindings;
mod docs;
mod layering;
