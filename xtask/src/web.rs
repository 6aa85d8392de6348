//! `cargo xtask web`: the zoo in a browser. Builds `web/` (the names GPT and
//! all-MiniLM-L6-v2 in WebAssembly) into `web/dist`, serves it, and tests it in headless
//! Chromium against the native programs.
//!
//! No wasm32 standard library comes with the toolchain here, so the module is built
//! with Debian's Rust (`rustc-web`, `cargo-web`), whose standard library's source
//! (`rust-web-src`) cargo compiles for wasm32 itself (`-Zbuild-std`), linked by LLVM 19's
//! `wasm-ld` (`lld-19`). `wasm-bindgen-cli` comes from crates.io at the version the
//! `wasm-bindgen` crate of `web/` is pinned to. The task installs all of it when it is
//! missing.

use super::*;

/// The version of `wasm-bindgen` that `web/Cargo.toml` pins; its CLI must be the same.
const WASM_BINDGEN: &str = "0.2.130";

/// Debian's packages of the build and the test, and a file each installs.
const APT_PACKAGES: [(&str, &str); 7] = [
    ("rustc-web", "/usr/bin/rustc"),
    ("cargo-web", "/usr/bin/cargo"),
    (
        "rust-web-src",
        "/usr/lib/rustlib/src/rust/library/std/Cargo.toml",
    ),
    ("lld-19", "/usr/lib/llvm-19/bin/wasm-ld"),
    ("chromium", "/usr/bin/chromium"),
    ("nodejs", "/usr/bin/node"),
    ("npm", "/usr/bin/npm"),
];

/// What the browser test asks of the page, and of the native programs.
const PREFIX: &str = "ma";
const TEMPERATURE: &str = "0.8";
const TOP_K: &str = "10";
const SAMPLES: usize = 20;
const SEED: &str = "7";
const SENTENCES: [&str; 5] = [
    "A man is playing a guitar.",
    "Someone plays an instrument.",
    "The stock market fell sharply today.",
    "Shares dropped at the close of trading.",
    "A cat sleeps on the sofa.",
];
/// The sizes of the timed runs: names sampled, and sentences embedded (the five above,
/// repeated); large enough that a native run's compute outweighs the noise in starting
/// a process.
const BENCH_NAMES: usize = 2000;
const BENCH_SENTENCES: usize = 500;
/// Timed runs of each kind, on both sides; the median is kept.
const BENCH_RUNS: usize = 5;
/// The page's timed runs on WebGPU: fewer and smaller, as Chromium's software adapter
/// (SwiftShader) runs them on a machine without a GPU.
const WEBGPU_BENCH_NAMES: usize = 200;
const WEBGPU_BENCH_SENTENCES: usize = 20;
const WEBGPU_BENCH_RUNS: usize = 3;

const USAGE: &str = "usage: cargo xtask web [--serve [PORT]] [--test]";

/// `cargo xtask web [--serve [PORT]] [--test]`.
pub(crate) fn web(args: &[String]) -> Result<bool> {
    let (mut serve, mut test, mut port) = (false, false, 8080u16);
    let mut it = args.iter().peekable();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--serve" => {
                serve = true;
                if let Some(p) = it.next_if(|a| !a.starts_with("--")) {
                    port = p
                        .parse()
                        .map_err(|_| format!("web: --serve takes a port number, got {p:?}"))?;
                }
            }
            "--test" => test = true,
            other => return Err(format!("web: unknown option {other:?}\n{USAGE}")),
        }
    }
    let cargo_env = CargoEnv::new(&setup()?)?;
    let page = build_page(&cargo_env)?;
    if test && !browser_test(&cargo_env, &page)? {
        return Ok(false);
    }
    if serve {
        let minilm = fetch_minilm()?;
        let mut command = Command::new("node");
        command
            .arg(workspace_root().join("web/serve.mjs"))
            .arg(&page)
            .arg(&minilm)
            .arg(port.to_string());
        run_checked(&mut command, "the page's server")?;
    }
    Ok(true)
}

/// CI's step: builds the page and runs the browser test. Returns whether it passed.
pub(crate) fn ci_check(cargo_env: &CargoEnv) -> Result<bool> {
    let page = build_page(cargo_env)?;
    browser_test(cargo_env, &page)
}

