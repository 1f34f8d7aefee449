//! Loading the probe programs given to `wprobe run` and `wprobe bench`:
//! `.rpn` compiled on the fly, `.wasm` and `.wat` checked against the ABI,
//! with `--probe LOCATION=EXPORT` for modules without a manifest.

use crate::cli::{RunArgs, parse_define};
use crate::session::ProgramInput;
use std::path::Path;

/// Directory of the traced command's executable (found through `PATH` like exec does).
fn command_dir(a: &RunArgs) -> Option<std::path::PathBuf> {
    let cmd = Path::new(a.command.first()?);
    let exe = if cmd.components().count() > 1 {
        cmd.to_path_buf()
    } else {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join(cmd))
            .find(|p| p.is_file())?
    };
    exe.parent().map(|p| {
        if p.as_os_str().is_empty() {
            Path::new(".").to_path_buf()
        } else {
            p.to_path_buf()
        }
    })
}

/// Loads one program file.
pub fn load_program(
    engine: &wasmtime::Engine,
    path: &Path,
    a: &RunArgs,
) -> Result<ProgramInput, String> {
    let label = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "program".into());
    let bytes = if path.extension().is_some_and(|e| e == "rpn") {
        let opts = rpn2wasm::Options {
            defines: a.define.iter().map(|d| parse_define(d)).collect(),
            include_dirs: a.include.clone(),
            symbols: None,
            // A bare `name =` is also looked for next to the traced command.
            module_dirs: command_dir(a).into_iter().collect(),
        };
        match rpn2wasm::compile(path, &opts) {
            Ok((c, _)) => c.wasm,
            Err((d, map)) => {
                return Err(format!(
                    "{}could not compile `{}`",
                    d.render(&map),
                    path.display()
                ));
            }
        }
    } else {
        std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?
    };
    let module = crate::load::load(engine, &bytes, None)
        .map_err(|e| format!("loading {}: {e}", path.display()))?;
    Ok(ProgramInput { label, module })
}
