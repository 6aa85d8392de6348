//! The training data of a whole run, cut into rounds.
//!
//! burn-train iterates its training loader once per epoch. [`RoundLoader`] shows it a
//! different window of one long, seeded stream of examples ([`PassesDataset`]) on each of
//! those iterations: pass after pass over the training set, each pass in its own order.
//! An epoch is then one pass, and a round of `eval_every` steps is a window that may cross
//! passes. Because the order depends only on the seed and the position in the stream, a
//! run resumed from round `k` sees exactly the batches an uninterrupted run would have
//! seen. One loader (and one pool of worker threads) serves every round.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use burn::data::dataloader::{DataLoader, DataLoaderIterator};
use burn::data::dataset::{Dataset, DatasetError};
use burn::tensor::Device;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// Passes over a dataset `items`, one after another, each in the order of a permutation
/// drawn from `seed` and the pass number. Index `j` is item `perm(j / n)[j % n]`.
pub struct PassesDataset<D> {
    items: D,
    seed: u64,
    len: usize,
    /// The permutations read last, most recent last.
    cache: Mutex<Vec<(usize, Arc<Vec<usize>>)>>,
    cache_passes: usize,
}

impl<D> PassesDataset<D> {
    /// `len` examples drawn pass after pass from `items` (which must not be empty),
    /// keeping the permutations of the last `cache_passes` passes read (at least 2: a
    /// round, and each worker's share of it, may straddle passes).
    pub fn new<I>(items: D, seed: u64, len: usize, cache_passes: usize) -> Self
    where
        D: Dataset<I>,
    {
        assert!(!items.is_empty(), "PassesDataset over an empty set");
        Self {
            items,
            seed,
            len,
            cache: Mutex::new(Vec::new()),
            cache_passes: cache_passes.max(2),
        }
    }

