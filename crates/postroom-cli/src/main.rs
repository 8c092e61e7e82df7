//! The `postroom` binary: a thin shell over [`postroom_cli::run`].

fn main() -> std::process::ExitCode {
    postroom_cli::main()
}
