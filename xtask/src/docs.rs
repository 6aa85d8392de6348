//! The documented commands: cargo's options must come before `--`.

use super::*;

/// Options of cargo itself, which mean nothing to a program after `--`.
pub(crate) const CARGO_ONLY_OPTIONS: [&str; 5] = [
    "--features",
    "-F",
    "--no-default-features",
    "--all-features",
    "--release",
];

/// The cargo options in a command line that come after its `--`, where cargo hands them
/// to the program instead (`cargo run --example names -- --features wgpu`). Empty for a
/// line that runs no cargo command.
pub(crate) fn cargo_options_after_separator(line: &str) -> Vec<&str> {
    let words: Vec<&str> = line
        .split_whitespace()
        .map(|word| word.trim_matches(|c| c == '`' || c == '.' || c == ','))
        .collect();
    let Some(cargo) = words.iter().position(|word| *word == "cargo") else {
        return Vec::new();
    };
    let rest = &words[cargo..];
    let Some(separator) = rest.iter().position(|word| *word == "--") else {
        return Vec::new();
    };
    rest[separator + 1..]
        .iter()
        .copied()
        .filter(|word| {
            CARGO_ONLY_OPTIONS
                .iter()
                .any(|option| word == option || word.starts_with(&format!("{option}=")))
        })
        .collect()
}

/// Fails, naming each file and line, where a documented command puts a cargo option
/// after its `--` (cargo would hand it to the program, which rejects it).
pub(crate) fn check_documented_commands(root: &Path) -> Result<()> {
    let mut wrong = Vec::new();
    for file in documented_commands_files(root)? {
        let text = fs::read_to_string(&file)
            .map_err(|err| format!("cannot read {}: {err}", file.display()))?;
        for (number, line) in text.lines().enumerate() {
            let options = cargo_options_after_separator(line);
            if !options.is_empty() {
                wrong.push(format!(
                    "{}:{}: {} after `--`",
                    file.display(),
                    number + 1,
                    options.join(" ")
                ));
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "cargo options placed where cargo passes them to the program:\n{}",
            wrong.join("\n")
        ))
    }
}

/// The files whose command lines users copy: the READMEs of the workspace, its crates,
/// its examples and the web page, and the example sources (their `//!` headers show how to run them).
pub(crate) fn documented_commands_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = vec![root.join("README.md")];
    let web = root.join("web/README.md");
    if web.is_file() {
        files.push(web);
    }
    for folder in ["crates", "examples"] {
        let mut pending = vec![root.join(folder)];
        while let Some(dir) = pending.pop() {
            let entries = fs::read_dir(&dir)
                .map_err(|err| format!("cannot list {}: {err}", dir.display()))?;
            for entry in entries {
                let path = entry
                    .map_err(|err| format!("cannot list {}: {err}", dir.display()))?
                    .path();
                if path.is_dir() {
                    pending.push(path);
                } else if path.file_name().is_some_and(|name| name == "README.md")
                    || (folder == "examples" && path.extension().is_some_and(|ext| ext == "rs"))
                {
                    files.push(path);
                }
            }
        }
    }
    files.sort();
    Ok(files)
}
