//! What the zoo's tests share (feature `testing`, which the crates' dev-dependencies
//! turn on, so that no production build compiles it): the device tests run on, skips the
//! backend matrix counts, the backends a parity test compares, and tensors read back and
//! compared on the host.

use std::path::Path;

use burn::tensor::{Bool, Device, Int, Tensor};

/// The device that tests run on: the backend named by the `ZOO_TEST_DEVICE` environment
/// variable, or flex when it is unset. The backend matrix sets the variable.
///
/// # Panics
/// When the variable names a backend that cannot be selected: a matrix run on a missing
/// backend must fail, not pass on another one.
pub fn test_device() -> Device {
    let backend = test_backend();
    match select(backend) {
        Ok(d) => d,
        Err(e) => panic!("ZOO_TEST_DEVICE={backend}: {e}"),
    }
}

/// The backend named by `ZOO_TEST_DEVICE` (flex when unset).
///
/// # Panics
/// When the variable holds a name the zoo does not know.
pub fn test_backend() -> BackendName {
    match std::env::var("ZOO_TEST_DEVICE") {
        Ok(name) if !name.is_empty() => name
            .parse()
            .unwrap_or_else(|e| panic!("ZOO_TEST_DEVICE: {e}")),
        _ => BackendName::Flex,
    }
}

/// Records that a test skipped its body, for the backend matrix's skip count.
///
/// The matrix sets `ZOO_SKIP_LOG` to a file; each call appends one line naming the test and
/// the reason, so `cargo xtask ci` can report skipped tests and fail when a required backend
/// was skipped. Without the variable (or with it empty) this only logs.
///
/// # Panics
/// When the file named by `ZOO_SKIP_LOG` cannot be opened or written. A skip the matrix
/// cannot count would let the test pass as if it had run, so it fails instead.
pub fn record_skip(test: &str, reason: &str) {
    log::warn!("skipped {test}: {reason}");
    if let Some(path) = std::env::var_os("ZOO_SKIP_LOG").filter(|path| !path.is_empty()) {
        append_skip(Path::new(&path), test, reason);
    }
}

/// Appends `test<TAB>reason` as one line of the skip log at `path`; line breaks and tabs
/// inside the reason become spaces, since the matrix counts one skip per line.
///
/// # Panics
/// When the file cannot be opened or written, naming the path and the error.
pub(crate) fn append_skip(path: &Path, test: &str, reason: &str) {
    use std::io::Write;
    let reason = reason.replace(['\n', '\r', '\t'], " ");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| writeln!(file, "{test}\t{reason}"));
    if let Err(err) = written {
        panic!(
            "cannot record the skip of {test} in ZOO_SKIP_LOG={}: {err}",
            path.display()
        );
    }
}

use crate::{BackendName, compiled_backends, select};

/// The backends a parity test compares with flex: the matrix's backend when
/// `ZOO_TEST_DEVICE` names one; otherwise every other compiled CPU backend, and the GPU
/// backends that find a device. When that leaves none, a skip is recorded under `test`,
/// so a build without a second backend does not count as a pass.
pub fn parity_backends(test: &str) -> Vec<BackendName> {
    let target = test_backend();
    if target != BackendName::Flex {
        return vec![target];
    }
    let gpu = |b: &BackendName| matches!(b, BackendName::TchCuda | BackendName::Cuda);
    let others: Vec<BackendName> = compiled_backends()
        .into_iter()
        .filter(|b| *b != BackendName::Flex)
        .filter(|b| !gpu(b) || select(*b).is_ok())
        .collect();
    if others.is_empty() {
        record_skip(test, "no second backend is compiled into this build");
    }
    others
}

/// The values of a boolean tensor, whatever the backend stores booleans as.
pub fn bools<const D: usize>(t: Tensor<D, Bool>) -> Vec<bool> {
    ints(t.int()).into_iter().map(|v| v != 0).collect()
}

