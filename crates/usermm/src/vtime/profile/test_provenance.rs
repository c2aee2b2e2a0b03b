//! The built-in profiles' numbers, read by tests: every figure recomputed from its inputs,
//! every published input pinned to its citation, every measured input traced to the program
//! that took it, and a proof that editing any one number of a profile fails.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;

/// Every published figure a built-in profile may use: (input, value, unit, what the source
/// must cite, the machine it was measured on). docs/profiles.md lists the same, with links.
const PINNED: &[(&str, f64, &str, &str, &str)] = &[
    (
        "c2c_smt",
        7.6,
        "ns",
        "core-to-core-latency",
        "Broadwell-EP E5-2695 v4",
    ),
    (
        "c2c_same_socket",
        44.0,
        "ns",
        "core-to-core-latency",
        "Broadwell-EP E5-2695 v4",
    ),
    (
        "c2c_other_socket",
        118.0,
        "ns",
        "core-to-core-latency",
        "Broadwell-EP E5-2695 v4",
    ),
    (
        "snb_e_lock_xadd_cycles",
        20.7,
        "cycles",
        "atomic_ops_test",
        "i7-3930K (Sandy Bridge-E)",
    ),
    // Borrowed: no DRAM latency of the profiles' own machines is published here.
    (
        "dram_latency_ns",
        135.0,
        "ns",
        "Intel MLC",
        "4-socket Westmere-EX",
    ),
    (
        "dram_remote_min_ns",
        194.0,
        "ns",
        "Intel MLC",
        "4-socket Westmere-EX",
    ),
    (
        "dram_remote_max_ns",
        202.0,
        "ns",
        "Intel MLC",
        "4-socket Westmere-EX",
    ),
    ("llc_mib_haswell_18c", 45.0, "MiB", "Intel ARK", "Haswell"),
    ("llc_mib_e5_2680", 20.0, "MiB", "Intel ARK", "E5-2680"),
    ("llc_mb_e5_2699_v4", 55.0, "MiB", "Intel ARK", "E5-2699 v4"),
    // Intel MLC's idle latency matrix on FD.io CSIT's Haswell testbed: the nearest published
    // DRAM latencies of the Broadwell-EP generation (the same uncore).
    (
        "mlc_hsw_ep_local_node0_ns",
        97.5,
        "ns",
        "FD.io CSIT",
        "Xeon E5-2699 v3",
    ),
    (
        "mlc_hsw_ep_local_node1_ns",
        98.0,
        "ns",
        "FD.io CSIT",
        "Xeon E5-2699 v3",
    ),
    (
        "mlc_hsw_ep_remote_0_from_1_ns",
        139.6,
        "ns",
        "FD.io CSIT",
        "Xeon E5-2699 v3",
    ),
    (
        "mlc_hsw_ep_remote_1_from_0_ns",
        132.8,
        "ns",
        "FD.io CSIT",
        "Xeon E5-2699 v3",
    ),
    (
        "l2_kib",
        256.0,
        "KiB",
        "Optimization Reference Manual",
        "Sandy Bridge and Haswell",
    ),
];

/// The pins, as a check a test can run on any profile (the mutation test runs it on an edited
/// copy).
fn check_pins(p: &Profile) -> Result<(), String> {
    for (name, input) in &p.spec().inputs {
        if input.kind != InputKind::Published {
            continue;
        }
        let Some((_, value, unit, cites, machine)) = PINNED.iter().find(|e| e.0 == name) else {
            return Err(format!(
                "{}: published input {name} is not pinned in PINNED",
                p.name()
            ));
        };
        if input.value != *value || input.unit != *unit {
            return Err(format!(
                "{}: {name} = {} {} but its publication says {value} {unit}",
                p.name(),
                input.value,
                input.unit
            ));
        }
        if !input.source.contains(cites) || !input.source.contains(machine) {
            return Err(format!(
                "{}: {name}'s source must cite {cites} on {machine}: {}",
                p.name(),
                input.source
            ));
        }
    }
    Ok(())
}

/// A figure that takes a published input from another machine must say so.
fn check_borrowed(p: &Profile) -> Result<(), String> {
    let spec = p.spec();
    for row in p.provenance() {
        let published_elsewhere = row.inputs.iter().any(|i| {
            spec.inputs
                .get(i)
                .is_some_and(|x| x.kind == InputKind::Published)
                && PINNED
                    .iter()
                    .any(|e| e.0 == i && !spec.description.contains(e.4))
        });
        let source = source_of(spec, &row.field);
        if published_elsewhere
            && !(source.contains("borrowed from another machine")
                || source.contains("own core")
                || source.starts_with("assumption"))
        {
            return Err(format!(
                "{}: {} uses another machine's published figure without saying so: {source}",
                p.name(),
                row.field
            ));
        }
    }
    Ok(())
}

