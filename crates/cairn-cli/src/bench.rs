//! `cairn bench`: the built-in benchmark (placeholder until the benchmark
//! lands; the interface below is fixed).

/// Options of `cairn bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Directory for the benchmark databases (a temporary one by default).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

/// Runs the benchmark.
pub fn run(_args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    Err("the benchmark is not built yet".into())
}
