//! `kubewasm crd`: the WasmPlugin CustomResourceDefinition, as YAML.

/// Prints the CRD.
pub fn execute() -> anyhow::Result<()> {
    print!("{}", kubewasm_host::hotload::crd_yaml());
    Ok(())
}
