//! `cargo xtask ci`: every step a change must pass, and the per-backend summary.

use super::*;

/// Backend features every build and test run switches on together, so that one build
/// of Burn serves all backends and switching `ZOO_TEST_DEVICE` never recompiles.
pub(crate) const MATRIX_FEATURES: &str =
    "zoo-device/flex,zoo-device/ndarray,zoo-device/wgpu,zoo-device/tch";

/// Features of the cuda compile check (no GPU here, so it is built, not run).
pub(crate) const CUDA_FEATURES: &str = "zoo-device/flex,zoo-device/cuda";

/// Backends run by the matrix step, after the full suite on `flex`.
pub(crate) const MATRIX_BACKENDS: [&str; 3] = ["ndarray", "wgpu", "tch"];

/// Backends that must not skip any test in CI: the CI machine provides them for real.
pub(crate) const MUST_RUN_BACKENDS: [&str; 2] = ["wgpu", "tch"];

/// The README's first command, `cargo run --release --example names`, as a build: CI
/// compiles exactly what a user's first run compiles, default features (flex) only.
pub(crate) const README_BUILD: [&str; 4] = ["build", "--release", "--example", "names"];

/// Prints a step header and, when it ends, its duration and outcome.
pub(crate) fn step<T>(title: &str, body: impl FnOnce() -> Result<T>) -> Result<T> {
    println!("\n==> {title}");
    let started = Instant::now();
    let result = body();
    let verdict = if result.is_ok() { "done" } else { "FAILED" };
    println!(
        "<== {title}: {verdict} in {}",
        format_duration(started.elapsed())
    );
    result
}

