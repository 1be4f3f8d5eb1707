fn main() {
    mirage::build::compile_or_exit(["src/lib.rs"]);
}
