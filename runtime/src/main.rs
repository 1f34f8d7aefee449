//! The `wprobe` binary.

fn main() -> std::process::ExitCode {
    runtime::cmd::cli::main()
}
