//! The position-wise feed-forward network in its three real forms: plain
//! (`down(act(up(x)))`, GPT-2 and BERT), gated with separate gate and up projections
//! (`down(act(gate(x)) * up(x))`, Llama and T5 v1.1) and gated with one fused `gate_up`
//! projection (Phi-3). Each form holds exactly the projections it runs, so none can be
//! built or loaded in a state it cannot run.
//!
//! Names follow HF Llama (`gate_proj`, `up_proj`, `down_proj`) and Phi-3 (`gate_up_proj`).
//! GPT-2's `c_fc` is `up_proj` and its `c_proj` is `down_proj`. Burn leaves enum variant
//! names out of module paths, so the variants' fields are the checkpoint's names.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Initializer, Linear, LinearConfig};
use burn::tensor::activation::{gelu, relu, sigmoid, silu};
use burn::tensor::{Device, Tensor};
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
    /// `silu(x) = x · sigmoid(x)` (Elfwing et al., 2018), ungated.
    Silu,
    /// `down(silu(gate(x)) * up(x))` (Shazeer, 2020; Llama).
    SwiGlu,
    /// `down(gelu(gate(x)) * up(x))` (Shazeer, 2020; T5 v1.1's `gated-gelu`, with the
    /// tanh approximation as HF's `gelu_new`).
    GeGlu,
}

impl FfnActivation {
    /// Whether the activation multiplies by a gate projection.
    pub fn is_gated(self) -> bool {
        matches!(self, Self::SwiGlu | Self::GeGlu)
    }

    /// The elementwise non-linearity: of the hidden layer, or of the gate when gated.
    fn elementwise(self) -> HiddenAct {
        match self {
            Self::Relu => HiddenAct::Relu,
            Self::Gelu => HiddenAct::Gelu,
            Self::GeluTanh | Self::GeGlu => HiddenAct::GeluTanh,
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
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    /// 2 sqrt(2 / pi).
    const A: f64 = 2.0 * core::f64::consts::FRAC_2_SQRT_PI * core::f64::consts::FRAC_1_SQRT_2;
    const B: f64 = A * 0.044715;
    let z = (x.clone() * x.clone() * B + A) * x.clone();
    x * sigmoid(z)
}

impl HiddenAct {
    /// The shared feed-forward activation.
    pub fn ffn(self) -> FfnActivation {
        match self {
            Self::Gelu => FfnActivation::Gelu,
            Self::GeluTanh => FfnActivation::GeluTanh,
            Self::Relu => FfnActivation::Relu,
            Self::Silu => FfnActivation::Silu,
        }
    }

    /// Applies the activation elementwise (heads outside the feed-forward, such as
    /// BERT's masked-LM transform, use it directly).
    pub fn apply<const D: usize>(self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Self::Gelu => gelu(x),
            Self::GeluTanh => gelu_tanh(x),
            Self::Relu => relu(x),
            Self::Silu => silu(x),
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
        gate + linear(self.d_model, self.d_ff) + linear(self.d_ff, self.d_model)
    }

    /// Builds the network.
    ///
    /// # Errors
    /// Zero widths, a dropout outside `[0, 1)`, or a fused gate layout with an ungated
    /// activation.
    pub fn init(&self, device: &Device) -> Result<FeedForward> {
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

impl FeedForward {
    /// The activation.
    pub fn activation(&self) -> FfnActivation {
        match self {
            Self::Plain(f) => f.act.ffn(),
            Self::Gated(GatedFfn { act, .. }) | Self::FusedGated(FusedGatedFfn { act, .. }) => {
                if *act == HiddenAct::Silu {
                    FfnActivation::SwiGlu
                } else {
                    FfnActivation::GeGlu
                }
            }
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
            Self::Gated(f) => (
                f.act.apply(linear_rows(&f.gate_proj, x.clone())) * linear_rows(&f.up_proj, x),
                &f.down_proj,
                &f.dropout,
            ),
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
    use zoo_device::test_device;
    use zoo_device::testing::max_abs_diff;

    fn x(b: usize, t: usize, d: usize) -> Tensor<3> {
        Tensor::random([b, t, d], Distribution::Normal(0.0, 1.0), &test_device())
    }

    #[test]
    fn ffn_activations_match_their_formulas() {
        let dev = test_device();
        let input = x(1, 2, 4);
        for act in [
            FfnActivation::Relu,
            FfnActivation::Gelu,
            FfnActivation::GeluTanh,
            FfnActivation::Silu,
            FfnActivation::SwiGlu,
            FfnActivation::GeGlu,
        ] {
            let ffn = FeedForwardConfig::new(4, 8)
                .with_activation(act)
                .init(&dev)
                .unwrap();
            assert_eq!(ffn.activation(), act);
            let (up_proj, gate_proj, down_proj) = match &ffn {
                FeedForward::Plain(f) => (&f.up_proj, None, &f.down_proj),
                FeedForward::Gated(f) => (&f.up_proj, Some(&f.gate_proj), &f.down_proj),
                FeedForward::FusedGated(_) => panic!("{act:?}: fused without asking"),
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
}
