//! The training data of a whole run, cut into rounds.
//!
//! burn-train iterates its training loader once per epoch. [`RoundLoader`] hands out a
//! different slice of one long, seeded stream of examples on each of those iterations:
//! pass after pass over the training set, each pass in its own order. An epoch is then one
//! pass, and a round of `eval_every` steps is a window that may cross passes. Because the
//! order depends only on the seed and the round, a run resumed from round `k` sees exactly
//! the batches an uninterrupted run would have seen.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use burn::data::dataloader::{DataLoader, DataLoaderIterator};
use burn::data::dataset::{Dataset, DatasetError};
use burn::tensor::Device;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// Passes over `items`, one after another, each in the order of a permutation drawn from
/// `seed` and the pass number. Index `j` is item `perm(j / n)[j % n]`.
pub struct PassesDataset<I> {
    items: Arc<Vec<I>>,
    seed: u64,
    len: usize,
    /// The permutations of the passes read last (at most two: a batch may straddle).
    cache: Mutex<Vec<(usize, Arc<Vec<usize>>)>>,
}

impl<I> PassesDataset<I> {
    /// `len` examples drawn pass after pass from `items` (which must not be empty).
    pub fn new(items: Arc<Vec<I>>, seed: u64, len: usize) -> Self {
        assert!(!items.is_empty(), "PassesDataset over an empty set");
        Self {
            items,
            seed,
            len,
            cache: Mutex::new(Vec::new()),
        }
    }

    /// The order of pass `pass`: a permutation of `0..n`.
    pub fn permutation(&self, pass: usize) -> Arc<Vec<usize>> {
        let mut cache = self.cache.lock().expect("permutation cache");
        if let Some((_, p)) = cache.iter().find(|(k, _)| *k == pass) {
            return p.clone();
        }
        let mut perm: Vec<usize> = (0..self.items.len()).collect();
        let mut rng = StdRng::seed_from_u64(
            self.seed ^ (pass as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        perm.shuffle(&mut rng);
        let perm = Arc::new(perm);
        if cache.len() == 2 {
            cache.remove(0);
        }
        cache.push((pass, perm.clone()));
        perm
    }
}

impl<I: Clone + Send + Sync> Dataset<I> for PassesDataset<I> {
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
        Ok(self.items[perm[index % n]].clone())
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// A loader that yields round `r` on its `r`-th iteration (counting from the round it
/// was told to start at), so that burn-train's epochs walk through a run's rounds.
pub struct RoundLoader<O> {
    rounds: Vec<Arc<dyn DataLoader<O>>>,
    next: AtomicUsize,
}

impl<O> RoundLoader<O> {
    /// Cuts `whole` (the run's loader, unshuffled) into rounds of `items_per_round`,
    /// starting at round `start` (the rounds already trained when resuming).
    pub fn new(whole: &Arc<dyn DataLoader<O>>, items_per_round: usize, start: usize) -> Self {
        let total = whole.num_items();
        let rounds = (0..total.div_ceil(items_per_round.max(1)))
            .map(|r| {
                let a = r * items_per_round;
                whole.slice(a, (a + items_per_round).min(total))
            })
            .collect();
        Self {
            rounds,
            next: AtomicUsize::new(start),
        }
    }

    fn derive(&self, f: impl Fn(&Arc<dyn DataLoader<O>>) -> Arc<dyn DataLoader<O>>) -> Self {
        Self {
            rounds: self.rounds.iter().map(f).collect(),
            next: AtomicUsize::new(self.next.load(Ordering::SeqCst)),
        }
    }
}

impl<O: 'static> DataLoader<O> for RoundLoader<O> {
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<O> + 'a> {
        let r = self.next.fetch_add(1, Ordering::SeqCst);
        // burn-train never iterates past its last epoch; stay on the last round if it did.
        self.rounds[r.min(self.rounds.len() - 1)].iter()
    }

    fn num_items(&self) -> usize {
        self.rounds.first().map_or(0, |r| r.num_items())
    }

    fn to_device(&self, device: &Device) -> Arc<dyn DataLoader<O>> {
        Arc::new(self.derive(|r| r.to_device(device)))
    }

    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<O>> {
        Arc::new(self.derive(|r| r.slice(start, end.min(r.num_items()))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::data::dataloader::DataLoaderBuilder;
    use burn::data::dataloader::batcher::Batcher;

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
        let items: Arc<Vec<usize>> = Arc::new((0..10).collect());
        let ds = PassesDataset::new(items.clone(), 7, 25);
        let all: Vec<usize> = (0..25).map(|i| ds.get(i).unwrap()).collect();
        assert_eq!(ds.len(), 25);
        for pass in all.chunks(10).take(2) {
            let mut sorted = pass.to_vec();
            sorted.sort();
            assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        }
        assert_ne!(all[..10], all[10..20], "two passes in the same order");
        let again = PassesDataset::new(items.clone(), 7, 25);
        assert_eq!(
            all,
            (0..25).map(|i| again.get(i).unwrap()).collect::<Vec<_>>()
        );
        let other = PassesDataset::new(items, 8, 25);
        assert_ne!(
            all,
            (0..25).map(|i| other.get(i).unwrap()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn rounds_walk_the_stream_and_resume_where_they_stopped() {
        let items: Arc<Vec<usize>> = Arc::new((0..10).collect());
        let whole = || -> Arc<dyn DataLoader<Vec<usize>>> {
            DataLoaderBuilder::new(Ids)
                .batch_size(4)
                .build(PassesDataset::new(items.clone(), 3, 24))
        };
        let stream: Vec<usize> = {
            let ds = PassesDataset::new(items.clone(), 3, 24);
            (0..24).map(|i| ds.get(i).unwrap()).collect()
        };
        let loader = RoundLoader::new(&whole(), 8, 0);
        assert_eq!(loader.num_items(), 8);
        let rounds: Vec<Vec<Vec<usize>>> = (0..3).map(|_| drain(&loader)).collect();
        for (r, batches) in rounds.iter().enumerate() {
            assert_eq!(batches.len(), 2, "round {r}: two batches of 4");
            assert_eq!(batches.concat(), stream[r * 8..(r + 1) * 8]);
        }
        // Resuming after round 1 gives rounds 2 and 3 exactly.
        let resumed = RoundLoader::new(&whole(), 8, 1);
        assert_eq!(drain(&resumed), rounds[1]);
        assert_eq!(drain(&resumed), rounds[2]);
        // Slices (one per device) split each round and keep the round counter.
        let halves = [loader.slice(0, 4), loader.slice(4, 8)];
        let resumed = RoundLoader::new(&whole(), 8, 2);
        let halves_resumed = [resumed.slice(0, 4), resumed.slice(4, 8)];
        assert_eq!(drain(&*halves_resumed[0]), vec![stream[16..20].to_vec()]);
        assert_eq!(drain(&*halves_resumed[1]), vec![stream[20..24].to_vec()]);
        // The loader above was iterated 3 times, so its slices start after the end and
        // stay on the last round.
        assert_eq!(drain(&*halves[0]), vec![stream[16..20].to_vec()]);
    }
}
