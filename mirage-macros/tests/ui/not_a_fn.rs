use mirage_macros::mugraph;

#[mugraph]
struct Kernel;

fn main() {}
