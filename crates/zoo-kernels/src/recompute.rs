//! Activation checkpointing by block: a transformer block keeps only its input for the
//! backward pass, and the backward runs the block again to get its gradients.
//!
//! Burn 0.22.1's `GradientCheckpointingStrategy::Balanced` recomputes the memory-bound
//! ops (element-wise ops, norms, softmax) and keeps the output of every matrix product,
//! so a block still holds its projections, its attention output and its MLP's hidden
//! layer: about 0.55 to 0.63 of the plain run's activations on BERT-base and GPT-2 small.
//! [`checkpointed`] takes the block as the unit instead: while the device runs Burn's
//! balanced strategy, the block's forward runs outside the tape, one op stands for it on
//! the tape with the block's input as its saved state, and that op's backward runs the
//! block's forward again on a tape of its own, then its backward, and hands the input's
//! and the parameters' gradients to the outer tape. What the whole model holds is one
//! tensor per block and, during the backward, one block's activations.
//!
//! Randomness: when the block draws random numbers (dropout), the forward seeds the
//! device's generator with a seed drawn from it, and the recomputation seeds it again
//! with the same seed, so both runs draw the same masks. The stream of random numbers
//! is then not the one a run without checkpointing draws: with dropout on, the two runs'
//! losses differ as two seeds do; with dropout off, they are equal.
//!
//! The op is registered for every backend (`flex`, `ndarray`, `tch`, `wgpu`, `cuda`) and
//! for Burn's autodiff; `ZOO_KERNELS=off` ([`crate::set_enabled`]) leaves Burn's strategy
//! alone.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, DispatchTensor, backend_extension};
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Distribution, GradientCheckpointingStrategy, Gradients, Tensor};

/// What the recomputation hands back: the gradient of the block's input (when the input
/// is tracked) and, for each parameter that requires a gradient, the original
/// parameter (its node on the outer tape) with its gradient.
struct Reran {
    input: Option<DispatchTensor>,
    params: Vec<(DispatchTensor, DispatchTensor)>,
}

/// Runs the block again from the gradient of its output.
type Rerun = Box<dyn FnOnce(Tensor<3>) -> Reran + Send>;

/// A block's recomputation, run once by the op's backward.
#[derive(Clone)]
pub struct Block(Arc<Mutex<Option<Rerun>>>);

impl fmt::Debug for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Block")
    }
}

impl Block {
    fn take(&self) -> Rerun {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("a checkpointed block's backward runs once")
    }
}

/// The op that stands for a block on the tape.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    LibTorch: cfg(feature = "tch"),
    Cube: cfg(any(feature = "wgpu", feature = "cuda")),
    Autodiff
)]
pub trait RecomputeOps: Backend {
    /// `output`, computed from `input` by `block` outside the tape, recorded as an op of
    /// the parents `input` and `anchor` (a tracked tensor when `input` is not: one of the
    /// block's parameters) whose backward is the block's recomputation. Without autodiff
    /// this is `output` itself.
    fn recomputed(
        input: FloatTensor<Self>,
        anchor: FloatTensor<Self>,
        output: FloatTensor<Self>,
        block: Block,
    ) -> FloatTensor<Self> {
        let _ = (input, anchor, block);
        output
    }
}

#[cfg(feature = "flex")]
impl RecomputeOps for burn::backend::Flex {}
#[cfg(feature = "ndarray")]
impl RecomputeOps for burn::backend::NdArray {}
#[cfg(feature = "tch")]
impl RecomputeOps for burn::backend::LibTorch {}
#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl RecomputeOps for burn::backend::Cube {}

mod autodiff {
    use core::marker::PhantomData;

    use burn::backend::autodiff::Autodiff;
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::tensor::FloatTensor;
    use burn::backend::{Backend, DispatchKindConversion, DispatchTensor};
    use burn::tensor::Tensor;

    use super::{Block, RecomputeOps};

    struct RecomputeBackward<C> {
        block: Block,
        strategy: PhantomData<C>,
    }

