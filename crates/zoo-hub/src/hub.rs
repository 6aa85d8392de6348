//! Checkpoints by hub id: `org/name` becomes a folder of the HF cache.
//!
//! [`locate`] turns what a user typed after `--model` into a checkpoint folder. A folder
//! that exists is used as it is. Otherwise a hub id (`gpt2`, `meta-llama/Llama-3.2-1B`)
//! is looked up in the HF cache, in the layout that Python's `huggingface_hub` writes
//! (`$HF_HOME/hub/models--org--name/refs/REV` naming `snapshots/COMMIT/`), so a cache
//! that Python filled is reused; and what the cache lacks is downloaded into it through
//! the `hf-hub` crate.
//!
//! What is fetched: `config.json`; the weights (`model.safetensors`, or the index of a
//! sharded checkpoint and every shard it names, or `pytorch_model.bin`); and, where the
//! repository has them, the tokenizer's files, `generation_config.json`, the image
//! processor's config and a sentence-transformers model's modules. A download goes to a
//! `.part` file, which becomes the cached blob only when every byte has come; a
//! download cut short leaves nothing that a later run takes for complete, and the next
//! run resumes it.
//!
//! [`HubOptions::from_env`] reads the variables `huggingface_hub` reads: `HF_ENDPOINT`,
//! `HF_TOKEN` (else the token file in `HF_HOME`), `HF_HUB_OFFLINE`, `HF_HUB_CACHE` and
//! `HF_HOME`.
//!
//! Nothing here writes outside the cache: a repository id, revision, commit or file name
//! that would climb out of it (`..`, an absolute path) is refused before it is used.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use hf_hub::api::sync::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};
use serde_json::Value;

use crate::{HubError, Result};

/// The hub that `HF_ENDPOINT` replaces.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Where and how checkpoints are fetched.
#[derive(Clone, PartialEq, Eq)]
pub struct HubOptions {
    /// The hub's address, without a trailing slash.
    pub endpoint: String,
    /// The cache folder that holds `models--org--name` folders (`$HF_HOME/hub`).
    pub cache_dir: PathBuf,
    /// The access token sent to the hub, for gated and private repositories.
    pub token: Option<String>,
    /// Only the cache is read; nothing is downloaded.
    pub offline: bool,
    /// The branch, tag or commit to fetch.
    pub revision: String,
    /// Draw a progress bar on stderr for each file downloaded (hidden when stderr is
    /// not a terminal).
    pub progress: bool,
}

impl std::fmt::Debug for HubOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubOptions")
            .field("endpoint", &self.endpoint)
            .field("cache_dir", &self.cache_dir)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("offline", &self.offline)
            .field("revision", &self.revision)
            .field("progress", &self.progress)
            .finish()
    }
}

impl HubOptions {
    /// The settings of this process's environment, as `huggingface_hub` reads them:
    /// `HF_ENDPOINT` (default [`DEFAULT_ENDPOINT`]), `HF_TOKEN` (else `$HF_HOME/token`),
    /// `HF_HUB_OFFLINE` (`1`, `ON`, `YES` or `TRUE`), `HF_HUB_CACHE` (default
    /// `$HF_HOME/hub`, with `HF_HOME` defaulting to `$XDG_CACHE_HOME/huggingface` or
    /// `~/.cache/huggingface`). Revision `main`, no progress bars.
    pub fn from_env() -> Self {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// [`Self::from_env`] over any source of variables.
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Self {
        let set = |key: &str| var(key).filter(|v| !v.is_empty());
        let hf_home = set("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let cache = set("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
                set("HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("."))
                    .join(".cache")
            });
            cache.join("huggingface")
        });
        let cache_dir = set("HF_HUB_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token = set("HF_TOKEN").or_else(|| {
            std::fs::read_to_string(hf_home.join("token"))
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
        });
        let offline = set("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(
                v.trim().to_ascii_uppercase().as_str(),
                "1" | "ON" | "YES" | "TRUE"
            )
        });
        Self {
            endpoint: set("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
                .trim_end_matches('/')
                .to_string(),
            cache_dir,
            token,
            offline,
            revision: "main".to_string(),
            progress: false,
        }
    }

    /// The same options with progress bars on or off.
    pub fn with_progress(mut self, progress: bool) -> Self {
        self.progress = progress;
        self
    }

    /// The same options at another branch, tag or commit.
    pub fn with_revision(mut self, revision: impl Into<String>) -> Self {
        self.revision = revision.into();
        self
    }

    /// The cache folder of one repository: `cache_dir/models--org--name`.
    pub fn repo_dir(&self, repo_id: &str) -> PathBuf {
        self.cache_dir
            .join(format!("models--{}", repo_id.replace('/', "--")))
    }
}