pub(crate) fn format_duration(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    if seconds < 60.0 {
        format!("{seconds:.1}s")
    } else {
        let whole = elapsed.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

/// The matrix backends to run: all of them, or those named in `ZOO_CI_BACKENDS`.
/// Returns the list and whether it was restricted.
pub(crate) fn selected_backends() -> Result<(Vec<&'static str>, bool)> {
    let Some(list) = env::var_os("ZOO_CI_BACKENDS") else {
        return Ok((MATRIX_BACKENDS.to_vec(), false));
    };
    let list = list.to_string_lossy().into_owned();
    let mut chosen = Vec::new();
    for name in list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
    {
        let Some(backend) = MATRIX_BACKENDS.iter().find(|known| **known == name) else {
            return Err(format!(
                "ZOO_CI_BACKENDS names unknown backend `{name}` (known: {})",
                MATRIX_BACKENDS.join(", ")
            ));
        };
        if !chosen.contains(backend) {
            chosen.push(*backend);
        }
    }
    Ok((chosen, true))
}

/// The full check. Returns `Ok(false)` when tests fail, `Err` when a gate step fails.
pub(crate) fn ci() -> Result<bool> {
    let started = Instant::now();
    let (backends, partial) = selected_backends()?;
    if partial {
        println!(
            "ci: PARTIAL run, ZOO_CI_BACKENDS restricts the matrix to [{}]",
            backends.join(", ")
        );
    }
    let venv = step("setup", setup)?;
    let cargo_env = CargoEnv::new(&venv)?;
    // The MiniLM parity tests run on every backend and are never skipped.
    step("fetch minilm", fetch_minilm)?;

    step("cargo fmt --all -- --check", || {
        run_checked(
            &mut cargo_env.cargo(["fmt", "--all", "--", "--check"]),
            "format check",
        )
    })?;
    step("documented commands put cargo options before `--`", || {
        check_documented_commands(&workspace_root())
    })?;
    step("clippy (flex, ndarray, wgpu, tch)", || {
        let args = [
            "clippy",
            "--release",
            "--workspace",
            "--all-targets",
            "--features",
            MATRIX_FEATURES,
            "--",
            "-D",
            "warnings",
        ];
        run_checked(&mut cargo_env.cargo(args), "clippy")
    })?;
    step("cuda compile check", || {
        // cubecl-cuda's build downloads LLVM unless DOCS_RS is set; a type check needs
        // no LLVM. The variable changes build-script outputs, so this check keeps its
        // own target folder and never invalidates the test build.
        let target = env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"));
        let mut cuda_target = target.into_os_string();
        cuda_target.push("-cuda-check");
        let mut command = cargo_env.cargo([
            "check",
            "--release",
            "--workspace",
            "--all-targets",
            "--features",
            CUDA_FEATURES,
        ]);
        command
            .env("DOCS_RS", "1")
            .env("CARGO_TARGET_DIR", cuda_target);
        run_checked(&mut command, "cuda check")
    })?;

    step(
        "the README's first command builds (default features)",
        || {
            // The same environment as every other step, so torch-sys is not rebuilt; the
            // default feature set gets its own copies of the crates whose features differ.
            run_checked(&mut cargo_env.cargo(README_BUILD), "README build")
        },
    )?;

    step("cargo doc --no-deps, warnings denied", || {
        let mut command = cargo_env.cargo([
            "doc",
            "--release",
            "--workspace",
            "--no-deps",
            "--features",
            MATRIX_FEATURES,
        ]);
        command.env("RUSTDOCFLAGS", "-D warnings");
        run_checked(&mut command, "cargo doc")
    })?;
    step(
        "cargo package (every library crate), and a build of the packages",
        || package_library_crates(&cargo_env),
    )?;
    step("templates/research builds and trains", || {
        research_template(&cargo_env)
    })?;

    let mut reports: Vec<(&str, BackendReport)> = Vec::new();
    let flex = step("tests on flex (full suite, doctests included)", || {
        let args = [
            "test",
            "--release",
            "--workspace",
            "--no-fail-fast",
            "--features",
            MATRIX_FEATURES,
        ];
        run_tests(&cargo_env, "flex", &args)
    })?;
    reports.push(("flex", flex));

    // The matrix runs even after failures on flex, so one run shows every backend.
    {
        for backend in &backends {
            let report = step(&format!("tests on {backend}"), || {
                let args = [
                    "test",
                    "--release",
                    "--workspace",
                    "--no-fail-fast",
                    "--lib",
                    "--bins",
                    "--tests",
                    "--examples",
                    "--features",
                    MATRIX_FEATURES,
                    "--",
                    "--skip",
                    "learning_",
                ];
                run_tests(&cargo_env, backend, &args)
            })?;
            reports.push((backend, report));
        }
    }

    // The page in a browser, after the tests: its check runs the native programs that
    // the test build made.
    let web_ok = step(
        "the web page: wasm build, headless Chromium against the native programs",
        || web::ci_check(&cargo_env),
    )
    .unwrap_or_else(|err| {
        eprintln!("error: {err}");
        false
    });
    let ok = summarize(&reports) & web_ok;
    println!("ci: web page {}", if web_ok { "passed" } else { "FAILED" });
    if partial {
        println!("ci: PARTIAL run (ZOO_CI_BACKENDS is set); this is not a full CI result");
    }
    let verdict = if ok { "passed" } else { "FAILED" };
    println!("ci: {verdict} in {}", format_duration(started.elapsed()));
    Ok(ok)
}

/// The version of every crate of the workspace: xtask inherits it from
/// `[workspace.package]` like the library crates, so the two cannot drift apart.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The crates a user depends on, in the order `cargo package` takes them.
pub(crate) const LIBRARY_CRATES: [&str; 12] = [
    "zoo-kernels",
    "zoo-device",
    "zoo-core",
    "zoo-attention",
    "zoo-data",
    "zoo-decoder",
    "zoo-encoder",
    "zoo-seq2seq",
    "zoo-vision",
    "zoo-hub",
    "zoo-train",
    "burn-model-zoo",
];

/// Packages every library crate as `cargo publish` would (the file list, the manifest
/// with versions on internal dependencies, the licence files), without publishing, then
/// builds the packages' own sources (see [`build_packaged_crates`]).
///
/// `--no-verify`: cargo's verification compiles each package alone, in the dev profile,
/// with its own set of Burn features, which took over ten minutes for three crates on the
/// CI machine. The build of the unpacked packages checks the same thing, in one build
/// that reuses the dependencies already compiled. `--allow-dirty` lets a developer run it
/// before committing; CI runs on a clean clone.
fn package_library_crates(cargo_env: &CargoEnv) -> Result<()> {
    let mut args = vec!["package", "--no-verify", "--allow-dirty"];
    for name in LIBRARY_CRATES {
        args.extend(["-p", name]);
    }
    run_checked(&mut cargo_env.cargo(args), "cargo package")?;
    build_packaged_crates(cargo_env)
}

/// `cargo xtask package`: [`package_library_crates`] alone.
pub(crate) fn package() -> Result<()> {
    let venv = setup()?;
    package_library_crates(&CargoEnv::new(&venv)?)
}

/// Unpacks every `.crate` file that `cargo package` wrote, and builds a scratch project
/// that depends on the facade (every family, the learner, flex) with each zoo crate
/// patched to its unpacked package: what a user of the published crates would compile,
/// from exactly the files the packages hold. The workspace's lock file and release
/// profile keep the dependencies the ones the README build compiled.
fn build_packaged_crates(cargo_env: &CargoEnv) -> Result<()> {
    let root = workspace_root();
    let target = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let scratch = env::temp_dir().join(format!("zoo-package-check-{}", std::process::id()));
    let unpacked = scratch.join("packages");
    fs::create_dir_all(scratch.join("src"))
        .and_then(|()| fs::create_dir_all(&unpacked))
        .map_err(|err| format!("cannot create {}: {err}", scratch.display()))?;
    let mut patches = String::new();
    for name in LIBRARY_CRATES {
        let file = target
            .join("package")
            .join(format!("{name}-{VERSION}.crate"));
        run_checked(
            Command::new("tar")
                .arg("-xzf")
                .arg(&file)
                .arg("-C")
                .arg(&unpacked),
            &format!("unpacking {}", file.display()),
        )?;
        let dir = unpacked.join(format!("{name}-{VERSION}"));
        patches.push_str(&format!(
            "{name} = {{ path = {:?} }}\n",
            dir.display().to_string()
        ));
    }
    // Cargo writes every file of a package with one fixed old timestamp, and the build
    // shares the target folder: without a fresh timestamp, a crate whose own manifest did
    // not change would count as built by an earlier check, from older sources.
    run_checked(
        Command::new("find")
            .arg(&unpacked)
            .args(["-type", "f", "-exec", "touch", "{}", "+"]),
        "touching the unpacked sources",
    )?;
    let manifest = format!(
        "[package]\nname = \"zoo-package-check\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[workspace]\n\n[dependencies]\n\
         burn-model-zoo = {{ version = \"{VERSION}\", features = [\"train\"] }}\n\n\
         [patch.crates-io]\n{patches}\n\
         [profile.release]\ndebug = false\nincremental = true\ncodegen-units = 16\n"
    );
    let program = "use burn_model_zoo::prelude::*;\n\nfn main() {\n    \
                   if let Ok(device) = select(BackendName::Flex) {\n        \
                   let _ = TextGeneration::from_pretrained(\"no-such-folder\", &device);\n    \
                   }\n    let _ = TrainConfig::new(1, \"runs\");\n}\n";
    let written = fs::write(scratch.join("Cargo.toml"), manifest)
        .and_then(|()| fs::write(scratch.join("src/main.rs"), program))
        .and_then(|()| fs::copy(root.join("Cargo.lock"), scratch.join("Cargo.lock")).map(drop));
    written.map_err(|err| format!("cannot write the scratch project: {err}"))?;
    let manifest_path = scratch.join("Cargo.toml").display().to_string();
    let result = run_checked(
        &mut cargo_env.cargo(["build", "--release", "--manifest-path", &manifest_path]),
        "build of the packaged crates",
    );
    fs::remove_dir_all(&scratch).ok();
    result
}

/// Builds the research project of `templates/research` (a workspace of its own that
/// depends on the facade by path) into the shared target folder, runs it for a few steps
/// and checks that it reports both models' validation losses as numbers.
fn research_template(cargo_env: &CargoEnv) -> Result<()> {
    let manifest = workspace_root().join("templates/research/Cargo.toml");
    let manifest = manifest.to_string_lossy().into_owned();
    run_checked(
        &mut cargo_env.cargo(["fmt", "--manifest-path", &manifest, "--", "--check"]),
        "format check of templates/research",
    )?;
    run_checked(
        &mut cargo_env.cargo(["build", "--release", "--manifest-path", &manifest]),
        "build of templates/research",
    )?;
    let runs = env::temp_dir().join(format!("zoo-research-ci-{}", std::process::id()));
    let runs_arg = runs.to_string_lossy().into_owned();
    let mut command = cargo_env.cargo([
        "run",
        "--release",
        "--quiet",
        "--manifest-path",
        &manifest,
        "--",
        "--steps",
        "20",
        "--eval-every",
        "10",
        "--out",
        &runs_arg,
    ]);
    println!("+ {}", describe(&command));
    let output = command
        .output()
        .map_err(|err| format!("cannot run templates/research: {err}"))?;
    fs::remove_dir_all(&runs).ok();
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    if !output.status.success() {
        return Err(format!(
            "templates/research failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    for model in ["stock attention:", "gated attention:"] {
        let loss = stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix(model))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|value| value.parse::<f64>().ok());
        match loss {
            Some(loss) if loss.is_finite() && loss > 0.0 => {}
            _ => {
                return Err(format!(
                    "templates/research printed no `{model} <loss>` line"
                ));
            }
        }
    }
    Ok(())
}

/// Prints one line per backend, then why the run fails, if it does. A backend that did
/// not run (a partial run, or flex failing first) is listed as such; the reason it did
/// not run already decides the verdict.
pub(crate) fn summarize(reports: &[(&str, BackendReport)]) -> bool {
    println!("\n==> summary");
    let mut problems = Vec::new();
    for name in std::iter::once("flex").chain(MATRIX_BACKENDS) {
        let Some((_, report)) = reports.iter().find(|(ran, _)| *ran == name) else {
            println!("backend {name}: not run");
            continue;
        };
        println!(
            "backend {name}: {} passed, {} failed, {} skipped",
            report.passed, report.failed, report.skipped
        );
        if report.failed > 0 {
            problems.push(format!("backend {name} has {} failure(s)", report.failed));
        }
        if report.passed == 0 {
            problems.push(format!("backend {name} passed no test at all"));
        }
        if MUST_RUN_BACKENDS.contains(&name) && report.skipped > 0 {
            problems.push(format!(
                "backend {name} must run every test in CI but skipped {}",
                report.skipped
            ));
        }
    }
    println!(
        "backend cuda: 0 passed, 0 failed, 0 skipped \
         (compile-checked; runs only where an NVIDIA GPU exists)"
    );
    for (name, report) in reports {
        if MUST_RUN_BACKENDS.contains(name) && !report.skipped_names.is_empty() {
            println!("skipped on {name}:");
            for test in &report.skipped_names {
                println!("  {test}");
            }
        }
    }
    for (name, report) in reports {
        for (test, lines) in &report.failures {
            println!("failed on {name}: {test}");
            for line in lines {
                println!("    {line}");
            }
        }
    }
    for problem in &problems {
        println!("ci: {problem}");
    }
    problems.is_empty()
}
