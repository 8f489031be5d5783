//! The `kubewasm` binary.

fn main() -> anyhow::Result<()> {
    println!("kubewasm {}", env!("CARGO_PKG_VERSION"));
    Ok(())
}
