//! The G2P learning test: a small Transformer trained for a few epochs on a subset of
//! CMUdict's training words must pronounce held-out words with a phoneme error rate far
//! below an untrained model's, and its saved checkpoint must load back with the same output.

use zoo_examples::g2p::{G2pSettings, data, predict, score, train, write_tsv};
use zoo_seq2seq::MarianMtModel;
use zoo_train::FitOptions;

/// Training words of the bounded run.
const WORDS: usize = 4000;
/// Its epochs.
const EPOCHS: usize = 6;
/// The phoneme error rate (%) it must stay below on 500 test words (measured: 30.2% on
/// flex in 40 s; untrained, above 90%).
const BOUND: f64 = 45.0;

#[test]
fn learning_g2p_reaches_the_bound_in_a_short_run() {
    let device = zoo_device::test_device();
    let dir = std::env::temp_dir().join(format!("zoo-learning-g2p-{}", std::process::id()));
    let mut s = G2pSettings::new(EPOCHS, &dir);
    s.device = zoo_device::test_backend().to_string();
    s.d_model = 64;
    s.layers = 2;
    s.d_ff = 256;
    s.batch = 64;
    s.lr = 3e-3;
    s.train_words = Some(WORDS);
    s.valid_words = 200;
    let d = data(s.seed).unwrap();
    let (vocab, test) = (&d.vocab, &d.test[..500]);
    let words: Vec<String> = test.iter().map(|e| e.word.clone()).collect();
    // Untrained, the model is far off: the bound below is a real improvement.
    let untrained = s.model_config(vocab).init(&device).unwrap();
    let (_, per_untrained) = score(test, &predict(&untrained, vocab, &words, 250).unwrap());
    let (model, epochs) = train(&s, &d, &device, FitOptions::default()).unwrap();
    let losses: Vec<f64> = epochs.iter().map(|e| e["valid_loss"]).collect();
    let predictions = predict(&model, vocab, &words, 250).unwrap();
    let (wer, per) = score(test, &predictions);
    eprintln!(
        "g2p: validation loss per epoch {losses:?}; test WER {wer:.1}%, PER {per:.2}% \
         (untrained PER {per_untrained:.1}%)"
    );
    assert!(losses[EPOCHS - 1] < losses[0], "{losses:?}");
    assert!(
        per < BOUND,
        "PER {per}% after {EPOCHS} epochs on {WORDS} words"
    );
    assert!(per_untrained > 90.0, "untrained PER {per_untrained}%");
    model.save_pretrained(dir.join("model")).unwrap();
    let back = MarianMtModel::from_pretrained(dir.join("model"), &device).unwrap();
    assert_eq!(predict(&back, vocab, &words, 250).unwrap(), predictions);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--write-tsv`: the split as TSV rows (letters and phonemes, space-separated) and a
/// starting folder whose tokenizer gives the example's own ids, with `</s>` after a
/// source and none after a target, and whose config builds the model at the example's
/// sizes with room for `<unk>`.
#[test]
fn the_tsv_split_and_its_folder_match_the_example_s_ids() {
    let device = zoo_device::test_device();
    let dir = std::env::temp_dir().join(format!("zoo-g2p-tsv-{}", std::process::id()));
    let s = G2pSettings::new(1, &dir);
    let d = data(s.seed).unwrap();
    let written = write_tsv(&d, &s, &dir).unwrap();
    assert_eq!(written.len(), 5);
    let train_tsv = std::fs::read_to_string(dir.join("train.tsv")).unwrap();
    let mut lines = train_tsv.lines();
    assert_eq!(lines.next(), Some("source\ttarget"));
    let first = &d.train[0];
    let letters: Vec<String> = first.word.chars().map(String::from).collect();
    let row = format!(
        "{}\t{}",
        letters.join(" "),
        first.pronunciations[0].join(" ")
    );
    assert_eq!(lines.next(), Some(row.as_str()));
    let rows: usize = d.train.iter().map(|e| e.pronunciations.len()).sum();
    assert_eq!(train_tsv.lines().count(), rows + 1);

    let tok = zoo_data::LmTokenizer::from_pretrained(dir.join("model")).unwrap();
    let want: Vec<usize> = d.vocab.letters("hello").unwrap();
    assert_eq!(want, [10, 7, 14, 14, 17]);
    let mut with_end = want.clone();
    with_end.push(zoo_examples::g2p::EOS);
    assert_eq!(tok.encode("h e l l o").unwrap(), with_end);
    let phones = first.pronunciations[0].clone();
    assert_eq!(
        tok.encode_plain(&phones.join(" ")).unwrap(),
        d.vocab.phone_ids(&phones)
    );
    // A symbol of neither kind is <unk>, the id after the vocabulary's.
    assert_eq!(tok.encode_plain("%").unwrap(), [d.vocab.size()]);

    let model = zoo_seq2seq::MarianMtModel::from_config(dir.join("model"), &device).unwrap();
    let cfg = model.config();
    assert_eq!(cfg.vocab_size, d.vocab.size() + 1);
    assert_eq!(cfg.d_model, s.d_model);
    assert_eq!(cfg.decoder_start_token_id, Some(zoo_examples::g2p::BOS));
    std::fs::remove_dir_all(&dir).unwrap();
}