/// Installs the Debian packages that are missing, with sudo when not root.
fn ensure_packages() -> Result<()> {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .filter(|(_, file)| !Path::new(file).exists())
        .map(|(package, _)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("web: installing {}", missing.join(" "));
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let apt = |args: &[&str]| {
        let mut command = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.arg("apt-get");
            sudo
        };
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        command
    };
    if run_checked(apt(&["install", "-y"]).args(&missing), "apt-get install").is_err() {
        run_checked(&mut apt(&["update"]), "apt-get update")?;
        run_checked(apt(&["install", "-y"]).args(&missing), "apt-get install")?;
    }
    Ok(())
}

/// `wasm-bindgen` at [`WASM_BINDGEN`], installed under the cache root when missing.
fn wasm_bindgen_cli(cargo_env: &CargoEnv) -> Result<PathBuf> {
    let root = cache_root()?.join("tools");
    let bin = root.join("bin").join("wasm-bindgen");
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if version != format!("wasm-bindgen {WASM_BINDGEN}") {
        // Not --locked: the CLI's lock file names a webpki-roots release that the
        // registry no longer serves.
        let mut install = cargo_env.cargo([
            "install",
            "wasm-bindgen-cli",
            "--version",
            WASM_BINDGEN,
            "--root",
        ]);
        install
            .arg(&root)
            .current_dir(root.parent().unwrap_or(&root));
        run_checked(&mut install, "cargo install wasm-bindgen-cli")?;
    }
    Ok(bin)
}

/// The target folder of the wasm build, beside the workspace's.
fn web_target_dir() -> PathBuf {
    let mut dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .into_os_string();
    dir.push("-web");
    PathBuf::from(dir)
}

/// The workspace's release programs (the names example, `zoo`).
fn release_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("release")
}

/// Builds the workspace's programs (the names example, `zoo`) as the test suite builds
/// them (`--workspace`, every target, the matrix's features), so that nothing is compiled
/// twice with other features; in CI they are built by now.
fn native_programs(cargo_env: &CargoEnv) -> Result<()> {
    run_checked(
        &mut cargo_env.cargo([
            "build",
            "--release",
            "--workspace",
            "--features",
            MATRIX_FEATURES,
            "--tests",
            "--bins",
            "--examples",
        ]),
        "the native programs' build",
    )
}

/// Builds the module, binds it and assembles `web/dist`: the page, the module and the
/// names model. Returns `web/dist`.
fn build_page(cargo_env: &CargoEnv) -> Result<PathBuf> {
    ensure_packages()?;
    let bindgen = wasm_bindgen_cli(cargo_env)?;
    let web = workspace_root().join("web");
    let target = web_target_dir();
    step(
        "web: the module (wasm32, Debian's Rust, -Zbuild-std)",
        || {
            let mut build = Command::new("/usr/bin/cargo");
            build
                .args([
                    "build",
                    "--release",
                    "--locked",
                    "-Zbuild-std=std,panic_abort",
                    "--target",
                    "wasm32-unknown-unknown",
                ])
                .current_dir(&web)
                .env("RUSTC", "/usr/bin/rustc")
                .env("RUSTC_BOOTSTRAP", "1")
                .env(
                    "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER",
                    "/usr/lib/llvm-19/bin/wasm-ld",
                )
                .env("CARGO_TARGET_DIR", &target)
                .env(
                    "PATH",
                    prepend_path(Path::new("/usr/bin"), env::var_os("PATH"))?,
                )
                .env_remove("RUSTUP_TOOLCHAIN")
                .env_remove("RUSTFLAGS")
                .env_remove("CARGO_ENCODED_RUSTFLAGS");
            for (key, _) in env::vars_os() {
                if key.to_str().is_some_and(is_package_var) {
                    build.env_remove(key);
                }
            }
            run_checked(&mut build, "the wasm build")
        },
    )?;
    let dist = web.join("dist");
    if dist.exists() {
        fs::remove_dir_all(&dist)
            .map_err(|err| format!("cannot remove {}: {err}", dist.display()))?;
    }
    let module = target.join("wasm32-unknown-unknown/release/zoo_web.wasm");
    run_checked(
        Command::new(&bindgen)
            // Without the function names, which would double the module's size.
            .args([
                "--target",
                "web",
                "--no-typescript",
                "--remove-name-section",
            ])
            .arg("--out-dir")
            .arg(dist.join("pkg"))
            .arg(&module),
        "wasm-bindgen",
    )?;
    copy_dir(&web.join("www"), &dist)?;
    copy_dir(&names_model(cargo_env)?, &dist.join("names-model"))?;
    let size = fs::metadata(dist.join("pkg/zoo_web_bg.wasm")).map_or(0, |m| m.len());
    println!(
        "web: built {} (module {:.1} MiB)",
        dist.display(),
        size as f64 / (1 << 20) as f64
    );
    Ok(dist)
}

