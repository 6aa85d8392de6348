//! The position-wise feed-forward network in its four real forms: plain
//! (`down(act(up(x)))`, GPT-2 and BERT), gated with separate gate and up projections
//! (`down(act(gate(x)) * up(x))`, Llama and T5 v1.1), gated with one fused `gate_up`
//! projection (Phi-3), and a sparse mixture of gated experts with a top-k router
//! (Mixtral), with the router's load-balancing loss ([`load_balancing_loss`]). Each form
//! holds exactly the projections it runs, so none can be built or loaded in a state it
//! cannot run.
//!
//! Names follow HF Llama (`gate_proj`, `up_proj`, `down_proj`) and Phi-3 (`gate_up_proj`).
//! GPT-2's `c_fc` is `up_proj` and its `c_proj` is `down_proj`. Burn leaves enum variant
//! names out of module paths, so the variants' fields are the checkpoint's names.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Initializer, Linear, LinearConfig};
use burn::tensor::activation::{relu, sigmoid, softmax};
use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use zoo_core::ConfigError;

use crate::block::{check_prob, linear_rows};
use crate::error::Result;

/// The feed-forward non-linearity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FfnActivation {
    /// `max(0, x)`, the original Transformer.
    Relu,
    /// Exact GELU (BERT, ViT).
    Gelu,
    /// GELU with the tanh approximation (GPT-2's `gelu_new`).
    GeluTanh,
    /// `x · sigmoid(1.702 x)`, CLIP's `quick_gelu`.
    QuickGelu,
    /// `silu(x) = x · sigmoid(x)` (Elfwing et al., 2018), ungated.
    Silu,
    /// `down(silu(gate(x)) * up(x))` (Shazeer, 2020; Llama).
    SwiGlu,
    /// `down(gelu(gate(x)) * up(x))` (Shazeer, 2020; T5 v1.1's `gated-gelu`, with the
    /// tanh approximation as HF's `gelu_new`).
    GeGlu,
    /// `down(gelu(gate(x)) * up(x))` with exact (erf) GELU (ModernBERT).
    GeGluExact,
}

impl FfnActivation {
    /// Whether the activation multiplies by a gate projection.
    pub fn is_gated(self) -> bool {
        matches!(self, Self::SwiGlu | Self::GeGlu | Self::GeGluExact)
    }

    /// The elementwise non-linearity: of the hidden layer, or of the gate when gated.
    fn elementwise(self) -> HiddenAct {
        match self {
            Self::Relu => HiddenAct::Relu,
            Self::Gelu | Self::GeGluExact => HiddenAct::Gelu,
            Self::GeluTanh | Self::GeGlu => HiddenAct::GeluTanh,
            Self::QuickGelu => HiddenAct::QuickGelu,
            Self::Silu | Self::SwiGlu => HiddenAct::Silu,
        }
    }
}

/// A feed-forward activation as HF's `config.json` names it (`hidden_act`): the
/// families' configs deserialize it and turn it into an [`FfnActivation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HiddenAct {
    /// Exact GELU (`"gelu"`), BERT's.
    #[serde(rename = "gelu")]
    Gelu,
    /// GELU with the tanh approximation (`"gelu_new"`, `"gelu_pytorch_tanh"`).
    #[serde(rename = "gelu_new", alias = "gelu_pytorch_tanh")]
    GeluTanh,
    /// `x · sigmoid(1.702 x)` (`"quick_gelu"`), the sigmoid approximation of GELU
    /// (Hendrycks & Gimpel, 2016) that CLIP trained with.
    #[serde(rename = "quick_gelu")]
    QuickGelu,
    /// `"relu"`.
    #[serde(rename = "relu")]
    Relu,
    /// `"silu"` (also `"swish"`).
    #[serde(rename = "silu", alias = "swish")]
    Silu,
}