/// The values of an integer tensor as `i64`, whatever the backend's integer type.
pub fn ints<const D: usize>(t: Tensor<D, Int>) -> Vec<i64> {
    t.into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .expect("converted to i64")
}

/// The values of a float tensor as `f32`, whatever the backend's float type.
pub fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("converted to f32")
}

/// The gradient of each float parameter of `module` that requires one, in the module's
/// order (LoRA's factors after the weight they adapt), as `f32` values; an empty vector
/// for a parameter that requires one and got none.
pub fn param_grads<M: burn::module::Module>(
    module: &M,
    grads: &burn::tensor::Gradients,
) -> Vec<Vec<f32>> {
    struct Collect<'a> {
        grads: &'a burn::tensor::Gradients,
        found: Vec<Vec<f32>>,
    }
    impl burn::module::ModuleVisitor for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
            let t = param.base();
            if t.is_require_grad() {
                self.found
                    .push(t.grad(self.grads).map(floats).unwrap_or_default());
            }
        }
    }
    let mut c = Collect {
        grads,
        found: Vec::new(),
    };
    module.visit(&mut c);
    c.found
}

/// Largest absolute difference between two tensors of the same shape, on any
/// devices; NaN when either holds a NaN (see [`max_abs_diff_slices`]).
///
/// # Panics
/// When the shapes differ.
pub fn max_abs_diff<const D: usize>(a: &Tensor<D>, b: &Tensor<D>) -> f32 {
    let (da, db) = (a.dims(), b.dims());
    assert_eq!(da, db, "max_abs_diff: shapes differ: {da:?} vs {db:?}");
    max_abs_diff_slices(&floats(a.clone()), &floats(b.clone()))
}

/// Largest absolute difference between two slices of the same length. NaN when
/// either holds a NaN; equal infinities agree, and an infinity against anything else
/// differs by infinity.
///
/// # Panics
/// When the lengths differ.
pub fn max_abs_diff_slices(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(
        a.len(),
        b.len(),
        "max_abs_diff: lengths differ: {} vs {}",
        a.len(),
        b.len()
    );
    let mut worst = 0.0f32;
    for (&x, &y) in a.iter().zip(b) {
        if x.is_nan() || y.is_nan() {
            return f32::NAN;
        }
        if x != y {
            worst = worst.max((x - y).abs());
        }
    }
    worst
}

/// Largest `|want - got| / (atol + rtol * |want|)` over two slices of the same length:
/// at most 1 when every value agrees within `atol + rtol * |want|`. NaN when either
/// holds a NaN; equal infinities agree.
///
/// # Panics
/// When the lengths differ.
pub fn max_scaled_diff(want: &[f32], got: &[f32], atol: f32, rtol: f32) -> f32 {
    assert_eq!(
        want.len(),
        got.len(),
        "max_scaled_diff: lengths differ: {} vs {}",
        want.len(),
        got.len()
    );
    let mut worst = 0.0f32;
    for (&w, &g) in want.iter().zip(got) {
        if w.is_nan() || g.is_nan() {
            return f32::NAN;
        }
        if w != g {
            worst = worst.max((w - g).abs() / (atol + rtol * w.abs()));
        }
    }
    worst
}

