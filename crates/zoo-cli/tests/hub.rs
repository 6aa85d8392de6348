//! `--model org/name`: the real download code against a hub served on 127.0.0.1 from the
//! committed fixtures, with `HF_ENDPOINT`, `HF_HOME`, `HF_TOKEN` and `HF_HUB_OFFLINE` set
//! as a user sets them.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{Run, fixture, tempdir};
use zoo_device::test_backend;
use zoo_fixtures::hub_server::{Faults, HubRepo, HubServer, Served};

const TOKEN: &str = "hf_zoo_test_token";

/// Runs `zoo ARGS` with the hub variables of `env` (and nothing of the caller's).
fn zoo_env(args: &[&str], hf_home: &Path, env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zoo"));
    cmd.args(args)
        .args(["--device", test_backend().as_str()])
        .env("HF_HOME", hf_home);
    // A proxy from the environment would take the requests to 127.0.0.1 elsewhere.
    for key in [
        "HF_ENDPOINT",
        "HF_TOKEN",
        "HF_HUB_OFFLINE",
        "HF_HUB_CACHE",
        "ALL_PROXY",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "all_proxy",
        "https_proxy",
        "http_proxy",
    ] {
        cmd.env_remove(key);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run::of(cmd.output().expect("the zoo binary runs"))
}

fn llama() -> PathBuf {
    fixture("zoo-decoder", "llama-tiny")
}

fn generate_args(model: &str) -> Vec<String> {
    [
        "generate",
        "--model",
        model,
        "--prompt",
        "ROMEO: Wherefore art",
        "--max-new-tokens",
        "6",
    ]
    .map(String::from)
    .to_vec()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// What `zoo generate` prints for the committed folder itself.
fn local_text() -> String {
    let dir = llama();
    let run = support::ok(&strs(&generate_args(dir.to_str().unwrap())));
    assert!(run.stdout.len() > "ROMEO: Wherefore art".len());
    run.stdout
}

fn snapshot_of(hf_home: &Path, repo: &HubRepo) -> PathBuf {
    hf_home
        .join("hub")
        .join(format!("models--{}", repo.id.replace('/', "--")))
        .join("snapshots")
        .join(&repo.commit)
}

/// Download, the second run from the cache, and offline use, through `zoo generate`.
#[test]
fn a_hub_id_downloads_once_then_runs_from_the_cache_and_offline() {
    let expected = local_text();
    let repo = HubRepo::from_folder("zoo-test/llama-tiny", &llama());
    let hf_home = tempdir("hub-download");
    let server = HubServer::start(
        vec![repo.clone()],
        Faults {
            token: Some(TOKEN.into()),
            ..Faults::default()
        },
    );
    let endpoint = [("HF_ENDPOINT", server.endpoint())];
    let args = generate_args(&repo.id);

    // Without the token the gated repository is refused, with what to do.
    let run = zoo_env(&strs(&args), &hf_home, &endpoint);
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .starts_with("error: zoo-test/llama-tiny: the repository: ")
            && run.stderr.contains("answered 401")
            && run.stderr.contains("set HF_TOKEN"),
        "{}",
        run.stderr
    );
    server.take_requests();

    // A download: the text equals the local folder's, and the snapshot holds the files
    // the zoo reads, byte for byte, and nothing else.
    let with_token = [("HF_ENDPOINT", server.endpoint()), ("HF_TOKEN", TOKEN)];
    let run = zoo_env(&strs(&args), &hf_home, &with_token);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, expected);
    let requests = server.take_requests();
    assert!(
        requests
            .iter()
            .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {TOKEN}"))),
        "{requests:?}"
    );
    assert_eq!(
        requests[0].path,
        "/api/models/zoo-test/llama-tiny/revision/main"
    );
    let snapshot = snapshot_of(&hf_home, &repo);
    let mut fetched: Vec<String> = std::fs::read_dir(&snapshot)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    fetched.sort();
    assert_eq!(
        fetched,
        [
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "tokenizer.json"
        ]
    );
    for file in &fetched {
        assert_eq!(
            std::fs::read(snapshot.join(file)).unwrap(),
            repo.files[file],
            "{file}"
        );
    }
    let refs = hf_home.join("hub/models--zoo-test--llama-tiny/refs/main");
    assert_eq!(std::fs::read_to_string(refs).unwrap(), repo.commit);

    // A second run finds the cache: nothing goes over the network.
    let run = zoo_env(&strs(&args), &hf_home, &with_token);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, expected);
    assert_eq!(server.take_requests(), Vec::<Served>::new());

    // Offline, with the server gone: the cache serves, and `zoo info` names the
    // architecture of the cached folder.
    let dead_endpoint = server.endpoint().to_string();
    drop(server);
    let offline = [
        ("HF_ENDPOINT", dead_endpoint.as_str()),
        ("HF_HUB_OFFLINE", "1"),
    ];
    let run = zoo_env(&strs(&args), &hf_home, &offline);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, expected);
    let run = zoo_env(&["info", "--model", &repo.id], &hf_home, &offline);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("LlamaForCausalLM"), "{}", run.stdout);

    // Offline with an empty cache is an error that says why; online with no hub
    // reachable says that too.
    let empty = tempdir("hub-offline-empty");
    let run = zoo_env(&strs(&args), &empty, &offline);
    assert_eq!(run.status, Some(1));
    assert!(
        run.stderr.contains("not complete in the cache")
            && run.stderr.contains("HF_HUB_OFFLINE is set"),
        "{}",
        run.stderr
    );
    let run = zoo_env(&strs(&args), &empty, &[("HF_ENDPOINT", &dead_endpoint)]);
    assert_eq!(run.status, Some(1));
    assert!(run.stderr.contains("cannot reach"), "{}", run.stderr);
}