/// GELU with the tanh approximation (Hendrycks & Gimpel, 2016; GPT-2's `gelu_new`):
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, computed as the equal
/// `x sigmoid(2 sqrt(2/pi) x (1 + 0.044715 x^2))`, since `(1 + tanh z) / 2 = sigmoid(2z)`.
///
/// Same values as Burn's `gelu_approximate` (within float rounding), in six cheap
/// element-wise ops where that one takes a `powf` for the cube and a `tanh`: on the CPU
/// backends both are scalar library calls per element, and they dominated the time of
/// GPT-2 training steps.
///
/// On flex in f32 it is one fused pass forward and one backward
/// ([`zoo_kernels::act::gelu_tanh`]); elsewhere the element-wise ops above.
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    zoo_kernels::act::gelu_tanh(x)
}

/// The gated activation whose gate non-linearity is `act`.
fn gated(act: HiddenAct) -> FfnActivation {
    match act {
        HiddenAct::Silu => FfnActivation::SwiGlu,
        HiddenAct::Gelu => FfnActivation::GeGluExact,
        _ => FfnActivation::GeGlu,
    }
}

impl HiddenAct {
    /// The shared feed-forward activation.
    pub fn ffn(self) -> FfnActivation {
        match self {
            Self::Gelu => FfnActivation::Gelu,
            Self::GeluTanh => FfnActivation::GeluTanh,
            Self::QuickGelu => FfnActivation::QuickGelu,
            Self::Relu => FfnActivation::Relu,
            Self::Silu => FfnActivation::Silu,
        }
    }

    /// Applies the activation elementwise (heads outside the feed-forward, such as
    /// BERT's masked-LM transform, use it directly).
    pub fn apply<const D: usize>(self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Self::Gelu => zoo_kernels::act::gelu(x),
            Self::GeluTanh => gelu_tanh(x),
            Self::QuickGelu => x.clone() * sigmoid(x * 1.702),
            Self::Relu => relu(x),
            Self::Silu => zoo_kernels::act::silu(x),
        }
    }
}

/// Where a gated network keeps its gate and up projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GateLayout {
    /// Two matrices, `gate_proj` and `up_proj` (Llama, T5 v1.1).
    Separate,
    /// One `gate_up_proj` of width `2 d_ff`, the gate in its first half (Phi-3): one
    /// product instead of two.
    Fused,
}

/// Whether every token runs the one network, or a router sends it to a few of several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Routing {
    /// One network for every token.
    #[default]
    Dense,
    /// A sparse mixture of experts (Shazeer et al., 2017; Mixtral, Jiang et al., 2024):
    /// a linear router scores `n_experts` gated networks, each token runs the `top_k`
    /// most probable ones (the softmax over all experts, the chosen probabilities
    /// renormalised to sum to 1), and their outputs are summed with those weights.
    TopK {
        /// Experts per layer (Mixtral: 8).
        n_experts: usize,
        /// Experts per token (Mixtral: 2).
        top_k: usize,
    },
}

impl Routing {
    /// Checks the counts.
    ///
    /// # Errors
    /// No experts, or a `top_k` of zero or above the experts.
    pub fn validate(&self) -> Result<()> {
        if let Self::TopK { n_experts, top_k } = *self {
            if n_experts == 0 {
                return Err(ConfigError::zero("n_experts").into());
            }
            if top_k == 0 || top_k > n_experts {
                return Err(ConfigError::range(
                    "top_k",
                    format!("in 1..={n_experts} (the experts)"),
                    top_k,
                )
                .into());
            }
        }
        Ok(())
    }
}

/// Configuration of [`FeedForward`].
#[derive(Config, Debug)]
pub struct FeedForwardConfig {
    /// Model width.
    pub d_model: usize,
    /// Hidden width (4 × d_model in GPT-2 and BERT).
    pub d_ff: usize,
    /// Non-linearity. Default: GELU.
    #[config(default = "FfnActivation::Gelu")]
    pub activation: FfnActivation,
    /// Where a gated activation's projections live. Default: separate.
    #[config(default = "GateLayout::Separate")]
    pub gate_layout: GateLayout,
    /// Biases on the projections. Default: true; Llama has none.
    #[config(default = true)]
    pub bias: bool,
    /// Dropout after the down projection. Default: 0.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// One network, or a mixture of experts (each a network of this configuration).
    /// Default: one.
    #[config(default = "Routing::Dense")]
    pub routing: Routing,
    /// Initial weights. Default: N(0, 0.02).
    #[config(default = "Initializer::Normal { mean: 0.0, std: 0.02 }")]
    pub initializer: Initializer,
}

