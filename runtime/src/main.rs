//! The `wprobe` binary.

fn main() -> std::process::ExitCode {
    runtime::cli::main()
}
