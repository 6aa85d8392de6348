//! The environment every cargo command gets: the workspace and cache roots, the
//! Python venv with libtorch, and the variables cargo must see unchanged.

use super::*;

/// The torch release whose libtorch the `tch` backend is built against.
pub(crate) const TORCH_VERSION: &str = "2.9.0";

/// The workspace root: cargo commands run from there whatever the caller's directory.
pub(crate) fn workspace_root() -> PathBuf {
    // `cargo run` sets the variable at run time too. Prefer it: a binary built from
    // another checkout sharing the target folder (and left "fresh" by cargo, whose
    // fingerprints do not include the checkout's path) would carry that checkout's path.
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), Path::to_path_buf)
}

/// `$ZOO_CACHE`, else `$HOME/.cache/burn-model-zoo`: shared with `.ci/run`.
pub(crate) fn cache_root() -> Result<PathBuf> {
    if let Some(dir) = env::var_os("ZOO_CACHE").filter(|dir| !dir.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = env::var_os("HOME").ok_or("neither ZOO_CACHE nor HOME is set")?;
    Ok(Path::new(&home).join(".cache").join("burn-model-zoo"))
}

pub(crate) fn venv_dir() -> Result<PathBuf> {
    Ok(cache_root()?.join("venv"))
}

/// Whether the venv's python imports torch of exactly [`TORCH_VERSION`] (any local
/// suffix such as `+cu128` allowed). Missing python counts as "no".
pub(crate) fn venv_has_torch(venv: &Path) -> bool {
    let check = format!(
        "import torch,sys; sys.exit(0 if torch.__version__.split('+')[0]=='{TORCH_VERSION}' else 1)"
    );
    Command::new(venv.join("bin").join("python"))
        .args(["-c", &check])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Runs a command with inherited output and turns a failure into a message naming it.
pub(crate) fn run_checked(command: &mut Command, what: &str) -> Result<()> {
    println!("+ {}", describe(command));
    let status = command
        .status()
        .map_err(|err| format!("{what}: cannot start `{}`: {err}", describe(command)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

/// Makes sure `<cache>/venv` holds torch [`TORCH_VERSION`]; returns the venv path.
/// Quick when already done, so every task can call it first.
pub(crate) fn setup() -> Result<PathBuf> {
    let venv = venv_dir()?;
    if venv_has_torch(&venv) {
        println!("setup: torch {TORCH_VERSION} present in {}", venv.display());
        return Ok(venv);
    }
    println!(
        "setup: torch {TORCH_VERSION} not found in {}; installing it",
        venv.display()
    );
    if !venv.join("bin").join("python").exists() {
        let parent = venv.parent().unwrap_or(&venv);
        fs::create_dir_all(parent)
            .map_err(|err| format!("cannot create {}: {err}", parent.display()))?;
        run_checked(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "creating the virtual environment (is python3-venv installed?)",
        )?;
    }
    run_checked(
        Command::new(venv.join("bin").join("pip"))
            .arg("install")
            .arg(format!("torch=={TORCH_VERSION}")),
        &format!("pip install torch=={TORCH_VERSION}"),
    )?;
    if !venv_has_torch(&venv) {
        return Err(format!(
            "pip finished but {} still cannot import torch {TORCH_VERSION}",
            venv.join("bin").join("python").display()
        ));
    }
    println!(
        "setup: torch {TORCH_VERSION} installed in {}",
        venv.display()
    );
    Ok(venv)
}

/// The environment every cargo command runs with. It is computed once per task and
/// is the same from run to run, so `torch-sys` (whose build script reads it) stays built.
pub(crate) struct CargoEnv {
    pub(crate) vars: Vec<(&'static str, OsString)>,
}

impl CargoEnv {
    /// Asks the venv's python where torch keeps libtorch and builds the environment.
    pub(crate) fn new(venv: &Path) -> Result<Self> {
        let python = venv.join("bin").join("python");
        let output = Command::new(&python)
            .args([
                "-c",
                "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))",
            ])
            .stderr(Stdio::inherit())
            .output()
            .map_err(|err| format!("cannot run {}: {err}", python.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} cannot locate torch's lib directory",
                python.display()
            ));
        }
        let lib_dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if !lib_dir.is_dir() {
            return Err(format!(
                "torch lib directory {} does not exist",
                lib_dir.display()
            ));
        }
        let bin_dir = venv.join("bin");
        Ok(Self {
            vars: vec![
                ("LIBTORCH_USE_PYTORCH", OsString::from("1")),
                ("PATH", prepend_path(&bin_dir, env::var_os("PATH"))?),
                (
                    "LD_LIBRARY_PATH",
                    prepend_path(&lib_dir, env::var_os("LD_LIBRARY_PATH"))?,
                ),
            ],
        })
    }

    /// A `cargo` command in the workspace root with this environment applied. Uses the
    /// cargo that started the task (`$CARGO`) so the toolchain cannot change midway.
    pub(crate) fn cargo<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut command = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        command.args(args).current_dir(workspace_root());
        // `cargo run` hands xtask the package variables of xtask itself. Build scripts
        // that read them (ring's reads CARGO_MANIFEST_DIR) would see them change between
        // a build from here and one from a shell, and cargo would rebuild ring, rustls,
        // torch-sys and every Burn crate above burn-tch each time.
        for (key, _) in env::vars_os() {
            if key.to_str().is_some_and(is_package_var) {
                command.env_remove(key);
            }
        }
        command.envs(self.vars.iter().map(|(key, value)| (key, value)));
        command
    }

    /// A built program of the workspace, with this environment (libtorch on the library
    /// path).
    pub(crate) fn run(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command.envs(self.vars.iter().map(|(key, value)| (key, value)));
        command
    }
}

/// The variables cargo sets for the package it runs (`CARGO_PKG_NAME`,
/// `CARGO_MANIFEST_DIR`, ...), which a shell does not have.
pub(crate) fn is_package_var(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || matches!(
            key,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
        )
}

/// `dir:old`, or `dir` alone; left as is when `dir` already comes first, so nested
/// tasks do not grow the variable (which would look like a changed environment).
pub(crate) fn prepend_path(dir: &Path, old: Option<OsString>) -> Result<OsString> {
    // Empty entries would mean "the current directory" to the loader, so they are dropped.
    let old: Vec<PathBuf> = old
        .map(|old| {
            env::split_paths(&old)
                .filter(|part| !part.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if old.first().is_some_and(|first| first == dir) {
        return env::join_paths(old).map_err(|err| err.to_string());
    }
    env::join_paths(std::iter::once(dir.to_path_buf()).chain(old))
        .map_err(|err| format!("cannot put {} on a search path: {err}", dir.display()))
}

/// The program and arguments of a command, for echoing what is about to run.
pub(crate) fn describe(command: &Command) -> String {
    let program = Path::new(command.get_program());
    let name = program.file_name().unwrap_or(program.as_os_str());
    std::iter::once(name)
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
