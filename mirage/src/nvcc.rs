//! The nvcc driver (being written).