fn source_of<'a>(spec: &'a ProfileSpec, field: &str) -> &'a str {
    if let Some(k) = field.strip_prefix("costs.") {
        return &spec.costs[k].source;
    }
    if let Some(k) = field.strip_prefix("locks.") {
        return &spec.locks[k.trim_matches('"')].source;
    }
    match field {
        "transfer.smt_sibling" => &spec.transfer.smt_sibling.source,
        "transfer.same_socket" => &spec.transfer.same_socket.source,
        "transfer.other_socket" => &spec.transfer.other_socket.source,
        "wakeup" => &spec.wakeup.source,
        "atomic_rmw" => &spec.atomic_rmw.source,
        "smt.sibling_factor" => &spec.smt.source,
        "jitter" => &spec.jitter.as_ref().expect("jitter").source,
        m if m.starts_with("memory.") => {
            let mem = spec.memory.as_ref().expect("memory");
            match m {
                "memory.llc_lines" => &mem.llc_lines.source,
                "memory.l2_lines" => &mem.l2_lines.source,
                "memory.dram_local" => &mem.dram_local.source,
                "memory.dram_remote" => &mem.dram_remote.source,
                _ => &mem.dram_stream.source,
            }
        }
        other => panic!("no such field {other}"),
    }
}

#[test]
fn every_figure_of_a_builtin_is_its_formula_over_inputs_that_are_all_read() {
    for name in Profile::builtin_names() {
        let p = Profile::builtin(name).unwrap();
        let rows = p.provenance();
        assert_eq!(
            rows.len(),
            // transfers (3), wakeup, atomic, SMT; memory (5) and jitter.
            6 + 6 + p.spec().locks.len() + Cost::COUNT,
            "{name}: every figure has a row"
        );
        let mut read = std::collections::BTreeSet::new();
        for r in &rows {
            let formula = r
                .formula
                .as_deref()
                .unwrap_or_else(|| panic!("{name}: {} has no formula", r.field));
            let computed = r.computed.unwrap_or_else(|| panic!("{name}: {formula}"));
            assert!(
                (computed - r.value).abs() <= 0.05f64.max(computed.abs() * 1e-3),
                "{name}: {} = {} but {formula} = {computed}",
                r.field,
                r.value
            );
            read.extend(r.inputs.iter().cloned());
        }
        for input in p.spec().inputs.keys() {
            assert!(
                read.contains(input),
                "{name}: inputs.{input} is read by no formula"
            );
        }
        for (lock, l) in &p.spec().locks {
            assert!(
                l.data_lines == 0 || l.data_lines_source.starts_with("assumption"),
                "{name}: locks.{lock}.data_lines needs its own source"
            );
        }
    }
}

#[test]
fn measured_inputs_name_the_program_that_took_them_and_assumptions_say_so() {
    let measure = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/vtime/profiles/measure");
    for name in Profile::builtin_names() {
        let p = Profile::builtin(name).unwrap();
        for (key, i) in &p.spec().inputs {
            match i.kind {
                InputKind::Measured => {
                    let programs: Vec<String> = i
                        .source
                        .split("measure/")
                        .skip(1)
                        .map(|part| {
                            part.chars()
                                .take_while(|c| c.is_ascii_alphanumeric() || "_.".contains(*c))
                                .collect::<String>()
                                .trim_end_matches('.')
                                .to_string()
                        })
                        .collect();
                    assert!(
                        !programs.is_empty()
                            || i.source.contains("/proc/cpuinfo")
                            || i.source.contains("usermm calibrate"),
                        "{name}: measured input {key} names no program: {}",
                        i.source
                    );
                    for prog in programs {
                        assert!(
                            measure.join(&prog).is_file(),
                            "{name}: {key} cites measure/{prog}, which is not in the tree"
                        );
                    }
                    assert!(
                        i.source.contains("2026-"),
                        "{name}: {key} does not say when it was measured"
                    );
                }
                InputKind::Assumption => assert!(
                    i.source.starts_with("assumption"),
                    "{name}: {key} is an assumption and must begin by saying so"
                ),
                InputKind::Published => {}
                // The loader refuses them in a profile's own inputs (era files hold them).
                InputKind::Inferred => panic!("{name}: {key} is inferred inside a profile"),
            }
        }
        check_pins(&p).unwrap();
        check_borrowed(&p).unwrap();
    }
    // Every pinned publication is used by some profile (a pin of nothing checks nothing).
    for (pin, ..) in PINNED {
        assert!(
            Profile::builtin_names().iter().any(|n| Profile::builtin(n)
                .unwrap()
                .spec()
                .inputs
                .contains_key(*pin)),
            "{pin} is pinned but unused"
        );
    }
}