/// Whether `s` is written as a hub repository id: `name` or `org/name`, of letters,
/// digits, `-`, `_` and `.`, at most 96 characters, with no `--` or `..`, and no part
/// that starts or ends with `-` or `.` (the rule `huggingface_hub` applies).
pub fn is_repo_id(s: &str) -> bool {
    let parts: Vec<&str> = s.split('/').collect();
    s.len() <= 96
        && (1..=2).contains(&parts.len())
        && !s.contains("--")
        && !s.contains("..")
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                && !p.starts_with(['-', '.'])
                && !p.ends_with(['-', '.'])
        })
}

/// The checkpoint folder that `model` names: the folder itself when it exists, else the
/// snapshot of the hub repository of that id (see [`snapshot`]).
///
/// # Errors
/// [`HubError::NoFolder`] when `model` is neither a folder nor written as a hub id, and
/// what [`snapshot`] reports otherwise, with the name as typed.
pub fn locate(model: impl AsRef<Path>, options: &HubOptions) -> Result<PathBuf> {
    let path = model.as_ref();
    if path.is_dir() {
        return Ok(path.to_path_buf());
    }
    match path.to_str() {
        Some(id) if is_repo_id(id) && !path.exists() => snapshot(id, options),
        _ => Err(HubError::NoFolder {
            path: path.to_path_buf(),
        }),
    }
}

/// The files of a checkpoint folder that are read when present, besides `config.json`
/// and the weights.
const EXTRA_FILES: [&str; 17] = [
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "source.spm",
    "target.spm",
    "sentencepiece.bpe.model",
    "preprocessor_config.json",
    "modules.json",
    "sentence_bert_config.json",
];

/// The weights files a checkpoint folder is read from, in the order they are tried.
const SAFETENSORS: &str = "model.safetensors";
const INDEX: &str = "model.safetensors.index.json";
const PICKLE: &str = "pytorch_model.bin";

/// The folder of `repo_id` at `options.revision` in the HF cache, with every file the
/// zoo reads: taken from the cache when the snapshot there is complete (nothing goes
/// over the network then), and downloaded into it otherwise.
///
/// # Errors
/// A malformed id, revision or file name; with `offline`, a repository missing from the
/// cache; a repository, revision or required file the hub does not have; a gated
/// repository without a token; a network failure or a download cut short. Each names
/// the repository and, where one is at fault, the file.
pub fn snapshot(repo_id: &str, options: &HubOptions) -> Result<PathBuf> {
    let hub_error = |message: String| HubError::Hub {
        repo: repo_id.to_string(),
        message,
    };
    if !is_repo_id(repo_id) {
        return Err(hub_error(
            "not a hub id: it is `name` or `org/name`, of letters, digits, `-`, `_` and `.`"
                .to_string(),
        ));
    }
    check_relative("revision", &options.revision).map_err(&hub_error)?;
    let repo_dir = options.repo_dir(repo_id);
    if let Some(dir) = cached_snapshot(&repo_dir, &options.revision).map_err(&hub_error)?
        && missing_weights(&dir).map_err(&hub_error)?.is_empty()
    {
        return Ok(dir);
    }
    if options.offline {
        return Err(hub_error(format!(
            "not complete in the cache {} and HF_HUB_OFFLINE is set, so nothing is downloaded",
            repo_dir.display()
        )));
    }
    download(repo_id, options, &repo_dir).map_err(hub_error)
}