/// A repository or file that the hub does not have is a named error, and leaves nothing
/// in the snapshot.
#[test]
fn a_missing_repository_or_file_is_named() {
    let mut withheld = HubRepo::from_folder("zoo-test/withheld", &llama());
    withheld.withheld = vec!["model.safetensors".into()];
    let mut configless = HubRepo::from_folder("zoo-test/configless", &llama());
    configless.files.remove("config.json");
    let server = HubServer::start(
        vec![withheld.clone(), configless.clone()],
        Faults::default(),
    );
    let hf_home = tempdir("hub-missing");
    let env = [("HF_ENDPOINT", server.endpoint())];

    let run = zoo_env(&["info", "--model", "zoo-test/absent"], &hf_home, &env);
    assert_eq!(run.status, Some(1));
    assert_eq!(
        run.stderr,
        format!(
            "error: zoo-test/absent: no such model folder, nor a repository on {} at \
             revision main\n",
            server.endpoint()
        )
    );

    let run = zoo_env(&["info", "--model", &withheld.id], &hf_home, &env);
    assert_eq!(run.status, Some(1));
    assert_eq!(
        run.stderr,
        format!(
            "error: zoo-test/withheld: model.safetensors was not found on {} at revision \
             main\n",
            server.endpoint()
        )
    );
    assert!(
        !snapshot_of(&hf_home, &withheld)
            .join("model.safetensors")
            .exists()
    );

    let run = zoo_env(&["info", "--model", &configless.id], &hf_home, &env);
    assert_eq!(run.status, Some(1));
    assert!(
        run.stderr.contains("has no config.json at revision main"),
        "{}",
        run.stderr
    );

    // A name that is neither a folder nor a hub id never reaches the network.
    server.take_requests();
    let run = zoo_env(&["info", "--model", "no/such/model"], &hf_home, &env);
    assert_eq!(run.stderr, "error: no/such/model: no such model folder\n");
    assert!(server.take_requests().is_empty());
}

/// The server dies in the middle of the weights: the run fails, no file is left that
/// passes for complete, and the next run resumes the download and runs.
#[test]
fn a_download_cut_short_leaves_no_complete_looking_file_and_resumes() {
    let expected = local_text();
    let repo = HubRepo::from_folder("zoo-test/cut-short", &llama());
    let size = repo.files["model.safetensors"].len();
    let server = HubServer::start(
        vec![repo.clone()],
        Faults {
            die_in: Some(("model.safetensors".into(), size / 3)),
            ..Faults::default()
        },
    );
    let hf_home = tempdir("hub-cut-short");
    let args = generate_args(&repo.id);
    let run = zoo_env(
        &strs(&args),
        &hf_home,
        &[("HF_ENDPOINT", server.endpoint())],
    );
    assert_eq!(run.status, Some(1), "{}", run.stdout);
    assert!(
        run.stderr
            .starts_with("error: zoo-test/cut-short: model.safetensors: the download failed")
            && run.stderr.contains("a new run resumes it"),
        "{}",
        run.stderr
    );
    assert!(server.is_dead());
    let snapshot = snapshot_of(&hf_home, &repo);
    assert!(!snapshot.join("model.safetensors").exists());
    // Only a `.part` file holds the bytes that came, and it is shorter than the file.
    let blobs = hf_home.join("hub/models--zoo-test--cut-short/blobs");
    let partial: Vec<(String, u64)> = std::fs::read_dir(&blobs)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.metadata().unwrap().len() as usize >= size / 3)
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(partial.len(), 1, "{partial:?}");
    assert!(partial[0].0.ends_with(".part"), "{partial:?}");
    assert_eq!(partial[0].1 as usize, size / 3);
    // Offline, the cut-short snapshot is not taken for a checkpoint.
    let run = zoo_env(&strs(&args), &hf_home, &[("HF_HUB_OFFLINE", "1")]);
    assert_eq!(run.status, Some(1));
    assert!(
        run.stderr.contains("not complete in the cache"),
        "{}",
        run.stderr
    );

    // A healthy server: the download resumes where it stopped.
    let server = HubServer::start(vec![repo.clone()], Faults::default());
    let run = zoo_env(
        &strs(&args),
        &hf_home,
        &[("HF_ENDPOINT", server.endpoint())],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, expected);
    let resumed = server
        .take_requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/model.safetensors"))
        .filter_map(|r| r.range)
        .collect::<Vec<_>>();
    assert!(
        resumed.contains(&format!("bytes={}-", size / 3)),
        "{resumed:?}"
    );
    assert_eq!(
        std::fs::read(snapshot.join("model.safetensors")).unwrap(),
        repo.files["model.safetensors"]
    );
}

