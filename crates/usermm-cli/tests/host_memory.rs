//! One host-memory check for every command: what a run will commit of this host (the
//! machine's page metadata and per-CPU lists at boot, per frame it allocates its metadata
//! (with a virtual run's line state) and page tables, full backing's data, a workload's own keep) is estimated from
//! the machine's shape and refused in one line when it does not fit. The budget is pinned
//! with `USERMM_HOST_MEM_AVAILABLE` so that the refusals do not depend on this host.

mod common;

use common::{assert_one_line, usermm_env};

const BUDGET: &str = "USERMM_HOST_MEM_AVAILABLE";

#[track_caller]
fn refused_within(budget: &str, args: &[&str], mentions: &str) {
    let o = usermm_env(args, &[(BUDGET, budget)]);
    assert_one_line(&o, args, mentions);
    assert!(
        common::stderr(&o).contains("of this host's memory, which has"),
        "{args:?}: {}",
        common::stderr(&o)
    );
}

/// Full backing's data counts for every command, not only usemem and bench.
#[test]
fn full_backing_runs_larger_than_the_host_are_refused() {
    refused_within(
        "8G",
        &["bigfree", "30G", "--backing", "full", "--max-active", "1"],
        "SIZE 30G",
    );
    refused_within(
        "8G",
        &["munmap-test", "30G", "--backing", "full"],
        "SIZE 30G",
    );
    refused_within("8G", &["usemem", "--backing", "full", "30G"], "SIZE 30G");
}

/// Booting commits a 1/1024 of the RAM in page metadata: 16T and 4T are refused where they
/// do not fit, naming --mem.
#[test]
fn a_boot_that_does_not_fit_is_refused() {
    refused_within("8G", &["meminfo", "--mem", "16T"], "--mem 16T");
    refused_within("2G", &["meminfo", "--mem", "4T"], "--mem 4T");
    // The per-CPU lists of every zone: 1024 nodes × 4096 CPUs.
    refused_within(
        "512M",
        &[
            "meminfo", "--mem", "64G", "--nodes", "1024", "--cpus", "4096",
        ],
        "--cpus 4096 --nodes 1024",
    );
    // The budget only lowers MemAvailable: a small machine still boots.
    let o = usermm_env(&["meminfo", "--mem", "64M"], &[(BUDGET, "1G")]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
}

/// A sparse run's per-frame state (metadata and page tables) is counted too.
#[test]
fn sparse_runs_count_their_page_metadata() {
    refused_within("1G", &["bigfree", "320G", "--max-active", "1"], "SIZE 320G");
}

/// Each faulter keeps six latency histograms (1.6 MiB): 64 of them (105 MB, beside a
/// machine of about 30 MB) are counted.
#[test]
fn faulters_count_what_they_keep() {
    refused_within(
        "80M",
        &["munmap-test", "64M", "--faulters", "64", "--mem", "5G"],
        "--faulters 64: the machine's memory for the VMAs (page metadata and tables, data \
         with full backing), and 1648K of latency histograms per faulter",
    );
}

/// On the wall clock a faulter is a host thread: 4095 of them on this host's few CPUs (a
/// 64M test that took 42 s and 6.7 GB) are refused before anything is made, whatever the
/// host's memory; in virtual time each is a CPU of the machine, and the profile bounds them.
#[test]
fn wall_clock_faulters_are_bounded_by_the_host_cpus() {
    let args = ["munmap-test", "64M", "--faulters", "4095", "--mem", "5G"];
    let o = usermm_env(&args, &[(BUDGET, "1T")]);
    assert_one_line(
        &o,
        &args,
        "--faulters 4095: on the wall clock each faulter is a thread",
    );
    let args = [
        "munmap-test",
        "64M",
        "--faulters",
        "4095",
        "--mem",
        "5G",
        "--time",
        "virtual",
    ];
    common::assert_usage_error(&args, "--faulters 4095: the default machine gets 4096 CPUs");
}

/// A size larger than the machine the profile models is refused, naming both.
#[test]
fn a_size_larger_than_the_profile_machine_is_refused() {
    for cmd in ["bigfree", "munmap-test"] {
        common::assert_usage_error(&[cmd, "600G", "--profile", "haswell-ex-4s"], "SIZE 600G");
        common::assert_usage_error(
            &[cmd, "600G", "--profile", "haswell-ex-4s"],
            "512 GiB of memory the machine of profile haswell-ex-4s has",
        );
    }
}
