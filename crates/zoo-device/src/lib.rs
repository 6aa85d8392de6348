//! One way for every program and test of the zoo to turn a backend name into a Burn
//! [`Device`](burn::tensor::Device).
//!
//! The backends are cargo features of this crate (`flex`, the default, `ndarray`, `wgpu`,
//! `tch`, `cuda`). Features only choose what is compiled in; which compiled backend runs is
//! chosen at run time with [`BackendName`] (`--device flex|ndarray|wgpu|tch|tch-cuda|cuda`
//! in the examples, with an index for the GPU backends: `cuda:1`; [`select_all`] takes a
//! list such as `cuda:0,cuda:1` for multi-device training). Asking for a backend that was
//! not compiled in, or that finds no device, is a [`DeviceError`] whose message names the
//! feature to enable. A device computes in f32 unless [`select_as`] asks for f16 or bf16
//! ([`FloatType`]) before its first tensor.
//!
//! ```
//! use zoo_device::{BackendName, select};
//! let device = select(BackendName::Flex)?;
//! # Ok::<(), zoo_device::DeviceError>(())
//! ```
#![warn(missing_docs)]

mod backend;
mod float;
mod select;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use backend::*;
pub use float::{FloatType, UnknownFloatType};
pub use select::*;
#[cfg(any(test, feature = "testing"))]
pub use testing::{record_skip, test_backend, test_device};
