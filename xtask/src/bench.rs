//! `cargo xtask bench`: the zoo-bench programs, built once.

use super::*;

/// Runs one binary of `zoo-bench` on flex, with the same environment as `ci` so the
/// shared target directory is reused as is.
pub(crate) fn bench(args: &[String]) -> Result<bool> {
    if args
        .first()
        .is_none_or(|a| a.starts_with("--") || a == "precision")
    {
        return suite::run(args);
    }
    let known = bench_names(&workspace_root().join("crates/zoo-bench/src/bin"))?;
    let Some((what, rest)) = args.split_first() else {
        return Err(format!(
            "usage: cargo xtask bench <what> [args...], <what> one of: {}",
            known.join(", ")
        ));
    };
    if !known.contains(what) {
        return Err(format!(
            "unknown bench `{what}` (known: {}); its options go after its name",
            known.join(", ")
        ));
    }
    let venv = setup()?;
    let cargo_env = CargoEnv::new(&venv)?;
    let release = build_bench_programs(&cargo_env)?;
    let mut command = Command::new(release.join(what));
    command
        .args(rest)
        .envs(cargo_env.vars.iter().map(|(key, value)| (key, value)));
    println!("+ {}", describe(&command));
    let status = command
        .status()
        .map_err(|err| format!("cannot start bench program {what}: {err}"))?;
    Ok(status.success())
}

/// Builds the bench programs with exactly the test suite's package set and features, so
/// the dependencies compiled for the tests are reused rather than built a second time.
/// Returns the folder the programs are in.
pub(crate) fn build_bench_programs(cargo_env: &CargoEnv) -> Result<PathBuf> {
    let mut build = cargo_env.cargo([
        "build",
        "--release",
        "--workspace",
        "--bins",
        "--features",
        MATRIX_FEATURES,
    ]);
    run_checked(&mut build, "bench build")?;
    Ok(env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("release"))
}

/// The bench programs: one per file of `zoo-bench`'s `src/bin`, sorted.
pub(crate) fn bench_names(bin_dir: &Path) -> Result<Vec<String>> {
    let entries =
        fs::read_dir(bin_dir).map_err(|err| format!("cannot list {}: {err}", bin_dir.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|err| format!("cannot list {}: {err}", bin_dir.display()))?
            .path();
        if path.extension().is_some_and(|ext| ext == "rs")
            && let Some(stem) = path.file_stem()
        {
            names.push(stem.to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}
