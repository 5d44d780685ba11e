fn main() {
    std::process::exit(bprun::cli::main());
}
