// Embed libtorch's folder as an rpath so binaries and `cargo test` run without
// LD_LIBRARY_PATH. torch-sys (links = "tch") exports the folder as DEP_TCH_LIBTORCH_LIB.
//
// `--features cuda`: torch-sys names libtorch_cuda, but rustc links with --as-needed and
// nothing in our code calls into it directly, so the linker drops it and the binary can
// never see a GPU. Keep it as a dependency on purpose.
fn main() {
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
}