/// The snapshot folder that `refs/REVISION` names (or `snapshots/REVISION` for a
/// commit), when it exists.
fn cached_snapshot(repo_dir: &Path, revision: &str) -> Result<Option<PathBuf>, String> {
    let commit = match std::fs::read_to_string(repo_dir.join("refs").join(revision)) {
        Ok(c) => c.trim().to_string(),
        Err(_) => revision.to_string(),
    };
    check_commit(&commit).map_err(|e| format!("the cache's refs/{revision}: {e}"))?;
    let dir = repo_dir.join("snapshots").join(&commit);
    Ok(dir.join("config.json").is_file().then_some(dir))
}

/// A commit as the cache names its snapshot folders: letters and digits only.
fn check_commit(commit: &str) -> Result<(), String> {
    if commit.is_empty() || !commit.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!("{commit:?} is not a commit id"));
    }
    Ok(())
}

/// Refuses a name that is empty, absolute, or has a `..` (or any other component than a
/// plain name) in it.
fn check_relative(what: &str, name: &str) -> Result<(), String> {
    let path = Path::new(name);
    let plain = !name.is_empty()
        && !name.contains('\\')
        && path.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(format!(
            "{what} {name:?} would be a path outside the repository's folder; refused"
        ));
    }
    Ok(())
}

/// The weights files `dir` lacks: empty when it has `model.safetensors`, an index with
/// every shard, or `pytorch_model.bin`.
fn missing_weights(dir: &Path) -> Result<Vec<String>, String> {
    if dir.join(SAFETENSORS).is_file() || dir.join(PICKLE).is_file() {
        return Ok(Vec::new());
    }
    if dir.join(INDEX).is_file() {
        let shards = index_shards(&dir.join(INDEX))?;
        return Ok(shards
            .into_iter()
            .filter(|s| !dir.join(s).is_file())
            .collect());
    }
    Ok(vec![SAFETENSORS.to_string()])
}

/// The shard files an index's `weight_map` names, each checked to stay in the folder.
fn index_shards(index: &Path) -> Result<BTreeSet<String>, String> {
    let text = std::fs::read_to_string(index).map_err(|e| format!("{INDEX}: {e}"))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| format!("{INDEX}: {e}"))?;
    let map = json
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{INDEX} has no weight_map object"))?;
    let mut shards = BTreeSet::new();
    for (tensor, shard) in map {
        let shard = shard
            .as_str()
            .ok_or_else(|| format!("{INDEX}: the shard of {tensor} is not a string"))?;
        check_relative("shard", shard).map_err(|e| format!("{INDEX}: {e}"))?;
        shards.insert(shard.to_string());
    }
    Ok(shards)
}

/// The module folders a sentence-transformers `modules.json` lists.
fn module_configs(modules: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(modules).map_err(|e| format!("modules.json: {e}"))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| format!("modules.json: {e}"))?;
    let mut out = Vec::new();
    for module in json.as_array().map(Vec::as_slice).unwrap_or_default() {
        if let Some(path) = module.get("path").and_then(Value::as_str)
            && !path.is_empty()
        {
            let file = format!("{path}/config.json");
            check_relative("module", &file).map_err(|e| format!("modules.json: {e}"))?;
            out.push(file);
        }
    }
    Ok(out)
}

