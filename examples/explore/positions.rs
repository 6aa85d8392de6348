//! Positional encodings, measured: the sinusoidal table (Vaswani et al., 2017, 3.5) as a
//! heatmap, the smallest distance between two of its rows, the similarity of position 0
//! with later positions, RoPE's relative-offset property (Su et al., 2021), and the
//! learned table of a names GPT trained here.

use std::path::Path;

use burn::tensor::{Device, Distribution, Tensor};
use zoo_attention::position::{RopeLayout, RotaryEncodingConfig, sinusoidal_table};
use zoo_examples::Error;
use zoo_examples::names::{NamesSettings, train};
use zoo_train::plot::{LineChart, heatmap, line_chart};

/// Width of the tables drawn and measured.
const D: usize = 128;

fn host(t: Tensor<2>) -> Result<Vec<Vec<f32>>, Error> {
    let [r, c] = t.dims();
    let v = t
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| format!("{e:?}"))?;
    Ok((0..r).map(|i| v[i * c..(i + 1) * c].to_vec()).collect())
}

/// Labels for `n` rows or columns: every `every`-th index, blanks between.
fn sparse_labels(n: usize, every: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            if i % every == 0 {
                i.to_string()
            } else {
                String::new()
            }
        })
        .collect()
}

pub fn run(
    names_epochs: usize,
    device_name: &str,
    device: &Device,
    out: &Path,
) -> Result<(), Error> {
    // 1. The table itself.
    let shown = 64;
    let table = sinusoidal_table(shown, D, device)?;
    let png = heatmap(
        &out.join("positions-sinusoidal.png"),
        &host(table)?,
        &sparse_labels(shown, 8),
        &sparse_labels(D, 16),
        &format!("sinusoidal encoding: {shown} positions x {D} dimensions"),
    )?;
    println!("sinusoidal table ({shown} x {D}): {}", png.display());

    // 2. Are the rows distinct? Every row has squared norm D/2 (sin² + cos² per pair), so
    //    the squared distance of rows i and j is D - 2 <PE_i, PE_j>.
    let n = 4096;
    let table = sinusoidal_table(n, D, device)?;
    let gram = table.clone().matmul(table.clone().transpose()); // [n, n]
    let eye = Tensor::<2>::eye(n, device).bool();
    let off_diagonal = gram.mask_fill(eye, f32::NEG_INFINITY);
    let flat = off_diagonal.reshape([n * n]);
    let closest = flat.clone().argmax(0).into_scalar::<i64>() as usize;
    let dot = flat.max().into_scalar::<f32>();
    let (i, j) = (closest / n, closest % n);
    let distance = (D as f32 - 2.0 * dot).max(0.0).sqrt();
    println!(
        "distinct positions: over all pairs of the first {n} positions (d = {D}), the closest \
         two rows are {} apart (positions {} and {}), at distance {distance:.4}; each row has \
         length {:.2}. The distance depends only on the offset, so every pair that far apart \
         ties.",
        i.abs_diff(j),
        i.min(j),
        i.max(j),
        (D as f32 / 2.0).sqrt()
    );

    // 3. Position 0 against later positions.
    let far = 512;
    let table = sinusoidal_table(far, D, device)?;
    let first = table.clone().slice([0..1, 0..D]);
    let sims = table
        .matmul(first.transpose())
        .reshape([far])
        .into_data()
        .try_to_vec::<f32>()
        .map_err(|e| format!("{e:?}"))?;
    let curve = line_chart(
        &out.join("positions-similarity.png"),
        &LineChart {
            title: format!("<PE(0), PE(k)>, d = {D}"),
            x_desc: "position k".into(),
            y_desc: "dot product".into(),
            series: vec![(
                "sinusoidal".into(),
                sims.iter()
                    .enumerate()
                    .map(|(k, v)| (k as f64, f64::from(*v)))
                    .collect(),
            )],
            log_x: false,
            log_y: false,
        },
    )?;
    let at = |k: usize| sims[k];
    println!(
        "similarity with position 0: k=0 {:.2}, k=1 {:.2}, k=4 {:.2}, k=16 {:.2}, k=64 {:.2}, k=256 {:.2}, k=511 {:.2}: {}",
        at(0),
        at(1),
        at(4),
        at(16),
        at(64),
        at(256),
        at(511),
        curve.display()
    );

    // 4. RoPE: the score of a query at position m and a key at position n depends only on
    //    m - n. The same query and key vectors are placed at every position, rotated, and
    //    every pair scored; each diagonal of the score matrix is one offset.
    let (t, hd) = (256, 64);
    let rope = RotaryEncodingConfig::new(hd, t)
        .with_layout(RopeLayout::HalfSplit)
        .init(device)?;
    device.seed(3);
    let q = Tensor::<4>::random([1, 1, 1, hd], Distribution::Normal(0.0, 1.0), device);
    let k = Tensor::<4>::random([1, 1, 1, hd], Distribution::Normal(0.0, 1.0), device);
    let rq = rope.forward(q.repeat_dim(2, t), 0)?.reshape([t, hd]);
    let rk = rope.forward(k.repeat_dim(2, t), 0)?.reshape([t, hd]);
    let scores = host(rq.matmul(rk.transpose()))?;
    let mut within = 0f32; // largest spread along one offset
    let mut per_offset = Vec::new();
    for offset in 0..t {
        let diag: Vec<f32> = (offset..t).map(|m| scores[m][m - offset]).collect();
        let (lo, hi) = diag
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), v| {
                (l.min(*v), h.max(*v))
            });
        within = within.max(hi - lo);
        per_offset.push(diag[0]);
    }
    let (lo, hi) = per_offset
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), v| {
            (l.min(*v), h.max(*v))
        });
    println!(
        "RoPE (head 64, theta 10000): q·k over {t} positions; along one offset m - n the \
         score varies by at most {within:.2e}; across offsets it ranges from {lo:.3} to {hi:.3}"
    );
    println!(
        "  offset 0: {:.4}, 1: {:.4}, 2: {:.4}, 10: {:.4}, 100: {:.4}",
        per_offset[0], per_offset[1], per_offset[2], per_offset[10], per_offset[100]
    );

    // 5. A learned table: the names GPT, trained here for a few epochs.
    if names_epochs > 0 {
        let mut settings = NamesSettings::seeds(names_epochs, out.join("names-run"));
        settings.overwrite = true;
        settings.device = device_name.to_string();
        println!(
            "training the names GPT for {names_epochs} epochs for its learned position table..."
        );
        let outcome = train(&settings, device, None)?;
        let wpe = outcome
            .model
            .wpe
            .as_ref()
            .ok_or("the names GPT has no learned position table")?
            .embedding
            .weight
            .val();
        let [len, d] = wpe.dims();
        let png = heatmap(
            &out.join("positions-learned.png"),
            &host(wpe.clone())?,
            &sparse_labels(len, 1),
            &sparse_labels(d, 8),
            &format!("names GPT's learned positions: {len} x {d}"),
        )?;
        // How alike neighbouring positions became, as cosine similarity.
        let norms = wpe.clone().powi_scalar(2).sum_dim(1).sqrt(); // [len, 1]
        let unit = wpe / norms;
        let cos = host(unit.clone().matmul(unit.transpose()))?;
        let neighbours: Vec<String> = (1..len).map(|p| format!("{:.2}", cos[p][p - 1])).collect();
        println!(
            "learned table after {names_epochs} epochs (validation NLL {:.4}): {}\n  cosine of each position with the one before: {}",
            outcome.val_nll,
            png.display(),
            neighbours.join(" ")
        );
    }
    Ok(())
}