/// The files of `from` (not its folders) copied into `to`.
fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).map_err(|err| format!("cannot create {}: {err}", to.display()))?;
    let entries =
        fs::read_dir(from).map_err(|err| format!("cannot list {}: {err}", from.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|err| format!("cannot list {}: {err}", from.display()))?
            .path();
        if path.is_file() {
            let dest = to.join(path.file_name().unwrap_or_default());
            fs::copy(&path, &dest).map_err(|err| {
                format!(
                    "cannot copy {} to {}: {err}",
                    path.display(),
                    dest.display()
                )
            })?;
        }
    }
    Ok(())
}

/// The names example's trained model (`model.json`, `model.bpk`) under the cache root,
/// trained with the example's own recipe when it is not there yet.
fn names_model(cargo_env: &CargoEnv) -> Result<PathBuf> {
    let web = cache_root()?.join("web");
    let dir = web.join("names-model");
    if dir.join("model.bpk").is_file() && dir.join("model.json").is_file() {
        return Ok(dir);
    }
    step("web: train the names model (the names example)", || {
        native_programs(cargo_env)?;
        let mut run = cargo_env.run(&release_dir().join("examples").join("names"));
        run.args(["--overwrite", "--checkpoint"])
            .arg(&dir)
            .arg("--artifacts")
            .arg(web.join("names-run"));
        run_checked(&mut run, "the names example")
    })?;
    Ok(dir)
}

/// Runs `command`, returning its stdout and its wall time.
fn timed(mut command: Command, what: &str) -> Result<(String, f64)> {
    let started = Instant::now();
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .map_err(|err| format!("cannot run {what}: {err}"))?;
    let secs = started.elapsed().as_secs_f64();
    if !output.status.success() {
        return Err(format!("{what} failed ({})", output.status));
    }
    Ok((String::from_utf8_lossy(&output.stdout).into_owned(), secs))
}

/// The median of [`BENCH_RUNS`] timed runs of `make()`.
fn median_secs(mut make: impl FnMut() -> Command, what: &str) -> Result<f64> {
    let mut secs = Vec::new();
    for _ in 0..BENCH_RUNS {
        secs.push(timed(make(), what)?.1);
    }
    secs.sort_by(f64::total_cmp);
    Ok(secs[BENCH_RUNS / 2])
}

/// A JSON string.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `{"sentences": [...]}` of `n` sentences, [`SENTENCES`] over and over.
fn sentences_json(n: usize) -> String {
    let list: Vec<String> = SENTENCES
        .iter()
        .cycle()
        .take(n)
        .map(|s| json_string(s))
        .collect();
    format!("{{\"sentences\": [{}]}}", list.join(", "))
}