/// `down(act(up(x)))`.
#[derive(Module, Debug)]
pub struct PlainFfn {
    /// Up projection `[d_model, d_ff]`.
    pub up_proj: Linear,
    /// Down projection `[d_ff, d_model]`.
    pub down_proj: Linear,
    /// Output dropout.
    pub dropout: Dropout,
    #[module(skip)]
    act: HiddenAct,
}

/// `down(act(gate(x)) * up(x))`.
#[derive(Module, Debug)]
pub struct GatedFfn {
    /// Gate projection `[d_model, d_ff]`.
    pub gate_proj: Linear,
    /// Up projection `[d_model, d_ff]`.
    pub up_proj: Linear,
    /// Down projection `[d_ff, d_model]`.
    pub down_proj: Linear,
    /// Output dropout.
    pub dropout: Dropout,
    #[module(skip)]
    act: HiddenAct,
}

/// `down(act(g) * u)` with `[g | u] = gate_up(x)`.
#[derive(Module, Debug)]
pub struct FusedGatedFfn {
    /// Gate and up projections side by side, `[d_model, 2 d_ff]`, the gate first.
    pub gate_up_proj: Linear,
    /// Down projection `[d_ff, d_model]`.
    pub down_proj: Linear,
    /// Output dropout.
    pub dropout: Dropout,
    #[module(skip)]
    act: HiddenAct,
}

/// The position-wise feed-forward network, in the form its configuration asks for.
#[derive(Module, Debug)]
pub enum FeedForward {
    /// Ungated: GPT-2, BERT, ViT, the original Transformer.
    Plain(PlainFfn),
    /// Gated, separate gate and up projections: Llama, Mistral, Qwen2, T5 v1.1.
    Gated(GatedFfn),
    /// Gated, one fused gate-up projection: Phi-3.
    FusedGated(FusedGatedFfn),
    /// A sparse mixture of gated experts: Mixtral.
    Experts(SparseMoe),
}

/// A sparse mixture of gated experts with a top-k router ([`Routing::TopK`]). Names as
/// HF's Mixtral modules: `router` is its `gate`, each expert's `gate_proj`, `up_proj` and
/// `down_proj` its `w1`, `w3` and `w2`.
#[derive(Module, Debug)]
pub struct SparseMoe {
    /// The router `[d_model, n_experts]`, without a bias.
    pub router: Linear,
    /// The experts.
    pub experts: Vec<GatedFfn>,
    #[module(skip)]
    top_k: usize,
}

impl FeedForwardConfig {
    /// Trainable parameters of the network [`Self::init`] builds: the up and down
    /// projections, and the gate for gated activations, with their biases (a fused
    /// gate-up matrix holds exactly the gate's and the up projection's).
    pub fn num_params(&self) -> usize {
        let linear = |d_in: usize, d_out: usize| d_in * d_out + usize::from(self.bias) * d_out;
        let gate = if self.activation.is_gated() {
            linear(self.d_model, self.d_ff)
        } else {
            0
        };
        let one = gate + linear(self.d_model, self.d_ff) + linear(self.d_ff, self.d_model);
        match self.routing {
            Routing::Dense => one,
            Routing::TopK { n_experts, .. } => n_experts * one + self.d_model * n_experts,
        }
    }

