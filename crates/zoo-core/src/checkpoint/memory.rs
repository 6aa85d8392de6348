//! What the program's allocator does while a checkpoint is read, so that loading adds
//! about one copy of the weights to the process and no more.
//!
//! The zoo's programs allocate through mimalloc (feature `mimalloc`). Left as it is,
//! mimalloc puts each tensor read into its arenas, which are committed ahead and marked
//! for transparent huge pages, so a tensor's last 2 MiB page is resident whole; and it
//! returns freed memory to the OS only after a delay (1 s in mimalloc 3), so the
//! buffers that a backend copies from and drops (libtorch copies every tensor into its
//! own memory) stay resident while the next ones are read. Measured on GPT-2 small
//! (`docs/precision.md`, rows 4a to 4e): resident memory added while loading was 1.13 to
//! 1.27 × the weights on flex and 1.50 to 1.75 × on tch, where the bytes allocated were
//! 1.02 to 1.04 ×.
//!
//! While a checkpoint is read ([`Reading`]), mimalloc takes its pages larger than 64 KiB
//! from the OS, one mapping each, instead of from its arenas, and unmaps them once they
//! are empty: an object over 512 KiB has a page of its own, unmapped as soon as it is
//! freed, and objects of 64 to 512 KiB (scales, small weights) share pages of 4 MiB that
//! are not backed by huge pages (with the bound at 1 MiB, those pages came from the OS
//! too and the 64 KiB ones from the arenas' huge pages: GPT-2 small quantized as read
//! added 1.16 × its weights at 8 bits and 1.25 × at 4, against 1.14 and 1.21 at 64 KiB,
//! for the same bytes allocated); a buffer the
//! reader fills is marked for huge pages over its whole 2 MiB pages only ([`buffer`]),
//! so that reading faults in 2 MiB at a time as the arenas did, with no page beyond the
//! buffer's end. It also gives freed memory back at once rather than after its delay:
//! with the delay, whether the copies dropped while weights are quantized and packed
//! were given back before the peak was a matter of timing, and GPT-2 small quantized to
//! 4 bits as read added 1.10 to 1.15 × its weights from run to run; at once, 1.12 × in
//! each of four runs. The allocator's arenas are kept for everything else: unmapping each large
//! temporary of a forward pass as it is freed made GPT-2's forward 30 to 45 % slower.
//!
//! Without the feature (a library user's own allocator) the setting and the advice are
//! left out; buffers are still allocated as Burn keeps them, so none is copied.

use burn::tensor::Bytes;

/// While alive, mimalloc's pages larger than [`DIRECT_KIB`] are mapped from the OS apart
/// from its arenas, and given back when emptied; freed memory is given back with no delay. Nested and concurrent readings share the
/// setting; the last one to end restores what the program had.
pub(super) struct Reading(());

/// mimalloc's pages larger than this (in KiB) come from the OS while reading, apart from
/// its arenas (mimalloc 3's `arena_max_object_size`, which bounds the pages an arena
/// gives): every object over 512 KiB, and the 4 MiB and 512 KiB pages that smaller ones
/// share; the 64 KiB pages of the smallest objects (names, headers) stay in the arenas.
#[cfg(feature = "mimalloc")]
const DIRECT_KIB: std::ffi::c_long = 64;

#[cfg(feature = "mimalloc")]
mod imp {
    use std::ffi::{c_int, c_long};
    use std::sync::Mutex;

    /// `mi_option_arena_max_object_size` in mimalloc 3's `mi_option_t` (the largest
    /// object, in KiB, that its arenas take; 2 GiB by default). The version is checked
    /// before the option is set ([`MAJOR`]), and a test reads its default.
    pub(super) const ARENA_MAX_OBJECT_SIZE: c_int = 45;
    /// `mi_option_purge_delay` (milliseconds before freed memory is given back; 1000 by
    /// default, 0 for at once), checked as [`ARENA_MAX_OBJECT_SIZE`] is.
    pub(super) const PURGE_DELAY: c_int = 15;
    /// The major version whose option numbering [`ARENA_MAX_OBJECT_SIZE`] follows.
    pub(super) const MAJOR: c_int = 3;

    /// Readings in progress, and the program's own settings (the largest arena object,
    /// the purge delay) while there are any.
    pub(super) static STATE: Mutex<(usize, c_long, c_long)> = Mutex::new((0, 0, 0));

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
                state.2 = imp::get(imp::PURGE_DELAY);
                imp::set(imp::ARENA_MAX_OBJECT_SIZE, DIRECT_KIB.min(state.1));
                imp::set(imp::PURGE_DELAY, 0);
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
                imp::set(imp::PURGE_DELAY, state.2);
            }
        }
    }
}