    impl<C> core::fmt::Debug for RecomputeBackward<C> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str("RecomputeBackward")
        }
    }

    /// A gradient of the recomputation's own tape as the inner backend's tensor.
    fn inner<B: Backend>(t: DispatchTensor) -> FloatTensor<B>
    where
        DispatchTensor: DispatchKindConversion<B>,
    {
        <DispatchTensor as DispatchKindConversion<B>>::try_into_backend(t)
            .expect("a gradient lives on the block's backend")
            .float()
    }

    /// Two parents: the block's input and the anchor, which only makes the op tracked.
    impl<B: Backend, C: CheckpointStrategy> Backward<B, 2> for RecomputeBackward<C>
    where
        DispatchTensor: DispatchKindConversion<B> + DispatchKindConversion<Autodiff<B, C>>,
    {
        type State = ();

        fn backward(
            self,
            ops: Ops<Self::State, 2>,
            grads: &mut Gradients,
            _checkpointer: &mut Checkpointer,
        ) {
            let grad = grads.consume::<B>(&ops.node);
            let reran = (self.block.take())(Tensor::from_primitive::<B>(grad));
            let [input, _anchor] = ops.parents;
            if let (Some(node), Some(g)) = (input, reran.input) {
                grads.register::<B>(node.id, inner::<B>(g));
            }
            for (param, g) in reran.params {
                let id =
                    <DispatchTensor as DispatchKindConversion<Autodiff<B, C>>>::try_into_backend(
                        param,
                    )
                    .expect("a block's parameter lives on the autodiff backend of its input")
                    .float()
                    .id();
                grads.register::<B>(id, inner::<B>(g));
            }
        }
    }

    impl<B: Backend + RecomputeOps, C: CheckpointStrategy> RecomputeOps for Autodiff<B, C>
    where
        DispatchTensor: DispatchKindConversion<B> + DispatchKindConversion<Autodiff<B, C>>,
    {
        fn recomputed(
            input: FloatTensor<Self>,
            anchor: FloatTensor<Self>,
            output: FloatTensor<Self>,
            block: Block,
        ) -> FloatTensor<Self> {
            let backward = RecomputeBackward::<C> {
                block,
                strategy: PhantomData,
            };
            match backward
                .prepare::<C>([input.node(), anchor.node()])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => prep.finish((), output.into_primitive()),
                OpsKind::UnTracked(prep) => prep.finish(output.into_primitive()),
            }
        }
    }
}

/// Each float parameter's raw value (no reparameterization applied: LoRA's base and its
/// two factors are visited as three parameters), in the module's order.
struct Params(Vec<(DispatchTensor, bool)>);

impl ModuleVisitor for Params {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let t = param.base();
        let grad = t.is_require_grad();
        self.0.push((t.into_dispatch(), grad));
    }
}

fn params<M: Module>(module: &M) -> Vec<(DispatchTensor, bool)> {
    let mut v = Params(Vec::new());
    module.visit(&mut v);
    v.0
}

/// The same values as new leaves of a tape of their own: those that required a gradient
/// still do.
struct Fresh;

impl ModuleMapper for Fresh {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        param.map(|t| {
            let grad = t.is_require_grad();
            let t = t.detach();
            if grad { t.require_grad() } else { t }
        })
    }
}

/// A seed drawn from `device`'s generator: two uniform draws, each scaled to 32 bits (an
/// `f32` draw carries about 24 of them).
pub fn seed_from(device: &burn::tensor::Device) -> u64 {
    let draws = Tensor::<1>::random([2], Distribution::Uniform(0.0, 1.0), device)
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap_or_default();
    let bits =
        |i: usize| (f64::from(draws.get(i).copied().unwrap_or(0.5)) * 4_294_967_296.0) as u64;
    (bits(0) << 32) ^ bits(1)
}

static RERUNS: AtomicU64 = AtomicU64::new(0);

/// How many blocks the backward passes of this process have run again: what shows that
/// checkpointing by block took place.
pub fn reruns() -> u64 {
    RERUNS.load(Ordering::Relaxed)
}

/// Whether [`checkpointed`] recomputes a block whose input is `x`: the zoo's kernels are
/// on ([`crate::enabled`]) and `x` is on an autodiff device with Burn's balanced
/// gradient-checkpointing strategy (`Device::gradient_checkpointing`).
pub fn applies(x: &Tensor<3>) -> bool {
    crate::enabled()
        && x.gradient_checkpointing_strategy() == Some(GradientCheckpointingStrategy::Balanced)
}