    /// Builds the network.
    ///
    /// # Errors
    /// Zero widths, a dropout outside `[0, 1)`, a fused gate layout with an ungated
    /// activation, or experts that are not gated networks with separate projections, or
    /// whose count or `top_k` is zero or `top_k` above the count.
    pub fn init(&self, device: &Device) -> Result<FeedForward> {
        if let Routing::TopK { n_experts, top_k } = self.routing {
            return self.init_experts(n_experts, top_k, device);
        }
        if self.d_model == 0 {
            return Err(ConfigError::zero("d_model").into());
        }
        if self.d_ff == 0 {
            return Err(ConfigError::zero("d_ff").into());
        }
        check_prob("ffn dropout", self.dropout)?;
        let linear = |a, b| {
            LinearConfig::new(a, b)
                .with_bias(self.bias)
                .with_initializer(self.initializer.clone())
                .init(device)
        };
        let (dropout, act) = (
            DropoutConfig::new(self.dropout).init(),
            self.activation.elementwise(),
        );
        let (d, f) = (self.d_model, self.d_ff);
        Ok(match (self.activation.is_gated(), self.gate_layout) {
            (false, GateLayout::Separate) => FeedForward::Plain(PlainFfn {
                up_proj: linear(d, f),
                down_proj: linear(f, d),
                dropout,
                act,
            }),
            (false, GateLayout::Fused) => {
                return Err(ConfigError::conflict(format!(
                    "a fused gate-up projection needs a gated activation, got {:?}",
                    self.activation
                ))
                .into());
            }
            (true, GateLayout::Separate) => FeedForward::Gated(GatedFfn {
                gate_proj: linear(d, f),
                up_proj: linear(d, f),
                down_proj: linear(f, d),
                dropout,
                act,
            }),
            (true, GateLayout::Fused) => FeedForward::FusedGated(FusedGatedFfn {
                gate_up_proj: linear(d, 2 * f),
                down_proj: linear(f, d),
                dropout,
                act,
            }),
        })
    }
}

impl FeedForwardConfig {
    fn init_experts(&self, n_experts: usize, top_k: usize, device: &Device) -> Result<FeedForward> {
        self.routing.validate()?;
        let one = self.clone().with_routing(Routing::Dense);
        let experts = (0..n_experts)
            .map(|_| match one.init(device)? {
                FeedForward::Gated(f) => Ok(f),
                _ => Err(ConfigError::conflict(format!(
                    "experts are gated networks with separate projections, got {:?} with a \
                     {:?} layout",
                    self.activation, self.gate_layout
                ))
                .into()),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(FeedForward::Experts(SparseMoe {
            router: LinearConfig::new(self.d_model, n_experts)
                .with_bias(false)
                .with_initializer(self.initializer.clone())
                .init(device),
            experts,
            top_k,
        }))
    }
}

impl GatedFfn {
    /// `down(act(gate(x)) * up(x))`, dropout after.
    ///
    /// # Shapes
    /// - `x`: `[B, T, d_model]` -> `[B, T, d_model]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let h =
            self.act.apply(linear_rows(&self.gate_proj, x.clone())) * linear_rows(&self.up_proj, x);
        crate::dropout(&self.dropout, linear_rows(&self.down_proj, h))
    }
}

impl SparseMoe {
    /// Experts per token.
    pub fn top_k(&self) -> usize {
        self.top_k
    }

    /// The router's scores of every expert for every token, `[B T, n_experts]`: what
    /// [`load_balancing_loss`] takes.
    ///
    /// # Shapes
    /// - `x`: `[B, T, d_model]` -> `[B T, n_experts]`
    pub fn router_logits(&self, x: Tensor<3>) -> Tensor<2> {
        let [b, t, d] = x.dims();
        self.router.forward(x.reshape([b * t, d]))
    }

