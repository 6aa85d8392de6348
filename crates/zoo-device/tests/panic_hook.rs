//! Selecting devices leaves the process's panic hook alone, even when many threads select
//! at once, as parallel tests do.
//!
//! Before the fix, every probe swapped the hook for a silent one and put back the hook it
//! had taken; two probes interleaving could put back the silent one for good, and every
//! later panic (a failing assertion in another test) printed nothing. This file holds a
//! single test so that nothing else in its process touches the hook.

use std::sync::atomic::{AtomicUsize, Ordering};

use zoo_device::{BackendName, select};

static HOOK_CALLS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn selecting_devices_from_many_threads_leaves_the_panic_hook_alone() {
    std::panic::set_hook(Box::new(|_| {
        HOOK_CALLS.fetch_add(1, Ordering::SeqCst);
    }));
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..50 {
                    select(BackendName::Flex).expect("flex is compiled into the tests");
                }
            });
        }
    });
    let before = HOOK_CALLS.load(Ordering::SeqCst);
    let caught = std::panic::catch_unwind(|| panic!("a panic after the probes"));
    let after = HOOK_CALLS.load(Ordering::SeqCst);
    // Back to the default hook, so that a failure below prints its message.
    drop(std::panic::take_hook());
    assert!(caught.is_err());
    assert_eq!(
        after,
        before + 1,
        "the hook set before selecting devices no longer runs on a panic"
    );
}