/// Fetches what the zoo reads of `repo_id` into the cache and returns the snapshot.
fn download(repo_id: &str, options: &HubOptions, repo_dir: &Path) -> Result<PathBuf, String> {
    let api = ApiBuilder::from_cache(Cache::new(options.cache_dir.clone()))
        .with_endpoint(options.endpoint.clone())
        .with_token(options.token.clone())
        .with_progress(options.progress)
        .build()
        .map_err(|e| format!("cannot start a client for {}: {e}", options.endpoint))?;
    let repo = api.repo(Repo::with_revision(
        repo_id.to_string(),
        RepoType::Model,
        options.revision.clone(),
    ));
    let info = repo
        .info()
        .map_err(|e| explain(e, options, REPOSITORY, &options.revision))?;
    check_commit(&info.sha).map_err(|e| format!("the hub's answer: {e}"))?;
    let listed: BTreeSet<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
    let snapshot = repo_dir.join("snapshots").join(&info.sha);
    let fetch = |file: &str| -> Result<PathBuf, String> {
        check_relative("file", file)?;
        let cached = snapshot.join(file);
        if cached.is_file() {
            return Ok(cached);
        }
        let path = repo
            .download(file)
            .map_err(|e| explain(e, options, file, &options.revision))?;
        // Where hf-hub put it must be the snapshot that the listing named.
        if path != cached {
            return Err(format!(
                "{file} came from another commit than {} (the repository changed during the \
                 download); run again",
                info.sha
            ));
        }
        Ok(path)
    };
    if !listed.contains("config.json") {
        return Err(format!(
            "the repository has no config.json at revision {}, so it is not a checkpoint \
             the zoo loads",
            options.revision
        ));
    }
    fetch("config.json")?;
    let mut files: Vec<String> = Vec::new();
    if listed.contains(SAFETENSORS) {
        files.push(SAFETENSORS.to_string());
    } else if listed.contains(INDEX) {
        let index = fetch(INDEX)?;
        files.extend(index_shards(&index)?);
    } else if listed.contains(PICKLE) {
        files.push(PICKLE.to_string());
    } else {
        return Err(format!(
            "the repository has no {SAFETENSORS}, {INDEX} or {PICKLE} at revision {}",
            options.revision
        ));
    }
    files.extend(
        EXTRA_FILES
            .iter()
            .filter(|f| listed.contains(**f))
            .map(ToString::to_string),
    );
    for file in &files {
        fetch(file)?;
    }
    if listed.contains("modules.json") {
        for file in module_configs(&snapshot.join("modules.json"))? {
            if listed.contains(&file) {
                fetch(&file)?;
            }
        }
    }
    Ok(snapshot)
}

/// What [`explain`] calls the repository as a whole.
const REPOSITORY: &str = "the repository";