/// The arithmetic of the teardown and fault figures, recomputed here by hand (not by the
/// formula evaluator) from the inputs: the per-page teardown costs add up to the share of the
/// measured munmap they were split from — nothing counted twice — and the fault's parts add
/// up to the measured fault.
#[test]
fn teardown_and_fault_figures_add_up_to_the_measurements_they_split() {
    for name in Profile::builtin_names() {
        let p = Profile::builtin(name).unwrap();
        let i: BTreeMap<&str, f64> = p
            .spec()
            .inputs
            .iter()
            .map(|(k, v)| (k.as_str(), v.value))
            .collect();
        let r = i["host_ghz"] / p.topology().ghz;
        let shares = ["share_zap", "share_gather", "share_free_unref", "share_lru"];
        let total_share: f64 = shares.iter().map(|s| i[s]).sum();
        assert!(
            total_share <= 1.0,
            "{name}: the split's buckets exceed the whole"
        );
        assert!(i["share_zone_locked"] < i["share_free_unref"]);
        let teardown: f64 = [
            Cost::ZapPte,
            Cost::GatherPage,
            Cost::FreeUnrefPage,
            Cost::FreePcppagesBulkPage,
            Cost::FreeOneMerge,
            Cost::LruDel,
        ]
        .iter()
        // The file's figures: the era's factors are a layer over them, not part of the split.
        .map(|c| p.base_cost_ns(*c))
        .sum();
        let measured = i["host_munmap_4k"] * total_share * r;
        assert!(
            (teardown - measured).abs() < 0.3,
            "{name}: teardown per page {teardown} ns vs the split measurement {measured} ns"
        );
        let fault = p.base_cost_ns(Cost::FaultEntry)
            + p.base_cost_ns(Cost::FaultExit)
            + 4.0 * p.base_cost_ns(Cost::PtWalkLevel)
            + p.base_cost_ns(Cost::SetPte);
        let measured = i["host_zero_fault"] * r;
        assert!(
            (fault - measured).abs() < 0.3,
            "{name}: fault parts {fault} ns vs the measured fault {measured} ns"
        );
    }
}

/// Editing any one number of a built-in profile — a figure, an input, the clock — makes it fail
/// to load (its formula no longer gives it), and editing a published input together with every
/// figure that reads it, so that the arithmetic still closes, fails the pins.
#[test]
fn editing_any_one_number_of_a_profile_fails() {
    let numeric = [
        "ns = ",
        "cycles = ",
        "acquire_ns = ",
        "acquire_cycles = ",
        "bytes_per_ns = ",
        "sibling_factor = ",
        "value = ",
        "ghz = ",
    ];
    for name in Profile::builtin_names() {
        let text = Profile::builtin(name).unwrap().to_toml_string();
        let lines: Vec<&str> = text.lines().collect();
        let mut edited = 0;
        for (n, line) in lines.iter().enumerate() {
            let Some(prefix) = numeric.iter().find(|p| line.starts_with(**p)) else {
                continue;
            };
            let v: f64 = line[prefix.len()..].trim().parse().unwrap();
            let new = if v == 0.0 { 1.0 } else { v * 1.5 };
            let mut copy = lines.clone();
            let replaced = format!("{prefix}{new}");
            copy[n] = &replaced;
            let result = Profile::from_toml_str(&copy.join("\n"), "edited");
            assert!(
                result.is_err(),
                "{name}: line {} edited to `{replaced}` still loads",
                n + 1
            );
            edited += 1;
        }
        assert!(edited > 60, "{name}: only {edited} numbers found to edit");
    }
    // The transfer and its input edited together: the arithmetic closes, the pin does not.
    let p = Profile::builtin("haswell-ep-2s").unwrap();
    let mut spec = p.spec().clone();
    spec.inputs.get_mut("c2c_same_socket").unwrap().value = 10.0;
    spec.transfer.same_socket.ns = Some(10.0);
    let edited = Profile::from_spec(spec, "edited").unwrap();
    assert!(check_pins(&edited).unwrap_err().contains("c2c_same_socket"));
}