/// `forward(module, x)`, keeping only `x` for the backward pass when [`applies`] holds
/// and something in it needs a gradient (`x` or a parameter of `module`); plainly
/// otherwise. `random`: the block draws random numbers (dropout on), so the forward and
/// its recomputation seed the device's generator alike.
///
/// `forward` runs twice: outside the tape, then in the backward on a tape of its own.
/// Whatever it captures besides `module` and `x` (masks, positions) must be constants:
/// no gradient reaches a captured tensor.
///
/// # Errors
/// Those of `forward`'s first run.
pub fn checkpointed<M, E, F>(
    module: &M,
    x: Tensor<3>,
    random: bool,
    forward: F,
) -> Result<Tensor<3>, E>
where
    M: Module + 'static,
    F: Fn(&M, Tensor<3>) -> Result<Tensor<3>, E> + Send + 'static,
{
    if !applies(&x) {
        return forward(module, x);
    }
    let originals = params(module);
    let anchor = if x.is_tracked() {
        Some(x.clone().into_dispatch())
    } else {
        originals
            .iter()
            .find(|(_, grad)| *grad)
            .map(|(t, _)| t.clone())
    };
    let Some(anchor) = anchor else {
        return forward(module, x);
    };
    let device = x.device();
    let seed = random.then(|| {
        let s = seed_from(&device);
        device.seed(s);
        s
    });
    let tracked = x.is_tracked();
    let input = x.clone().detach();
    let output = forward(&module.clone().no_grad(), input.clone())?;
    let module = module.clone();
    let rerun: Rerun = Box::new(move |grad: Tensor<3>| {
        RERUNS.fetch_add(1, Ordering::Relaxed);
        let device = input.device();
        // The stream the rest of the run goes on with, drawn before the block's seed.
        let resume = seed.map(|s| {
            let r = seed_from(&device);
            device.seed(s);
            r
        });
        let fresh = module.map(&mut Fresh);
        let x = if tracked { input.require_grad() } else { input };
        let y = match forward(&fresh, x.clone()) {
            Ok(y) => y,
            Err(_) => panic!("a checkpointed block failed when run again on the same input"),
        };
        if let Some(r) = resume {
            device.seed(r);
        }
        let grads = (y * grad).sum().backward();
        let mut found = ParamGrads {
            grads: &grads,
            found: Vec::new(),
        };
        fresh.visit(&mut found);
        let params = originals
            .into_iter()
            .zip(found.found)
            .filter_map(|((original, _), g)| g.map(|g| (original, g)))
            .collect();
        Reran {
            input: tracked
                .then(|| x.grad(&grads).map(Tensor::into_dispatch))
                .flatten(),
            params,
        }
    });
    Ok(Tensor::from_dispatch(burn::backend::Dispatch::recomputed(
        x.into_dispatch(),
        anchor,
        output.into_dispatch(),
        Block(Arc::new(Mutex::new(Some(rerun)))),
    )))
}

/// Each float parameter's gradient on the recomputation's tape, in the module's order
/// (`None` for one that needs none).
struct ParamGrads<'a> {
    grads: &'a Gradients,
    found: Vec<Option<DispatchTensor>>,
}

