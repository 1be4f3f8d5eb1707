//! Import of Mirage µGraph JSON (being written).