    /// The mixture's output and the router's logits. Each expert runs on the tokens
    /// routed to it only: the routing is read back to the host once per call to gather
    /// them. The weights stay on the device, so the router is trained through them.
    ///
    /// # Shapes
    /// - `x`: `[B, T, d_model]` -> (`[B, T, d_model]`, `[B T, n_experts]`)
    pub fn forward_routed(&self, x: Tensor<3>) -> (Tensor<3>, Tensor<2>) {
        let [b, t, d] = x.dims();
        let (n, e, k) = (b * t, self.experts.len(), self.top_k);
        let device = x.device();
        let flat = x.reshape([n, d]);
        let logits = self.router.forward(flat.clone());
        // As transformers: the softmax over every expert in f32, the top k renormalised,
        // then narrowed to the model's float type.
        let dtype = logits.dtype();
        let probs = softmax(logits.clone().cast(crate::sdpa::accumulation(dtype)), 1);
        let (top, chosen) = probs.topk_with_indices(k, 1);
        let top = (top.clone() / top.sum_dim(1)).cast(dtype);
        let weights = Tensor::<2>::zeros([n, e], &device).scatter(
            1,
            chosen.clone(),
            top,
            IndexingUpdateOp::Add,
        );
        // An Int tensor this function built reads back on every backend; failing here is
        // a broken device, not an input to report.
        let host = chosen
            .into_data()
            .convert::<i64>()
            .try_into_vec::<i64>()
            .expect("the router's choices read back from the device");
        let mut rows: Vec<Vec<i64>> = vec![Vec::new(); e];
        for (i, &expert) in host.iter().enumerate() {
            if let Some(r) = usize::try_from(expert).ok().and_then(|x| rows.get_mut(x)) {
                r.push((i / k) as i64);
            }
        }
        let mut out = Tensor::<2>::zeros([n, d], &device);
        for (expert, (ffn, tokens)) in self.experts.iter().zip(rows).enumerate() {
            if tokens.is_empty() {
                continue;
            }
            let m = tokens.len();
            let ids = Tensor::<1, Int>::from_data(TensorData::new(tokens, [m]), &device);
            let y = ffn
                .forward(flat.clone().select(0, ids.clone()).reshape([1, m, d]))
                .reshape([m, d]);
            let w = weights
                .clone()
                .select(0, ids.clone())
                .slice([0..m, expert..expert + 1]);
            out = out.select_assign(0, ids, y * w, IndexingUpdateOp::Add);
        }
        (out.reshape([b, t, d]), logits)
    }
}

/// The router's auxiliary load-balancing loss (Fedus et al., 2022, "Switch Transformers",
/// eqs. 4-6; HF's `load_balancing_loss_func` without a mask): over every layer's router
/// logits `[N, E]`, `E · Σₑ fₑ · Pₑ`, where `fₑ` is the share of the top-`top_k`
/// assignments that went to expert `e` and `Pₑ` the mean router probability of `e`, both
/// per token over all layers. `top_k` when the router's probabilities are uniform; the
/// gradient reaches the router through `Pₑ`. Returns `[1]`, zero without layers.
pub fn load_balancing_loss(router_logits: &[Tensor<2>], top_k: usize) -> Tensor<1> {
    let Some(first) = router_logits.first() else {
        return Tensor::zeros([1], &Device::default());
    };
    let e = first.dims()[1];
    let device = first.device();
    let mut counts = Tensor::<1>::zeros([e], &device);
    let mut probs = Tensor::<1>::zeros([e], &device);
    let mut rows = 0;
    for logits in router_logits {
        let n = logits.dims()[0];
        let p = softmax(logits.clone(), 1);
        let (_, chosen) = p.clone().topk_with_indices(top_k.min(e), 1);
        let hot: Tensor<2, Int> = chosen.reshape([n * top_k.min(e)]).one_hot(e);
        counts = counts + hot.float().sum_dim(0).reshape([e]);
        probs = probs + p.sum_dim(0).reshape([e]);
        rows += n;
    }
    let rows = rows.max(1) as f64;
    ((counts / rows) * (probs / rows)).sum() * e as f64
}

impl FeedForward {
    /// The activation.
    pub fn activation(&self) -> FfnActivation {
        match self {
            Self::Plain(f) => f.act.ffn(),
            Self::Gated(GatedFfn { act, .. }) | Self::FusedGated(FusedGatedFfn { act, .. }) => {
                gated(*act)
            }
            Self::Experts(m) => m
                .experts
                .first()
                .map_or(FfnActivation::SwiGlu, |f| gated(f.act)),
        }
    }

    /// The output, and the router's logits `[B T, n_experts]` for a mixture of experts.
    ///
    /// # Shapes
    /// - `x`: `[B, T, d_model]` -> `[B, T, d_model]`
    pub fn forward_routed(&self, x: Tensor<3>) -> (Tensor<3>, Option<Tensor<2>>) {
        match self {
            Self::Experts(m) => {
                let (out, logits) = m.forward_routed(x);
                (out, Some(logits))
            }
            _ => (self.forward(x), None),
        }
    }

