//! The era layer: which factors exist, what an era file must say, how a profile applies it.

use super::era::{parse_era, EraChoice, ERA_FACTORS};
use super::{Cost, Profile};

fn era_text(edit: impl Fn(&str, &mut String)) -> String {
    let mut s = String::from("name = \"t\"\ndescription = \"d\"\n");
    for e in &ERA_FACTORS {
        let mut block = format!(
            "[inputs.{}]\nvalue = 0.5\nunit = \"factor\"\nkind = \"inferred\"\nrows = [\"row a\"]\nsource = \"usermm infer (test)\"\n",
            e.input
        );
        edit(e.input, &mut block);
        s.push_str(&block);
    }
    s
}

fn era_err(text: &str) -> String {
    parse_era(text, "t").unwrap_err().to_string()
}

#[test]
fn an_era_file_holds_exactly_the_declared_factors_each_inferred_from_named_rows() {
    parse_era(&era_text(|_, _| {}), "t").unwrap();
    let drop_zap = era_text(|n, b| {
        if n == "era_zap" {
            b.clear()
        }
    });
    assert!(era_err(&drop_zap).contains("inputs.era_zap: missing"));
    let extra = format!(
        "{}[inputs.era_other]\nvalue = 1.0\nunit = \"factor\"\nkind = \"inferred\"\nrows = [\"r\"]\nsource = \"s\"\n",
        era_text(|_, _| {})
    );
    assert!(era_err(&extra).contains("inputs.era_other: not an era factor"));
    let measured = era_text(|n, b| {
        if n == "era_free" {
            *b = b.replace("\"inferred\"", "\"measured\"")
        }
    });
    assert!(era_err(&measured).contains("inputs.era_free.kind: an era factor is `inferred`"));
    let no_rows = era_text(|n, b| {
        if n == "era_locked" {
            *b = b.replace("[\"row a\"]", "[]")
        }
    });
    assert!(era_err(&no_rows).contains("inputs.era_locked.rows"));
    let unit = era_text(|n, b| {
        if n == "era_fault" {
            *b = b.replace("\"factor\"", "\"ns\"")
        }
    });
    assert!(era_err(&unit).contains("inputs.era_fault.unit"));
    let huge = era_text(|n, b| {
        if n == "era_zap" {
            *b = b.replace("0.5", "17.0")
        }
    });
    assert!(era_err(&huge).contains("inputs.era_zap.value: must be between"));
}

#[test]
fn a_profile_cannot_hold_an_inferred_input_or_rows_of_its_own() {
    let base = Profile::builtin("haswell-ep-2s").unwrap().to_toml_string();
    let inferred = base.replacen("kind = \"measured\"", "kind = \"inferred\"", 1);
    let e = Profile::from_toml_str(&inferred, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(".kind: a profile's own inputs are measured"),
        "{e}"
    );
    let rows = base.replacen(
        "kind = \"measured\"",
        "kind = \"measured\"\nrows = [\"x\"]",
        1,
    );
    let e = Profile::from_toml_str(&rows, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(".rows: only an inferred input names training rows"),
        "{e}"
    );
    let unknown = base.replace("era = \"intel-2016-2019\"", "era = \"vax-1985\"");
    let e = Profile::from_toml_str(&unknown, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("era: unknown era `vax-1985`"), "{e}");
}

#[test]
fn the_factors_multiply_exactly_the_costs_they_name() {
    let p = Profile::builtin("haswell-ex-4s").unwrap();
    let given = [0.5, 2.0, 3.0, 0.25];
    let q = p.with_era(EraChoice::Given(given)).unwrap();
    for c in Cost::ALL {
        let k = ERA_FACTORS.iter().position(|e| e.costs.contains(c));
        let want = p.base_cost_ns(*c) * k.map_or(1.0, |k| given[k]);
        assert!(
            (q.cost_ns(*c) - want).abs() <= 0.001,
            "{}: {} vs {want}",
            c.key(),
            q.cost_ns(*c)
        );
        assert_eq!(q.base_cost_ns(*c), p.base_cost_ns(*c));
    }
    // Nothing else moves: transfers, the atomic, the locks.
    assert_eq!(q.transfer_ps, p.transfer_ps);
    assert_eq!(q.atomic_rmw_ps, p.atomic_rmw_ps);
    assert_eq!(q.locks, p.locks);
    // Unfitted is the file's own figures; a scaled profile keeps the choice.
    let u = p.with_era(EraChoice::Unfitted).unwrap();
    assert_eq!(u.cost_ps, u.base_cost_ps);
    let s = q.scaled("zap_pte", 2.0).unwrap();
    assert_eq!(s.era().unwrap().choice, EraChoice::Given(given));
    assert!((s.cost_ns(Cost::ZapPte) - 2.0 * q.cost_ns(Cost::ZapPte)).abs() < 0.01);
    // Each factor multiplies at least one cost, and no cost twice.
    let mut seen = Vec::new();
    for e in &ERA_FACTORS {
        assert!(!e.costs.is_empty());
        for c in e.costs {
            assert!(!seen.contains(c), "{} named by two factors", c.key());
            seen.push(*c);
        }
    }
}

#[test]
fn era_choices_parse_and_refuse_what_they_cannot_apply() {
    assert_eq!(EraChoice::parse("").unwrap(), EraChoice::Inferred);
    assert_eq!(EraChoice::parse("unfitted").unwrap(), EraChoice::Unfitted);
    let g = EraChoice::parse("zap=0.5,free=0.75,locked=1.25,fault=2").unwrap();
    assert_eq!(g, EraChoice::Given([0.5, 0.75, 1.25, 2.0]));
    assert_eq!(EraChoice::parse(&g.to_string()).unwrap(), g, "round trip");
    for (bad, says) in [
        ("zap=0.5", "`free` missing"),
        ("zap=0.5,zap=1,free=1,locked=1,fault=1", "given twice"),
        ("zip=1", "unknown era factor `zip`"),
        ("zap=x,free=1,locked=1,fault=1", "not a number"),
        ("zap=0,free=1,locked=1,fault=1", "between"),
        ("zap=NaN,free=1,locked=1,fault=1", "between"),
        ("fitted", "expected inferred, unfitted or"),
    ] {
        let e = EraChoice::parse(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
    // A profile with no era refuses given factors (they would change nothing).
    let mut spec = Profile::builtin("e5-2680-32c").unwrap().spec().clone();
    spec.era = None;
    let p = Profile::from_spec(spec, "t.toml").unwrap();
    assert!(p.with_era(EraChoice::Given([1.0; 4])).is_err());
    assert!(p.with_era(EraChoice::Unfitted).is_ok());
}