/// An hf-hub error as a sentence that says what to do.
fn explain(e: ApiError, options: &HubOptions, what: &str, revision: &str) -> String {
    if let ApiError::RequestError(request) = &e {
        match request.as_ref() {
            ureq::Error::Status(404, _) if what == REPOSITORY => {
                return format!(
                    "no such model folder, nor a repository on {} at revision {revision}",
                    options.endpoint
                );
            }
            ureq::Error::Status(404, _) => {
                return format!(
                    "{what} was not found on {} at revision {revision}",
                    options.endpoint
                );
            }
            ureq::Error::Status(code @ (401 | 403), _) => {
                let hint = if options.token.is_some() {
                    "the token in HF_TOKEN is not allowed to read it"
                } else {
                    "it is gated or private: set HF_TOKEN to a token that may read it"
                };
                return format!("{what}: {} answered {code}; {hint}", options.endpoint);
            }
            ureq::Error::Status(code, _) => {
                return format!("{what}: {} answered {code}", options.endpoint);
            }
            ureq::Error::Transport(t) => {
                return format!(
                    "{what}: cannot reach {} ({t}); with HF_HUB_OFFLINE=1 only the cache \
                     is read",
                    options.endpoint
                );
            }
        }
    }
    format!(
        "{what}: the download failed ({e}); nothing partial is kept as complete, and a \
         new run resumes it"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_told_from_paths() {
        for id in [
            "gpt2",
            "meta-llama/Llama-3.2-1B",
            "Qwen/Qwen3-0.6B",
            "org/name_v1.5",
        ] {
            assert!(is_repo_id(id), "{id}");
        }
        for not in [
            "",
            "a/b/c",
            "../x",
            "org/..",
            "/abs",
            "org/-x",
            "org/x.",
            "a--b/c",
            "a b",
            "org/",
            &"x".repeat(97),
        ] {
            assert!(!is_repo_id(not), "{not}");
        }
    }

    #[test]
    fn names_that_climb_out_are_refused() {
        for bad in ["../x", "a/../../b", "/etc/passwd", "", "a\\..\\b", "./a"] {
            let e = check_relative("file", bad).unwrap_err();
            assert!(e.contains("outside the repository's folder"), "{e}");
        }
        for good in ["model.safetensors", "1_Pooling/config.json", "refs/pr/1"] {
            check_relative("file", good).unwrap();
        }
        assert!(check_commit("0123abc").is_ok());
        assert!(check_commit("../../x").is_err());
        assert!(check_commit("").is_err());
    }

    #[test]
    fn options_are_read_as_huggingface_hub_reads_them() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let o = HubOptions::from_lookup(env(&[("HOME", "/home/u")]));
        assert_eq!(o.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(o.cache_dir, Path::new("/home/u/.cache/huggingface/hub"));
        assert!(!o.offline && o.token.is_none() && !o.progress);
        assert_eq!(o.revision, "main");
        assert_eq!(
            o.repo_dir("meta-llama/Llama-3.2-1B"),
            Path::new("/home/u/.cache/huggingface/hub/models--meta-llama--Llama-3.2-1B")
        );

        let o = HubOptions::from_lookup(env(&[
            ("HOME", "/home/u"),
            ("XDG_CACHE_HOME", "/xdg"),
            ("HF_ENDPOINT", "http://127.0.0.1:8080/"),
            ("HF_TOKEN", "hf_abc"),
            ("HF_HUB_OFFLINE", "yes"),
        ]));
        assert_eq!(o.endpoint, "http://127.0.0.1:8080");
        assert_eq!(o.cache_dir, Path::new("/xdg/huggingface/hub"));
        assert_eq!(o.token.as_deref(), Some("hf_abc"));
        assert!(o.offline);
        assert!(
            !format!("{o:?}").contains("hf_abc"),
            "the token is not printed"
        );

        let o = HubOptions::from_lookup(env(&[("HF_HOME", "/hf"), ("HF_HUB_OFFLINE", "0")]));
        assert_eq!(o.cache_dir, Path::new("/hf/hub"));
        assert!(!o.offline);
        let o = HubOptions::from_lookup(env(&[("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/c")]));
        assert_eq!(o.cache_dir, Path::new("/c"));
    }

    #[test]
    fn a_missing_folder_that_is_no_hub_id_is_no_such_folder() {
        let options = HubOptions::from_lookup(|_| None);
        for path in ["/no/such/folder", "a/b/c", "./x"] {
            let e = locate(path, &options).unwrap_err();
            assert_eq!(e.to_string(), format!("{path}: no such model folder"));
        }
    }

    #[test]
    fn offline_with_nothing_cached_is_a_named_error() {
        let cache = std::env::temp_dir().join(format!("zoo-hub-offline-{}", std::process::id()));
        let options = HubOptions {
            offline: true,
            cache_dir: cache.clone(),
            ..HubOptions::from_lookup(|_| None)
        };
        let e = locate("org/absent", &options).unwrap_err().to_string();
        assert!(
            e.starts_with("org/absent: not complete in the cache")
                && e.contains("models--org--absent")
                && e.contains("HF_HUB_OFFLINE"),
            "{e}"
        );
        // A ref that climbs out of the cache is refused, not followed.
        let refs = options.repo_dir("org/evil").join("refs");
        std::fs::create_dir_all(&refs).unwrap();
        std::fs::write(refs.join("main"), "../../../../etc").unwrap();
        let e = locate("org/evil", &options).unwrap_err().to_string();
        assert!(e.contains("is not a commit id"), "{e}");
        std::fs::remove_dir_all(cache).unwrap();
    }
}