impl ModuleVisitor for ParamGrads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let t = param.base();
        let g = t
            .is_require_grad()
            .then(|| t.grad(self.grads))
            .flatten()
            .map(Tensor::into_dispatch);
        self.found.push(g);
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::module::{Module, Param};
    use burn::tensor::activation::gelu;
    use burn::tensor::{Device, Distribution, Tensor};

    use super::{checkpointed, seed_from};
    use crate::testing::{host, max_rel};

    /// A block with the shape of a transformer's MLP: `x + W2 gelu(W1 x + b) · mask`.
    #[derive(Module, Debug)]
    struct Mlp {
        w1: Param<Tensor<2>>,
        b1: Param<Tensor<1>>,
        w2: Param<Tensor<2>>,
    }

    impl Mlp {
        fn new(device: &Device, frozen_w1: bool) -> Self {
            let w = |shape: [usize; 2]| {
                let t = Tensor::<2>::random(shape, Distribution::Normal(0.0, 0.3), &Device::flex());
                Tensor::from_data(t.into_data(), device)
            };
            Device::flex().seed(11);
            let w1 = Param::from_tensor(w([12, 20])).set_require_grad(!frozen_w1);
            Self {
                w1,
                b1: Param::from_tensor(Tensor::<1>::random(
                    [20],
                    Distribution::Normal(0.0, 0.1),
                    device,
                )),
                w2: Param::from_tensor(w([20, 12])),
            }
        }
    }

    /// The block; `dropout` zeroes that share of the hidden layer, drawn from the device.
    fn block(m: &Mlp, x: Tensor<3>, dropout: f64) -> Tensor<3> {
        let h = gelu(x.clone().matmul(m.w1.val().unsqueeze()) + m.b1.val().unsqueeze());
        let h = if dropout > 0.0 {
            let keep = h.random_like(Distribution::Bernoulli(1.0 - dropout));
            h * keep / (1.0 - dropout)
        } else {
            h
        };
        x + h.matmul(m.w2.val().unsqueeze())
    }

    /// Three blocks in a row, then a loss; the values of the loss, the input's gradient
    /// and every trained parameter's gradient. `checkpoint`: on a device with Burn's
    /// balanced strategy, each block through [`checkpointed`]; otherwise plainly, with
    /// the generator seeded before each block as [`checkpointed`] seeds it.
    fn run(checkpoint: bool, dropout: f64, seed: u64, frozen_w1: bool) -> Vec<Vec<f32>> {
        let device = if checkpoint {
            Device::flex().autodiff().gradient_checkpointing()
        } else {
            Device::flex().autodiff()
        };
        let m = Mlp::new(&device, frozen_w1);
        Device::flex().seed(5);
        let x0 = Tensor::<3>::random([2, 7, 12], Distribution::Normal(0.0, 1.0), &Device::flex());
        let x = Tensor::<3>::from_data(x0.into_data(), &device).require_grad();
        device.seed(seed);
        let before = super::reruns();
        let mut h = x.clone();
        for _ in 0..3 {
            h = if checkpoint {
                checkpointed(&m, h, dropout > 0.0, move |m, x| {
                    Ok::<_, ()>(block(m, x, dropout))
                })
                .unwrap()
            } else {
                if dropout > 0.0 {
                    device.seed(seed_from(&device));
                }
                block(&m, h, dropout)
            };
        }
        let loss = (h.clone() * h).mean();
        let grads = loss.backward();
        // Each block ran again in the backward pass, and only there.
        assert_eq!(super::reruns() - before, if checkpoint { 3 } else { 0 });
        let mut out = vec![host(loss), host(x.grad(&grads).unwrap())];
        if !frozen_w1 {
            out.push(host(m.w1.val().grad(&grads).unwrap()));
        } else {
            assert!(m.w1.val().grad(&grads).is_none());
        }
        out.push(host(m.b1.val().grad(&grads).unwrap()));
        out.push(host(m.w2.val().grad(&grads).unwrap()));
        out
    }

    fn compare(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(a, b)| max_rel(a, b))
            .fold(0f32, f32::max)
    }

    /// The loss and the gradients of the input and of each parameter (summed over the
    /// three blocks that share them) equal the plain run's within 1e-5 of the largest
    /// value: the same ops in the same order, run again. With dropout, both runs draw the
    /// same masks. Negative control: another seed's masks move the gradients by more
    /// than 1e-2.
    #[test]
    fn recomputed_blocks_give_the_plain_runs_gradients() {
        let _rng = crate::testing::rng();
        for dropout in [0.0, 0.3] {
            let plain = run(false, dropout, 3, false);
            let recomputed = run(true, dropout, 3, false);
            let err = compare(&recomputed, &plain);
            assert!(err < 1e-5, "dropout {dropout}: {err:e}");
        }
        let other = run(true, 0.3, 4, false);
        let moved = compare(&other, &run(false, 0.3, 3, false));
        assert!(
            moved > 1e-2,
            "another seed moved the gradients by {moved:e}"
        );
    }

    /// A frozen parameter (as LoRA's base) gets no gradient, the others theirs.
    #[test]
    fn a_frozen_parameter_gets_no_gradient() {
        let _rng = crate::testing::rng();
        let plain = run(false, 0.0, 3, true);
        let recomputed = run(true, 0.0, 3, true);
        assert!(compare(&recomputed, &plain) < 1e-5);
    }
}
