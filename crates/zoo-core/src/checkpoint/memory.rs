//! What the program's allocator does while a checkpoint is read, so that loading adds
//! about one copy of the weights to the process and no more.
//!
//! The zoo's programs allocate through mimalloc (feature `mimalloc`). Left as it is,
//! mimalloc puts each tensor read into its arenas, which are committed ahead and marked
//! for transparent huge pages, so a tensor's last 2 MiB page is resident whole; and it
//! returns freed memory to the OS only after a delay (10 ms, times 10 for arenas), so the
//! buffers that a backend copies from and drops (libtorch copies every tensor into its
//! own memory) stay resident while the next ones are read. Measured on GPT-2 small
//! (`docs/precision.md`, rows 4a to 4e): resident memory added while loading was 1.13 to
//! 1.27 × the weights on flex and 1.50 to 1.75 × on tch, where the bytes allocated were
//! 1.02 to 1.04 ×.
//!
//! While a checkpoint is read ([`Reading`]), objects of a mebibyte or more are mapped
//! from the OS one mapping each, and unmapped as soon as they are freed; a buffer the
//! reader fills is marked for huge pages over its whole 2 MiB pages only ([`buffer`]),
//! so that reading faults in 2 MiB at a time as the arenas did, with no page beyond the
//! buffer's end. The allocator's arenas are kept for everything else: unmapping each large
//! temporary of a forward pass as it is freed made GPT-2's forward 30 to 45 % slower.
//!
//! Without the feature (a library user's own allocator) both are no-ops.

/// While alive, objects of [`DIRECT_KIB`] or more are mapped from the OS apart from
/// mimalloc's arenas, and given back when freed. Nested and concurrent readings share the
/// setting; the last one to end restores what the program had.
pub(super) struct Reading(());

/// Objects at least this large (in KiB) are mapped apart while reading: every tensor of
/// a checkpoint that matters for memory, and none of the small allocations (names,
/// headers) that the program keeps.
#[cfg(feature = "mimalloc")]
const DIRECT_KIB: std::ffi::c_long = 1024;

#[cfg(feature = "mimalloc")]
mod imp {
    use std::ffi::{c_int, c_long};
    use std::sync::Mutex;

    /// `mi_option_arena_max_object_size` in mimalloc 3's `mi_option_t` (the largest
    /// object, in KiB, that its arenas take; 2 GiB by default). The version is checked
    /// before the option is set ([`MAJOR`]), and a test reads its default.
    pub(super) const ARENA_MAX_OBJECT_SIZE: c_int = 45;
    /// The major version whose option numbering [`ARENA_MAX_OBJECT_SIZE`] follows.
    pub(super) const MAJOR: c_int = 3;

    /// Readings in progress, and the program's own setting while there are any.
    pub(super) static STATE: Mutex<(usize, c_long)> = Mutex::new((0, 0));

    pub(super) fn version() -> c_int {
        // SAFETY: `mi_version` reads a constant.
        #[allow(unsafe_code)]
        unsafe {
            libmimalloc_sys::mi_version()
        }
    }

    pub(super) fn get(option: c_int) -> c_long {
        // SAFETY: an option number of this version's `mi_option_t` (checked by callers
        // through `version`); reading an option has no other effect.
        #[allow(unsafe_code)]
        unsafe {
            libmimalloc_sys::mi_option_get(option)
        }
    }

    pub(super) fn set(option: c_int, value: c_long) {
        // SAFETY: as in `get`; mimalloc reads this option at each large allocation.
        #[allow(unsafe_code)]
        unsafe {
            libmimalloc_sys::mi_option_set(option, value)
        }
    }
}

impl Reading {
    pub(super) fn start() -> Self {
        #[cfg(feature = "mimalloc")]
        if imp::version() / 10_000 == imp::MAJOR {
            let mut state = imp::STATE.lock().unwrap_or_else(|e| e.into_inner());
            if state.0 == 0 {
                state.1 = imp::get(imp::ARENA_MAX_OBJECT_SIZE);
                imp::set(imp::ARENA_MAX_OBJECT_SIZE, DIRECT_KIB.min(state.1));
            }
            state.0 += 1;
        }
        Self(())
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        #[cfg(feature = "mimalloc")]
        if imp::version() / 10_000 == imp::MAJOR {
            let mut state = imp::STATE.lock().unwrap_or_else(|e| e.into_inner());
            state.0 = state.0.saturating_sub(1);
            if state.0 == 0 {
                imp::set(imp::ARENA_MAX_OBJECT_SIZE, state.1);
            }
        }
    }
}

/// A zeroed buffer of `size` bytes for a tensor about to be read. Its whole 2 MiB pages
/// are marked for transparent huge pages before it is zeroed, so that zeroing and filling
/// it fault in 2 MiB at a time, as mimalloc's arenas did, instead of 4 KiB (reading GPT-2
/// small took 2.6 × as long with small pages). The partial pages at either end stay
/// small, so nothing beyond the buffer becomes resident. The advice is advice only: where
/// the kernel refuses it, nothing changes.
pub(super) fn buffer(size: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(size);
    #[cfg(all(feature = "mimalloc", target_os = "linux"))]
    {
        const HUGE: usize = 2 << 20;
        let spare = buf.spare_capacity_mut();
        let start = spare.as_mut_ptr() as usize;
        let first = start.next_multiple_of(HUGE);
        let end = (start + spare.len()) / HUGE * HUGE;
        if end > first {
            // SAFETY: `[first, end)` lies inside the allocation that `buf` owns, which
            // nothing else can see yet; MADV_HUGEPAGE changes how its pages are faulted
            // in, never their contents.
            #[allow(unsafe_code)]
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
    buf.resize(size, 0);
    buf
}

#[cfg(all(test, feature = "mimalloc"))]
mod tests {
    use super::*;

    /// The option number is mimalloc 3's `arena_max_object_size`: its default is 2 GiB
    /// in KiB, a value no neighbouring option has; a reading lowers it to a mebibyte,
    /// nested readings keep it there, and the last one restores it.
    #[test]
    fn a_reading_maps_large_objects_apart_and_restores_the_setting() {
        assert_eq!(imp::version() / 10_000, imp::MAJOR);
        let state = imp::STATE.lock().unwrap();
        let before = if state.0 == 0 {
            imp::get(imp::ARENA_MAX_OBJECT_SIZE)
        } else {
            state.1
        };
        drop(state);
        assert_eq!(before, 2 << 20, "2 GiB in KiB");
        let outer = Reading::start();
        assert_eq!(imp::get(imp::ARENA_MAX_OBJECT_SIZE), DIRECT_KIB);
        let inner = Reading::start();
        drop(outer);
        assert_eq!(imp::get(imp::ARENA_MAX_OBJECT_SIZE), DIRECT_KIB);
        drop(inner);
        // Another test's load may be reading now: the setting is back once none is.
        let state = imp::STATE.lock().unwrap();
        if state.0 == 0 {
            assert_eq!(imp::get(imp::ARENA_MAX_OBJECT_SIZE), before);
        }
        drop(state);
        let buf = buffer((5 << 20) + 3);
        assert_eq!(buf.len(), (5 << 20) + 3);
        assert!(buf.iter().all(|&b| b == 0));
    }
}