    /// # Shapes
    /// - `x`: `[B, T, d_model]` -> `[B, T, d_model]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let (h, down, dropout) = match self {
            Self::Plain(f) => (
                f.act.apply(linear_rows(&f.up_proj, x)),
                &f.down_proj,
                &f.dropout,
            ),
            Self::Gated(f) => return f.forward(x),
            Self::Experts(m) => return m.forward_routed(x).0,
            Self::FusedGated(f) => {
                let both = linear_rows(&f.gate_up_proj, x); // [B, T, 2 d_ff]
                let [b, t, w] = both.dims();
                let gate = both.clone().slice([0..b, 0..t, 0..w / 2]); // [B, T, d_ff]
                let up = both.slice([0..b, 0..t, w / 2..w]); // [B, T, d_ff]
                (f.act.apply(gate) * up, &f.down_proj, &f.dropout)
            }
        };
        crate::dropout(dropout, linear_rows(down, h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;
    use burn::tensor::activation::gelu;
    use zoo_device::test_device;
    use zoo_device::testing::{floats, max_abs_diff};

    fn x(b: usize, t: usize, d: usize) -> Tensor<3> {
        Tensor::random([b, t, d], Distribution::Normal(0.0, 1.0), &test_device())
    }

    /// Each token's output is the sum of its two most probable experts' outputs, weighted
    /// by their probabilities renormalised to sum to 1, as computed here by hand; every
    /// expert's weights are parameters; uniform router probabilities give a
    /// load-balancing loss of `top_k`; bad counts and ungated experts are refused.
    #[test]
    fn a_mixture_of_experts_sums_its_top_k_experts_by_their_renormalised_weights() {
        let dev = test_device();
        let cfg = FeedForwardConfig::new(8, 12)
            .with_activation(FfnActivation::SwiGlu)
            .with_bias(false)
            .with_routing(Routing::TopK {
                n_experts: 3,
                top_k: 2,
            })
            .with_initializer(Initializer::Normal {
                mean: 0.0,
                std: 0.5,
            });
        let ffn = cfg.init(&dev).unwrap();
        assert_eq!(ffn.num_params(), cfg.num_params());
        assert_eq!(cfg.num_params(), 3 * 3 * 8 * 12 + 8 * 3);
        let FeedForward::Experts(m) = &ffn else {
            panic!("not a mixture")
        };
        let input = x(2, 5, 8);
        let got = floats(ffn.forward(input.clone()));
        let p = floats(softmax(m.router_logits(input.clone()), 1));
        let outs: Vec<Vec<f32>> = m
            .experts
            .iter()
            .map(|e| floats(e.forward(input.clone())))
            .collect();
        let mut want = vec![0f32; 10 * 8];
        let mut mean = vec![0f32; 10 * 8];
        for tok in 0..10 {
            let row = &p[tok * 3..tok * 3 + 3];
            let mut order: Vec<usize> = (0..3).collect();
            order.sort_by(|a, b| row[*b].total_cmp(&row[*a]));
            let (a, b) = (order[0], order[1]);
            let sum = row[a] + row[b];
            for f in 0..8 {
                let i = tok * 8 + f;
                want[i] = row[a] / sum * outs[a][i] + row[b] / sum * outs[b][i];
                mean[i] = (outs[0][i] + outs[1][i] + outs[2][i]) / 3.0;
            }
        }
        let diff = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max)
        };
        assert!(diff(&got, &want) < 1e-5, "{}", diff(&got, &want));
        // Negative control: the plain mean of all experts is another output.
        assert!(diff(&got, &mean) > 1e-2);
        let uniform = Tensor::<2>::zeros([10, 3], &dev);
        let loss = floats(load_balancing_loss(&[uniform.clone(), uniform], 2))[0];
        assert!((loss - 2.0).abs() < 1e-6, "{loss}");
        for (routing, activation, want) in [
            (
                Routing::TopK {
                    n_experts: 0,
                    top_k: 1,
                },
                FfnActivation::SwiGlu,
                "n_experts",
            ),
            (
                Routing::TopK {
                    n_experts: 3,
                    top_k: 4,
                },
                FfnActivation::SwiGlu,
                "top_k",
            ),
            (
                Routing::TopK {
                    n_experts: 3,
                    top_k: 1,
                },
                FfnActivation::Gelu,
                "gated networks",
            ),
        ] {
            let e = cfg
                .clone()
                .with_routing(routing)
                .with_activation(activation)
                .init(&dev)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn ffn_activations_match_their_formulas() {
        let dev = test_device();
        let input = x(1, 2, 4);
        for act in [
            FfnActivation::Relu,
            FfnActivation::Gelu,
            FfnActivation::GeluTanh,
            FfnActivation::QuickGelu,
            FfnActivation::Silu,
            FfnActivation::SwiGlu,
            FfnActivation::GeGlu,
            FfnActivation::GeGluExact,
        ] {
            let ffn = FeedForwardConfig::new(4, 8)
                .with_activation(act)
                .init(&dev)
                .unwrap();
            assert_eq!(ffn.activation(), act);
            let (up_proj, gate_proj, down_proj) = match &ffn {
                FeedForward::Plain(f) => (&f.up_proj, None, &f.down_proj),
                FeedForward::Gated(f) => (&f.up_proj, Some(&f.gate_proj), &f.down_proj),
                FeedForward::FusedGated(_) | FeedForward::Experts(_) => {
                    panic!("{act:?}: another form without asking")
                }
            };
            assert_eq!(gate_proj.is_some(), act.is_gated(), "{act:?}");
            let up = up_proj.forward(input.clone());
            let h = match act {
                FfnActivation::Relu => up.clone().clamp_min(0.0),
                FfnActivation::Gelu => {
                    // x Φ(x) with Φ from erf
                    up.clone() * ((up.clone() / std::f64::consts::SQRT_2).erf() + 1.0) * 0.5
                }
                FfnActivation::GeluTanh => {
                    let inner = (up.clone() + up.clone().powi_scalar(3) * 0.044715)
                        * (2.0 / std::f64::consts::PI).sqrt();
                    up.clone() * (inner.tanh() + 1.0) * 0.5
                }
                FfnActivation::QuickGelu => {
                    up.clone() * burn::tensor::activation::sigmoid(up.clone() * 1.702)
                }
                FfnActivation::Silu => up.clone() * burn::tensor::activation::sigmoid(up.clone()),
                FfnActivation::SwiGlu => {
                    let g = gate_proj.unwrap().forward(input.clone());
                    g.clone() * burn::tensor::activation::sigmoid(g) * up.clone()
                }
                FfnActivation::GeGlu => {
                    let g = gate_proj.unwrap().forward(input.clone());
                    let inner = (g.clone() + g.clone().powi_scalar(3) * 0.044715)
                        * (2.0 / std::f64::consts::PI).sqrt();
                    g * (inner.tanh() + 1.0) * 0.5 * up.clone()
                }
                FfnActivation::GeGluExact => {
                    let g = gate_proj.unwrap().forward(input.clone());
                    g.clone() * ((g / std::f64::consts::SQRT_2).erf() + 1.0) * 0.5 * up.clone()
                }
            };
            let expected = down_proj.forward(h);
            assert!(
                max_abs_diff(&ffn.forward(input.clone()), &expected) < 1e-5,
                "{act:?}"
            );
        }
    }

    /// The fused form with `gate_up = [gate | up]` computes what the separate form does;
    /// swapping the halves (up first, as a wrong split would read them) does not.
    #[test]
    fn a_fused_gate_up_equals_separate_gate_and_up() {
        let dev = test_device();
        for act in [FfnActivation::SwiGlu, FfnActivation::GeGlu] {
            let cfg = FeedForwardConfig::new(6, 10)
                .with_activation(act)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: 0.5,
                });
            let FeedForward::Gated(sep) = cfg.init(&dev).unwrap() else {
                panic!("separate layout")
            };
            let fused_cfg = cfg.clone().with_gate_layout(GateLayout::Fused);
            assert_eq!(fused_cfg.num_params(), cfg.num_params());
            let FeedForward::FusedGated(mut fused) = fused_cfg.init(&dev).unwrap() else {
                panic!("fused layout")
            };
            assert_eq!(fused.gate_up_proj.weight.dims(), [6, 20]);
            let join = |first: &Linear, second: &Linear| {
                let w = Tensor::cat(vec![first.weight.val(), second.weight.val()], 1);
                let b = Tensor::cat(
                    vec![
                        first.bias.as_ref().unwrap().val(),
                        second.bias.as_ref().unwrap().val(),
                    ],
                    0,
                );
                (w, b)
            };
            let input = x(2, 3, 6);
            let separate = FeedForward::Gated(sep);
            let want = separate.forward(input.clone());
            let FeedForward::Gated(sep) = &separate else {
                unreachable!()
            };
            fused.down_proj = sep.down_proj.clone();
            for (first, second, same) in [
                (&sep.gate_proj, &sep.up_proj, true),
                (&sep.up_proj, &sep.gate_proj, false),
            ] {
                let (w, b) = join(first, second);
                let mut f = fused.clone();
                f.gate_up_proj.weight = burn::module::Param::from_tensor(w);
                f.gate_up_proj.bias = Some(burn::module::Param::from_tensor(b));
                let got = FeedForward::FusedGated(f).forward(input.clone());
                let diff = max_abs_diff(&got, &want);
                if same {
                    assert!(diff < 1e-5, "{act:?}: {diff}");
                } else {
                    assert!(diff > 1e-2, "{act:?}: swapped halves differ by only {diff}");
                }
            }
        }
    }

