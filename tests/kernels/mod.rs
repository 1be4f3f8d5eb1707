//! placeholder
#![allow(dead_code)]
