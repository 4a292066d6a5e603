//! The Slurm plugins as production builds them (default features) carry none of the test-only
//! hooks that tests/slurm/slurm.rs builds in: the SPANK argument `test_panic=` and job_submit's
//! `WATTSON_TEST_PANIC` trigger.

use wattson_harness::node as common;

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn production_builds_of_the_plugins_carry_no_test_hook() {
    let plain = common::build_plugins(false);
    let hooked = common::build_plugins(true);
    // What each hook leaves in its plugin: the argument's name, the variable's name.
    for (lib, hook) in common::PLUGIN_LIBS.into_iter().zip(["test_panic", "WATTSON_TEST_PANIC"]) {
        let with = std::fs::read(hooked.join(lib)).unwrap();
        assert!(
            contains(&with, hook),
            "{lib} built with test-hooks lacks {hook:?}: this test checks nothing"
        );
        let without = std::fs::read(plain.join(lib)).unwrap();
        for any in ["test_panic", "WATTSON_TEST_PANIC"] {
            assert!(!contains(&without, any), "{lib} as built by default contains the test hook {any:?}");
        }
    }
}
