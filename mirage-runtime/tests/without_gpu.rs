//! Tests that run everywhere, CI included (no GPU, usually no driver).

use mirage_runtime::{
    ComputeCapability, Gpu, Layout, RuntimeError, check_compute_capability, check_ordinal, device_count,
    driver_available,
};

#[test]
fn opening_a_device_without_a_driver_is_an_error_not_a_panic() {
    if driver_available() {
        // A machine with a driver: a non-existent ordinal must still be an Err naming it.
        match Gpu::new(10_000) {
            Err(RuntimeError::NoDevice { ordinal: 10_000, count }) => {
                let msg = RuntimeError::NoDevice { ordinal: 10_000, count }.to_string();
                assert!(msg.contains("ordinal 10000"), "{msg}");
            }
            other => panic!("expected NoDevice for ordinal 10000, found {other:?}"),
        }
        return;
    }
    let err = Gpu::new(0).expect_err("no driver on this machine");
    assert!(matches!(err, RuntimeError::NoDriver), "expected NoDriver, found {err:?}");
    assert!(err.to_string().contains("no CUDA driver library (libcuda) found"), "{err}");
    assert!(matches!(device_count(), Err(RuntimeError::NoDriver)));
    assert!(matches!(Gpu::new(usize::MAX), Err(RuntimeError::NoDriver)));
}

#[test]
fn ordinal_and_capability_checks() {
    assert!(check_ordinal(0, 1).is_ok());
    let e = check_ordinal(2, 2).expect_err("out of range");
    assert!(
        e.to_string().contains("no CUDA device with ordinal 2") && e.to_string().contains("found 2 device(s)"),
        "{e}"
    );
    let e = check_ordinal(0, 0).expect_err("no devices");
    assert!(e.to_string().contains("found 0 device(s)"), "{e}");

    let min = Gpu::MIN_COMPUTE_CAPABILITY;
    assert!(check_compute_capability(0, "H200", ComputeCapability::new(9, 0), min).is_ok());
    assert!(check_compute_capability(0, "A100", ComputeCapability::new(8, 0), min).is_ok());
    let e = check_compute_capability(0, "V100", ComputeCapability::new(7, 0), min).expect_err("too old");
    let msg = e.to_string();
    assert!(msg.contains("V100") && msg.contains("7.0") && msg.contains("expected at least 8.0"), "{msg}");
}

#[test]
fn host_length_mismatch_names_expected_and_found() {
    let layout = Layout::row_major(&[4, 4096]).expect("valid shape");
    let err = layout.check_host_len(4095 * 4).expect_err("short");
    let msg = err.to_string();
    assert!(msg.contains("expected 16384 elements, found 16380"), "{msg}");
    assert!(msg.contains("[4, 4096]"), "{msg}");
}

#[test]
fn column_major_weights_accepted_and_checked() {
    // qwen2.5's weights are column-major: shape [k, n] with strides [1, k].
    let layout = Layout::strided(&[64, 32], &[1, 64]).expect("valid");
    assert_eq!(layout.storage_len(), 64 * 32);
    assert!(layout.check_host_len(64 * 32).is_ok());
    assert!(layout.check_storage_len("host data", 64 * 32 - 1).is_err());
}