/// Asserts that two tensors of the same shape agree within `tol`, absolute.
///
/// # Panics
/// When they do not, when either holds a NaN, or when the shapes differ.
pub fn assert_close<const D: usize>(a: &Tensor<D>, b: &Tensor<D>, tol: f32) {
    let d = max_abs_diff(a, b);
    assert!(
        !d.is_nan(),
        "a NaN in the compared tensors of shape {:?}",
        a.dims()
    );
    assert!(d <= tol, "max abs difference {d} > {tol}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    fn device() -> Device {
        crate::test_device()
    }

    #[test]
    fn max_abs_diff_is_the_largest_gap() {
        let d = device();
        let a = Tensor::<2>::from_floats([[1.0, -2.0], [3.0, 4.0]], &d);
        let b = Tensor::<2>::from_floats([[1.5, -2.0], [0.5, 4.25]], &d);
        assert_eq!(max_abs_diff(&a, &b), 2.5);
        assert_eq!(max_abs_diff(&a, &a), 0.0);
    }

    #[test]
    fn a_nan_in_either_tensor_is_neither_close_nor_far() {
        let d = device();
        let clean = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &d);
        let dirty = Tensor::<1>::from_floats([1.0, f32::NAN, 3.0], &d);
        for (a, b) in [(&clean, &dirty), (&dirty, &clean), (&dirty, &dirty)] {
            let diff = max_abs_diff(a, b);
            assert!(diff.is_nan(), "{diff}");
            // Both ways a test may be written fail.
            let (close, far) = (diff < 1.0, diff > 1e-3);
            assert!(!close && !far);
        }
        assert!(max_abs_diff_slices(&[0.0, f32::NAN], &[0.0, 0.0]).is_nan());
        assert!(max_abs_diff_slices(&[f32::NAN], &[f32::NAN]).is_nan());
    }

    #[test]
    #[should_panic(expected = "a NaN in the compared tensors of shape [3]")]
    fn assert_close_fails_on_nan() {
        let d = device();
        let a = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &d);
        let b = Tensor::<1>::from_floats([1.0, 2.0, f32::NAN], &d);
        assert_close(&a, &b, 1e-3);
    }

    #[test]
    #[should_panic(expected = "max abs difference 0.5 > 0.1")]
    fn assert_close_fails_beyond_the_tolerance() {
        let d = device();
        let a = Tensor::<1>::from_floats([1.0, 2.0], &d);
        let b = Tensor::<1>::from_floats([1.0, 2.5], &d);
        assert_close(&a, &b, 0.1);
    }

    #[test]
    #[should_panic(expected = "max_abs_diff: shapes differ: [2, 3] vs [3, 2]")]
    fn tensors_of_other_shapes_are_not_compared() {
        let d = device();
        let a = Tensor::<2>::zeros([2, 3], &d);
        let b = Tensor::<2>::zeros([3, 2], &d);
        max_abs_diff(&a, &b);
    }

    #[test]
    #[should_panic(expected = "max_abs_diff: lengths differ: 3 vs 2")]
    fn slices_of_other_lengths_are_not_compared() {
        // A zip would compare the first two values and call them equal.
        max_abs_diff_slices(&[1.0, 2.0, 3.0], &[1.0, 2.0]);
    }

    #[test]
    #[should_panic(expected = "max_scaled_diff: lengths differ: 1 vs 2")]
    fn scaled_slices_of_other_lengths_are_not_compared() {
        max_scaled_diff(&[1.0], &[1.0, 2.0], 1e-5, 1e-4);
    }

    #[test]
    fn infinities_agree_only_with_themselves() {
        let inf = f32::INFINITY;
        assert_eq!(max_abs_diff_slices(&[inf, -inf], &[inf, -inf]), 0.0);
        assert_eq!(max_abs_diff_slices(&[inf], &[1.0]), inf);
        assert_eq!(max_abs_diff_slices(&[inf], &[-inf]), inf);
    }

    #[test]
    fn scaled_difference_uses_the_reference_magnitude() {
        // 0.02 / (0.01 + 0.001 * 100) = 0.18 at the large value,
        // 0.005 / (0.01 + 0.001 * 0) = 0.5 at zero: the worst.
        let got = max_scaled_diff(&[100.0, 0.0], &[100.02, 0.005], 0.01, 0.001);
        assert!((got - 0.5).abs() < 1e-4, "{got}");
        let got = max_scaled_diff(&[100.0], &[100.02], 0.01, 0.001);
        assert!((got - 0.02 / 0.11).abs() < 1e-3, "{got}");
        assert!(max_scaled_diff(&[1.0, f32::NAN], &[1.0, 1.0], 0.01, 0.001).is_nan());
    }
}