#[test]
fn a_figure_that_disagrees_with_its_formula_is_refused_by_name() {
    let text = Profile::builtin("haswell-ex-4s").unwrap().to_toml_string();
    let zap = Profile::builtin("haswell-ex-4s").unwrap().spec().costs["zap_pte"]
        .ns
        .unwrap();
    let bad = text.replacen(&format!("ns = {zap}"), "ns = 50.0", 1);
    let e = Profile::from_toml_str(&bad, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("profile t.toml: costs.zap_pte: the figure says 50 ns, its formula"),
        "{e}"
    );
    let unknown = text.replacen(
        "formula = \"host_munmap_4k * share_zap",
        "formula = \"host_munmap_4kk * share_zap",
        1,
    );
    let e = Profile::from_toml_str(&unknown, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("costs.zap_pte.formula") && e.contains("`host_munmap_4kk`"),
        "{e}"
    );
    // A scaled profile keeps its arithmetic: the formula is scaled with the figure.
    let s = Profile::builtin("haswell-ex-4s")
        .unwrap()
        .scaled("zap_pte", 1.5)
        .unwrap();
    let row = s
        .provenance()
        .into_iter()
        .find(|r| r.field == "costs.zap_pte")
        .unwrap();
    assert!(row.formula.unwrap().ends_with(") * 1.5"));
}

/// A user's profile is held to the built-ins' rules when it loads: a figure whose formula
/// line is deleted, an input whose unit does not give its figure's, and an input that no
/// formula reads are each refused in one line naming the field.
#[test]
fn a_missing_formula_a_wrong_unit_and_an_unread_input_are_refused_by_name() {
    let text = Profile::builtin("haswell-ex-4s").unwrap().to_toml_string();
    let load = |t: &str| Profile::from_toml_str(t, "t.toml").unwrap_err().to_string();
    let zap = "formula = \"host_munmap_4k * share_zap * host_ghz / topology_ghz\"\n";
    assert!(text.contains(zap));
    let e = load(&text.replacen(zap, "", 1));
    assert_eq!(
        e,
        "profile t.toml: costs.zap_pte.formula: missing: every figure gives the arithmetic \
         that makes it from [inputs]"
    );
    let ns = "unit = \"ns/page\"";
    assert_eq!(text.matches(ns).count(), 1);
    let e = load(&text.replacen(ns, "unit = \"GHz\"", 1));
    assert!(
        e.starts_with("profile t.toml: costs.")
            && e.contains("host_munmap_4k")
            && e.ends_with("its inputs' units give cycles/ns, but the figure is in ns"),
        "{e}"
    );
    let spare = "\n[inputs.spare]\nvalue = 1.0\nunit = \"ns\"\nkind = \"assumption\"\n\
                 source = \"assumption: read by nothing\"\n";
    let e = load(&format!("{text}{spare}"));
    assert_eq!(
        e,
        "profile t.toml: inputs.spare: no formula reads it (a number nobody uses is a number \
         nobody checks)"
    );
}

/// A hostile formula (20 000 parentheses deep, 100 000 terms, 100 000 unary minuses) is
/// refused in one short line that names the figure and quotes only the formula's start.
#[test]
fn a_hostile_formula_is_refused_in_one_short_line() {
    let text = Profile::builtin("haswell-ex-4s").unwrap().to_toml_string();
    let zap = "host_munmap_4k * share_zap * host_ghz / topology_ghz";
    for (hostile, why) in [
        (
            format!("{}{zap}{}", "(".repeat(20_000), ")".repeat(20_000)),
            "is longer than 1000 tokens",
        ),
        (format!("{zap}{}", " + 0".repeat(100_000)), "is longer"),
        (format!("{}{zap}", "-".repeat(100_000)), "is longer"),
        (
            format!("{}{zap}{}", "(".repeat(65), ")".repeat(65)),
            "nests deeper",
        ),
    ] {
        let bad = text.replacen(
            &format!("formula = \"{zap}\""),
            &format!("formula = \"{hostile}\""),
            1,
        );
        let e = Profile::from_toml_str(&bad, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("profile t.toml: costs.zap_pte.formula: `"),
            "{e}"
        );
        assert!(e.contains(why) && e.contains(" characters)"), "{e}");
        assert!(e.len() < 200 && !e.contains('\n'), "{e}");
    }
}