/// A sharded checkpoint brings its shards; an index whose shard climbs out of the cache
/// is refused before anything is written there.
#[test]
fn shards_are_fetched_and_a_shard_outside_the_cache_is_refused() {
    let sharded = HubRepo::from_folder(
        "zoo-test/sharded",
        &fixture("zoo-decoder", "llama-tiny-sharded"),
    );
    let mut evil = sharded.clone();
    evil.id = "zoo-test/evil".into();
    let index = serde_json::json!({ "weight_map": { "w": "../../../../escaped.safetensors" } });
    evil.files.insert(
        "model.safetensors.index.json".into(),
        index.to_string().into_bytes(),
    );
    let server = HubServer::start(vec![sharded.clone(), evil], Faults::default());
    let hf_home = tempdir("hub-sharded");
    let env = [("HF_ENDPOINT", server.endpoint())];

    let run = zoo_env(&["info", "--model", &sharded.id], &hf_home, &env);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let local = support::ok(&[
        "info",
        "--model",
        fixture("zoo-decoder", "llama-tiny-sharded")
            .to_str()
            .unwrap(),
    ]);
    // The same parameters and tensors as the local folder (the first line names the
    // folder).
    assert_eq!(
        run.stdout.lines().skip(1).collect::<Vec<_>>(),
        local.stdout.lines().skip(1).collect::<Vec<_>>()
    );

    let run = zoo_env(&["info", "--model", "zoo-test/evil"], &hf_home, &env);
    assert_eq!(run.status, Some(1));
    assert!(
        run.stderr
            .contains("shard \"../../../../escaped.safetensors\" would be a path outside")
            && run.stderr.contains("refused"),
        "{}",
        run.stderr
    );
    assert!(!hf_home.join("escaped.safetensors").exists());
    assert!(!hf_home.join("hub/escaped.safetensors").exists());
    let served: Vec<Served> = server.take_requests();
    assert!(
        served.iter().all(|r| !r.path.contains("escaped")),
        "{served:?}"
    );
}

/// A sentence-transformers repository brings the config of each module that
/// `modules.json` lists, and `zoo embed` gives the local folder's embeddings.
#[test]
fn a_sentence_transformers_repository_brings_its_modules() {
    let local = fixture("zoo-encoder", "roberta-tiny-st");
    let repo = HubRepo::from_folder("zoo-test/roberta-st", &local);
    let server = HubServer::start(vec![repo.clone()], Faults::default());
    let hf_home = tempdir("hub-sentence");
    let input = hf_home.join("sentences.json");
    std::fs::write(
        &input,
        r#"{"sentences": ["The zoo opens at nine.", "Feeding time", "A"]}"#,
    )
    .unwrap();
    let (from_hub, from_folder) = (hf_home.join("hub.json"), hf_home.join("local.json"));
    let embed = |model: &str, output: &Path| {
        let args = [
            "embed",
            "--model",
            model,
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ];
        let run = zoo_env(&args, &hf_home, &[("HF_ENDPOINT", server.endpoint())]);
        assert_eq!(run.status, Some(0), "{}", run.stderr);
    };
    embed(&repo.id, &from_hub);
    embed(local.to_str().unwrap(), &from_folder);
    let (hub, folder) = (
        support::read_json(&from_hub),
        support::read_json(&from_folder),
    );
    assert_eq!(hub, folder);
    assert_eq!(hub["embeddings"].as_array().unwrap().len(), 3);
    let snapshot = snapshot_of(&hf_home, &repo);
    for file in [
        "1_Pooling/config.json",
        "2_Normalize/config.json",
        "modules.json",
    ] {
        assert_eq!(
            std::fs::read(snapshot.join(file)).unwrap(),
            repo.files[file],
            "{file}"
        );
    }
    assert!(!snapshot.join("expected.json").exists());
}
