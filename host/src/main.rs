//! The `weir` command.

fn main() -> std::process::ExitCode {
    weir_host::cli::main()
}
