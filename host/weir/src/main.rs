//! The `weir` command: the top floor, which parses the command line and hands each
//! subcommand to the crate that owns it (`weir-run`, `weir-serve`, `weir-cluster`), plus
//! the developer commands that live only here: `weir new`, `weir dev`, `weir build`,
//! `weir test`, `weir produce` and the admin API client.

#![warn(missing_docs)]

mod cli;
mod client;
mod dev;
mod dev_graph;
mod new;
mod produce;
mod project;
mod pydev;

/// The heap allocator: mimalloc, not the system's. With the `disk` state backend half
/// of the run's time went to the store's small allocations (its memtables' skiplists,
/// the rows it reads and compacts), a quarter of it in glibc's malloc and free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