    /// The order of pass `pass`: a permutation of `0..n`.
    pub fn permutation<I>(&self, pass: usize) -> Arc<Vec<usize>>
    where
        D: Dataset<I>,
    {
        let mut cache = self.cache.lock().expect("permutation cache");
        if let Some(i) = cache.iter().position(|(k, _)| *k == pass) {
            let hit = cache.remove(i);
            cache.push(hit.clone());
            return hit.1;
        }
        let mut perm: Vec<usize> = (0..self.items.len()).collect();
        let mut rng = StdRng::seed_from_u64(
            self.seed ^ (pass as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        perm.shuffle(&mut rng);
        let perm = Arc::new(perm);
        if cache.len() >= self.cache_passes {
            cache.remove(0); // the least recently used
        }
        cache.push((pass, perm.clone()));
        perm
    }
}

impl<I, D: Dataset<I>> Dataset<I> for PassesDataset<D> {
    /// # Panics
    /// When `index >= len()`, as the `Dataset` contract states.
    fn get(&self, index: usize) -> Result<I, DatasetError> {
        assert!(
            index < self.len,
            "index {index} out of range for a stream of {} examples",
            self.len
        );
        let n = self.items.len();
        let perm = self.permutation(index / n);
        self.items.get(perm[index % n])
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// One round's window on a longer dataset: index `i` is `inner[start + i]`, where the
/// start moves when the next round begins. Loaders over it keep their worker threads
/// from round to round.
pub struct RoundWindow<D> {
    inner: D,
    len: usize,
    start: Arc<AtomicUsize>,
}

impl<D> RoundWindow<D> {
    /// A window of `len` examples on `inner`, starting at 0, and the handle that moves it.
    pub fn new(inner: D, len: usize) -> (Self, Arc<AtomicUsize>) {
        let start = Arc::new(AtomicUsize::new(0));
        let window = Self {
            inner,
            len,
            start: start.clone(),
        };
        (window, start)
    }
}

impl<I, D: Dataset<I>> Dataset<I> for RoundWindow<D> {
    fn get(&self, index: usize) -> Result<I, DatasetError> {
        assert!(
            index < self.len,
            "index {index} out of a round of {}",
            self.len
        );
        self.inner.get(self.start.load(Ordering::SeqCst) + index)
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// A loader over a [`RoundWindow`] that moves the window to round `r` when it is
/// iterated for the `r`-th time (counting from the round it was told to start at), so
/// that burn-train's epochs walk through a run's rounds.
pub struct RoundLoader<O> {
    inner: Arc<dyn DataLoader<O>>,
    window_start: Arc<AtomicUsize>,
    items_per_round: usize,
    rounds: usize,
    next: AtomicUsize,
}

impl<O> RoundLoader<O> {
    /// `inner` loads a [`RoundWindow`] of `items_per_round` examples whose start is
    /// `window_start`, over a stream of `rounds` rounds; iteration begins at round
    /// `start` (the rounds already trained when resuming).
    pub fn new(
        inner: Arc<dyn DataLoader<O>>,
        window_start: Arc<AtomicUsize>,
        items_per_round: usize,
        rounds: usize,
        start: usize,
    ) -> Self {
        Self {
            inner,
            window_start,
            items_per_round,
            rounds: rounds.max(1),
            next: AtomicUsize::new(start),
        }
    }

    fn derive(&self, inner: Arc<dyn DataLoader<O>>) -> Self {
        Self {
            inner,
            window_start: self.window_start.clone(),
            items_per_round: self.items_per_round,
            rounds: self.rounds,
            next: AtomicUsize::new(self.next.load(Ordering::SeqCst)),
        }
    }
}

impl<O: 'static> DataLoader<O> for RoundLoader<O> {
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<O> + 'a> {
        let r = self.next.fetch_add(1, Ordering::SeqCst);
        // burn-train never iterates past its last epoch; stay on the last round if it did.
        let r = r.min(self.rounds - 1);
        // Every device's share of a round is started before any of them is read, and all
        // set the same start, so the shared window is consistent.
        self.window_start
            .store(r * self.items_per_round, Ordering::SeqCst);
        self.inner.iter()
    }

    fn num_items(&self) -> usize {
        self.inner.num_items()
    }

    fn to_device(&self, device: &Device) -> Arc<dyn DataLoader<O>> {
        Arc::new(self.derive(self.inner.to_device(device)))
    }

    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<O>> {
        Arc::new(self.derive(self.inner.slice(start, end)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::data::dataloader::DataLoaderBuilder;
    use burn::data::dataloader::batcher::Batcher;
    use burn::data::dataset::InMemDataset;

    #[derive(Clone)]
    struct Ids;
    impl Batcher<usize, Vec<usize>> for Ids {
        fn batch(&self, items: Vec<usize>, _device: &Device) -> Vec<usize> {
            items
        }
    }

    fn drain(loader: &dyn DataLoader<Vec<usize>>) -> Vec<Vec<usize>> {
        loader.iter().map(|b| b.unwrap()).collect()
    }

    #[test]
    fn passes_are_permutations_in_a_seeded_order() {
        let items = Arc::new(InMemDataset::new((0..10).collect::<Vec<usize>>()));
        let ds = PassesDataset::new(items.clone(), 7, 25, 2);
        let all: Vec<usize> = (0..25).map(|i| ds.get(i).unwrap()).collect();
        assert_eq!(ds.len(), 25);
        for pass in all.chunks(10).take(2) {
            let mut sorted = pass.to_vec();
            sorted.sort();
            assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        }
        assert_ne!(all[..10], all[10..20], "two passes in the same order");
        // Reading in any order, with a small cache, gives the same stream.
        let again = PassesDataset::new(items.clone(), 7, 25, 2);
        let backwards: Vec<usize> = (0..25).rev().map(|i| again.get(i).unwrap()).collect();
        assert_eq!(all, backwards.into_iter().rev().collect::<Vec<_>>());
        let other = PassesDataset::new(items, 8, 25, 2);
        assert_ne!(
            all,
            (0..25).map(|i| other.get(i).unwrap()).collect::<Vec<_>>()
        );
    }

    /// A round loader over a 24-example stream of the items 0..10 (seed 3), rounds of 8,
    /// batches of 4, with `workers` loader threads.
    fn round_loader(start: usize, workers: usize) -> (RoundLoader<Vec<usize>>, Vec<usize>) {
        let items = Arc::new(InMemDataset::new((0..10).collect::<Vec<usize>>()));
        let stream = PassesDataset::new(items.clone(), 3, 24, 4);
        let expected = (0..24).map(|i| stream.get(i).unwrap()).collect();
        let (window, window_start) = RoundWindow::new(stream, 8);
        let inner = DataLoaderBuilder::new(Ids)
            .batch_size(4)
            .num_workers(workers)
            .build(window);
        (RoundLoader::new(inner, window_start, 8, 3, start), expected)
    }

    #[test]
    fn rounds_walk_the_stream_and_resume_where_they_stopped() {
        let (loader, stream) = round_loader(0, 0);
        assert_eq!(loader.num_items(), 8);
        let rounds: Vec<Vec<Vec<usize>>> = (0..3).map(|_| drain(&loader)).collect();
        for (r, batches) in rounds.iter().enumerate() {
            assert_eq!(batches.len(), 2, "round {r}: two batches of 4");
            assert_eq!(batches.concat(), stream[r * 8..(r + 1) * 8]);
        }
        // Past the last round it stays there.
        assert_eq!(drain(&loader), rounds[2]);
        // Resuming after round 1 gives rounds 2 and 3 exactly.
        let (resumed, _) = round_loader(1, 0);
        assert_eq!(drain(&resumed), rounds[1]);
        assert_eq!(drain(&resumed), rounds[2]);
        // Slices (one per device) split each round and keep the round counter.
        let (resumed, _) = round_loader(2, 0);
        let halves = [resumed.slice(0, 4), resumed.slice(4, 8)];
        let its: Vec<_> = halves.iter().map(|h| h.iter()).collect();
        let got: Vec<Vec<Vec<usize>>> = its
            .into_iter()
            .map(|it| it.map(|b| b.unwrap()).collect())
            .collect();
        assert_eq!(
            got,
            [vec![stream[16..20].to_vec()], vec![stream[20..24].to_vec()]]
        );
    }

    #[test]
    fn worker_threads_serve_every_round() {
        let (loader, stream) = round_loader(0, 2);
        for r in 0..3 {
            let mut got = drain(&loader).concat();
            got.sort();
            let mut want = stream[r * 8..(r + 1) * 8].to_vec();
            want.sort();
            assert_eq!(got, want, "round {r}");
        }
    }
}