    #[test]
    fn a_fused_layout_needs_a_gated_activation() {
        let e = FeedForwardConfig::new(4, 8)
            .with_gate_layout(GateLayout::Fused)
            .init(&test_device())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "a fused gate-up projection needs a gated activation, got Gelu"
        );
    }

    #[test]
    fn gelu_tanh_is_the_tanh_formula_and_burns_approximation() {
        let dev = test_device();
        let xs: Vec<f32> = (-200..=200).map(|i| i as f32 * 0.05).collect();
        let n = xs.len();
        let x = Tensor::<1>::from_data(burn::tensor::TensorData::new(xs.clone(), [n]), &dev);
        let got = gelu_tanh(x.clone())
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let c = (2.0 / std::f64::consts::PI).sqrt();
        for (v, g) in xs.iter().zip(&got) {
            let v = f64::from(*v);
            let want = 0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh());
            assert!(
                (f64::from(*g) - want).abs() < 2e-6,
                "x = {v}: {g} vs {want}"
            );
        }
        // Burn's own (powf and tanh) agrees, and exact GELU differs by more than the
        // tolerance: the check can tell the two apart.
        let burn = burn::tensor::activation::gelu_approximate(x.clone());
        assert!(max_abs_diff(&gelu_tanh(x.clone()), &burn) < 2e-6);
        assert!(max_abs_diff(&gelu(x.clone()), &burn) > 1e-4);
        // Large inputs saturate without NaN: x for x >> 0, -0 for x << 0.
        let big =
            Tensor::<1>::from_data(burn::tensor::TensorData::new(vec![-1e4f32, 1e4], [2]), &dev);
        assert_eq!(
            gelu_tanh(big).into_data().try_to_vec::<f32>().unwrap(),
            [0.0, 1e4]
        );
    }

    #[test]
    fn quick_gelu_is_clips_sigmoid_formula_and_reads_from_its_hf_name() {
        let dev = test_device();
        let xs: Vec<f32> = (-60..=60).map(|i| i as f32 * 0.1).collect();
        let n = xs.len();
        let x = Tensor::<1>::from_data(burn::tensor::TensorData::new(xs.clone(), [n]), &dev);
        let act: HiddenAct = serde_json::from_str("\"quick_gelu\"").unwrap();
        assert_eq!(act, HiddenAct::QuickGelu);
        assert_eq!(act.ffn(), FfnActivation::QuickGelu);
        let got = act
            .apply(x.clone())
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        for (v, g) in xs.iter().zip(&got) {
            let v = f64::from(*v);
            let want = v / (1.0 + (-1.702 * v).exp());
            assert!(
                (f64::from(*g) - want).abs() < 2e-6,
                "x = {v}: {g} vs {want}"
            );
        }
        // Exact GELU differs by more than the tolerance.
        assert!(max_abs_diff(&act.apply(x.clone()), &gelu(x)) > 1e-3);
    }
}
