//! The repository's own rules: the crates' layering, no import circles between modules, man pages and completions, and that it carries
//! the data it reads.
//! One test binary (Cargo.toml: `autotests = false`); each module was a binary of its own.

mod bindings;
mod circles;
mod docs;
mod layering;
mod self_contained;
