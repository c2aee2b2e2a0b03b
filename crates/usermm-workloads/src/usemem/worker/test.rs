//! The worker's arithmetic, and its flags against the host's.

use super::*;

#[test]
fn lcm_of_strides() {
    assert_eq!(lcm(1, 0x10000), Some(0x10000));
    assert_eq!(lcm(3, 0x10000), Some(3 * 0x10000));
    assert_eq!(lcm(512, 0x10000), Some(0x10000));
    assert_eq!(lcm(u64::MAX, 0x10000), None);
}

#[test]
fn kbps_is_usemems_integer_arithmetic() {
    assert_eq!(kb_per_sec(1179648, 1314), 876712);
    assert_eq!(kb_per_sec(50331645, 368527), 133374);
    assert_eq!(kb_per_sec(72, 1851), 37);
    assert_eq!(kb_per_sec(3276800, 2848), 1123595);
}

/// The engine's flags are what the host backend hands the kernel: libc's values.
#[test]
fn the_engines_flags_are_the_host_kernels() {
    use usermm_host::ops as host;
    assert_eq!(
        [
            PROT_READ,
            PROT_WRITE,
            MAP_SHARED,
            MAP_PRIVATE,
            MAP_ANONYMOUS,
            MAP_POPULATE,
            MAP_HUGETLB
        ],
        [
            host::PROT_READ,
            host::PROT_WRITE,
            host::MAP_SHARED,
            host::MAP_PRIVATE,
            host::MAP_ANONYMOUS,
            host::MAP_POPULATE,
            host::MAP_HUGETLB
        ]
    );
    assert_eq!(
        [MADV_DONTNEED, MADV_HUGEPAGE, MADV_COLD, MADV_PAGEOUT],
        [
            host::MADV_DONTNEED,
            host::MADV_HUGEPAGE,
            host::MADV_COLD,
            host::MADV_PAGEOUT
        ]
    );
    assert_eq!(1u64 << (MAP_HUGE_2MB >> 26), 2 << 20);
}
