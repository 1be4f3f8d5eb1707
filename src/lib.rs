//! The workspace's own package: the project's first user of `mirage`. Its integration tests
//! (`tests/`), examples (`examples/`) and benchmarks (`benches/`) exercise the crates the way a
//! user's project would.