/// The native runs the page is checked against, and their timings; then the browser
/// test (`web/test/e2e.mjs`), which compares and reports. Returns whether it passed.
fn browser_test(cargo_env: &CargoEnv, page: &Path) -> Result<bool> {
    let minilm = fetch_minilm()?;
    let web = workspace_root().join("web");
    let work = web_target_dir().join("browser-test");
    fs::create_dir_all(&work).map_err(|err| format!("cannot create {}: {err}", work.display()))?;
    let write = |name: &str, text: &str| -> Result<PathBuf> {
        let path = work.join(name);
        fs::write(&path, text).map_err(|err| format!("cannot write {}: {err}", path.display()))?;
        Ok(path)
    };

    let (native_names, native_embeddings, timings) = step("web: the native runs", || {
        // The workspace's programs with the test suite's features, built by now in CI.
        native_programs(cargo_env)?;
        let names_bin = release_dir().join("examples").join("names");
        let zoo = release_dir().join("zoo");
        let names_dir = page.join("names-model");
        let names = |n: usize| {
            let mut command = cargo_env.run(&names_bin);
            command
                .args(["--sample-only", "--checkpoint"])
                .arg(&names_dir)
                .args(["--prefix", PREFIX, "--temperature", TEMPERATURE])
                .args(["--top-k", TOP_K, "--seed", SEED, "--samples"])
                .arg(n.to_string());
            command
        };
        let (listed, _) = timed(names(SAMPLES), "the names example")?;
        let native_names = write("native-names.txt", &listed)?;
        let inputs: Vec<PathBuf> = [SENTENCES.len(), SENTENCES.len() + BENCH_SENTENCES]
            .iter()
            .map(|&n| write(&format!("sentences-{n}.json"), &sentences_json(n)))
            .collect::<Result<_>>()?;
        let embed = |input: &Path, output: &Path| {
            let mut command = cargo_env.run(&zoo);
            command
                .arg("embed")
                .arg("--model")
                .arg(&minilm)
                .arg("--input")
                .arg(input)
                .arg("--output")
                .arg(output);
            command
        };
        let native_embeddings = work.join("native-embeddings.json");
        timed(embed(&inputs[0], &native_embeddings), "zoo embed")?;
        // Rates from the difference of a small and a large run, so that starting the
        // process and loading the model cancel out.
        let scratch = work.join("scratch.json");
        let names_small = median_secs(|| names(SAMPLES), "the names example")?;
        let names_large = median_secs(|| names(SAMPLES + BENCH_NAMES), "the names example")?;
        let embed_small = median_secs(|| embed(&inputs[0], &scratch), "zoo embed")?;
        let embed_large = median_secs(|| embed(&inputs[1], &scratch), "zoo embed")?;
        let timings = format!(
            "{{\"namesProcessSecs\": {names_small}, \"namesPerSecond\": {}, \
             \"embedProcessSecs\": {embed_small}, \"embeddingsPerSecond\": {}}}",
            BENCH_NAMES as f64 / (names_large - names_small).max(1e-6),
            BENCH_SENTENCES as f64 / (embed_large - embed_small).max(1e-6),
        );
        Ok((native_names, native_embeddings, timings))
    })?;

    step("web: the browser test (headless Chromium)", || {
        let test = web.join("test");
        if !test.join("node_modules/playwright-core").is_dir() {
            run_checked(
                Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund"])
                    .current_dir(&test),
                "npm ci (playwright-core)",
            )?;
        }
        let sentences: Vec<String> = SENTENCES.iter().map(|s| json_string(s)).collect();
        let path = |p: &Path| json_string(&p.display().to_string());
        let settings = write(
            "settings.json",
            &format!(
                "{{\"dist\": {}, \"minilm\": {}, \"chromium\": \"/usr/bin/chromium\",\n\
                 \"prefix\": {}, \"temperature\": {TEMPERATURE}, \"topK\": {TOP_K},\n\
                 \"samples\": {SAMPLES}, \"seed\": {SEED}, \"sentences\": [{}],\n\
                 \"bench\": {{\"names\": {BENCH_NAMES}, \"sentences\": {BENCH_SENTENCES}, \
                 \"runs\": {BENCH_RUNS}}},\n\
                 \"benchWebgpu\": {{\"names\": {WEBGPU_BENCH_NAMES}, \
                 \"sentences\": {WEBGPU_BENCH_SENTENCES}, \"runs\": {WEBGPU_BENCH_RUNS}}},\n\
                 \"nativeNames\": {}, \"nativeEmbeddings\": {}, \"native\": {timings}}}\n",
                path(page),
                path(&minilm),
                json_string(PREFIX),
                sentences.join(", "),
                path(&native_names),
                path(&native_embeddings),
            ),
        )?;
        run_checked(
            Command::new("node")
                .arg(test.join("e2e.mjs"))
                .arg(settings)
                .arg(work.join("browser.json"))
                .arg(page.join("screenshot.png")),
            "the browser test",
        )
    })
    .map(|()| true)
    .or_else(|e| {
        eprintln!("error: {e}");
        Ok(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_the_version_the_crate_pins() {
        let manifest = fs::read_to_string(workspace_root().join("web/Cargo.toml")).unwrap();
        let pin = format!("wasm-bindgen = \"={WASM_BINDGEN}\"");
        assert!(manifest.contains(&pin), "web/Cargo.toml lacks {pin}");
    }

    #[test]
    fn sentences_as_json() {
        assert_eq!(json_string("a \"b\"\\\n"), "\"a \\\"b\\\"\\\\\\u000a\"");
        let json = sentences_json(7);
        assert!(json.starts_with("{\"sentences\": [\"A man is playing a guitar.\", "));
        assert_eq!(json.matches("A man is playing a guitar.").count(), 2);
        assert_eq!(json.matches("\", \"").count(), 6);
    }

    #[test]
    fn bad_options_are_named() {
        let err = web(&["--serve".into(), "x80".into()]).unwrap_err();
        assert!(err.contains("\"x80\""), "{err}");
        let err = web(&["--fast".into()]).unwrap_err();
        assert!(err.contains("--fast") && err.contains(USAGE), "{err}");
    }
}
