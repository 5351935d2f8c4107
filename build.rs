// Embed libtorch's folder as an rpath so binaries and `cargo test` run without
// LD_LIBRARY_PATH. torch-sys (links = "tch") exports the folder as DEP_TCH_LIBTORCH_LIB.
fn main() {
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
}