/// A zeroed buffer of `size` bytes for a tensor about to be read, allocated at the
/// 16-byte alignment that Burn's `Bytes` asks of every buffer it is given: a `Vec<u8>`
/// (alignment 1) was copied whole into a new allocation as it became a `TensorData`, so
/// each tensor read was briefly held twice (GPT-2's 147 MiB token embedding took 295).
///
/// Its whole 2 MiB pages are marked for transparent huge pages before it is zeroed, so
/// that zeroing and filling it fault in 2 MiB at a time, as mimalloc's arenas did,
/// instead of 4 KiB (reading GPT-2 small took 2.6 × as long with small pages). The
/// partial pages at either end stay small, so nothing beyond the buffer becomes
/// resident. The advice is advice only: where the kernel refuses it, nothing changes.
pub(crate) fn buffer(size: usize) -> Bytes {
    let mut bytes = empty(size);
    static ZEROES: [u8; 1 << 16] = [0; 1 << 16];
    while bytes.len() < size {
        let n = (size - bytes.len()).min(ZEROES.len());
        bytes.extend_from_byte_slice_aligned(&ZEROES[..n], 16);
    }
    bytes
}

/// `values` copied once into a [`buffer`] of their length (a `Vec` may hold more than its
/// length, and a backend that keeps the vector keeps its capacity too).
pub(super) fn copy_of(values: &[u8]) -> Bytes {
    let mut bytes = empty(values.len());
    bytes.extend_from_byte_slice_aligned(values, 16);
    bytes
}

/// Empty bytes with room for `size` and Burn's alignment, advised as [`buffer`] says.
/// Growing them up to `size` reallocates nothing.
fn empty(size: usize) -> Bytes {
    #[cfg_attr(not(all(feature = "mimalloc", target_os = "linux")), allow(unused_mut))]
    let mut words: Vec<u128> = Vec::with_capacity(size.div_ceil(16));
    #[cfg(all(feature = "mimalloc", target_os = "linux"))]
    {
        const HUGE: usize = 2 << 20;
        let spare = words.spare_capacity_mut();
        let start = spare.as_mut_ptr() as usize;
        let first = start.next_multiple_of(HUGE);
        let end = (start + std::mem::size_of_val(spare)) / HUGE * HUGE;
        if end > first {
            // SAFETY: `[first, end)` lies inside the allocation that `words` owns, which
            // nothing else can see yet; MADV_HUGEPAGE changes how its pages are faulted
            // in, never their contents.
            #[allow(unsafe_code)]
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
    Bytes::from_elems(words)
}

#[cfg(all(test, feature = "mimalloc"))]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    /// The option numbers are mimalloc 3's `arena_max_object_size` and `purge_delay`:
    /// their defaults are 2 GiB in KiB and 1000 ms, values their neighbouring options do
    /// not have; a reading lowers them to 64 KiB and 0, nested readings keep them there,
    /// and the last one restores them.
    #[test]
    fn a_reading_maps_large_objects_apart_and_restores_the_setting() {
        assert_eq!(imp::version() / 10_000, imp::MAJOR);
        let state = imp::STATE.lock().unwrap();
        let before = if state.0 == 0 {
            (
                imp::get(imp::ARENA_MAX_OBJECT_SIZE),
                imp::get(imp::PURGE_DELAY),
            )
        } else {
            (state.1, state.2)
        };
        drop(state);
        assert_eq!(before, (2 << 20, 1000), "2 GiB in KiB, 1 s");
        let reading = || {
            (
                imp::get(imp::ARENA_MAX_OBJECT_SIZE),
                imp::get(imp::PURGE_DELAY),
            )
        };
        let outer = Reading::start();
        assert_eq!(reading(), (DIRECT_KIB, 0));
        let inner = Reading::start();
        drop(outer);
        assert_eq!(reading(), (DIRECT_KIB, 0));
        drop(inner);
        // Another test's load may be reading now: the settings are back once none is.
        let state = imp::STATE.lock().unwrap();
        if state.0 == 0 {
            assert_eq!(reading(), before);
        }
        drop(state);
        let buf = buffer((5 << 20) + 4);
        assert_eq!(buf.len(), (5 << 20) + 4);
        assert_eq!(buf.align(), 16);
        assert!(buf.iter().all(|&b| b == 0));
        // Becoming a tensor's data keeps the buffer: no copy is made on the way.
        let at = buf.as_ptr();
        let data = TensorData::from_bytes(buf, [(5 << 18) + 1], burn::tensor::DType::F32);
        assert_eq!(data.as_bytes().as_ptr(), at);
    }
}
