//! `usermm will-it-scale` and its links: a link named `TEST_processes` prints will-it-scale's
//! lines; a refused test is one line and exit 2; runtest mode's CSV is read by LKP's own
//! will-it-scale parser (`programs/will-it-scale/parse` of lkp-tests, found through
//! `LKP_SRC` as LKP finds it; the test says why and passes when that or ruby is missing).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_usermm");

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run usermm")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A scratch directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("usermm-wis-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_link_prints_will_it_scales_lines() {
    let d = scratch("link");
    let link = d.join("mmap1_processes");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    // Virtual time keeps the run short and the lines exact.
    let o = run(Command::new(&link)
        .args(["-t", "2", "-s", "1"])
        .env("USERMM_TIME", "virtual")
        .env("USERMM_PERIOD", "1ms"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "testcase:Anonymous memory mmap/munmap of 128MB");
    assert_eq!(lines[1], "warmup");
    assert_eq!(lines.len(), 2 + 7 + 1 + 1, "{out}");
    assert!(
        lines[2].starts_with("min:") && lines[2].contains(" max:") && lines[2].contains(" total:")
    );
    assert_eq!(lines[8], "measurement");
    assert!(lines[10].starts_with("average:"), "{out}");
    // main.c's usage for a bad option: on stdout, exit 1.
    let o = run(Command::new(&link).arg("-x"));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stdout).starts_with("Usage: "),
        "{}",
        text(&o.stdout)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_test_that_needs_a_page_cache_is_refused_in_one_line() {
    let o = run(Command::new(BIN).args(["will-it-scale", "page_fault2"]));
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("page_fault2: needs a file page cache"),
        "{err}"
    );
}

/// LKP's parser and what it needs: `$LKP_SRC/programs/will-it-scale/parse` and ruby with
/// active_support (its `lib/statistics.rb` requires it); why not, if not.
fn lkp_parser() -> Result<(PathBuf, PathBuf), String> {
    let src = std::env::var_os("LKP_SRC").ok_or("LKP_SRC is not set (an lkp-tests checkout)")?;
    let parse = Path::new(&src).join("programs/will-it-scale/parse");
    if !parse.is_file() {
        return Err(format!("{} is not there", parse.display()));
    }
    let ruby = Command::new("ruby")
        .args(["-e", "require 'active_support/core_ext/enumerable'"])
        .stderr(Stdio::null())
        .status();
    match ruby {
        Ok(s) if s.success() => Ok((PathBuf::from(src), parse)),
        Ok(_) => Err("ruby has no active_support (ruby-activesupport)".into()),
        Err(_) => Err("ruby is not installed".into()),
    }
}

#[test]
fn runtest_csv_is_read_by_lkps_parser() {
    let o = run(Command::new(BIN).args([
        "will-it-scale",
        "mmap1",
        "-t",
        "1,2",
        "-s",
        "1",
        "--time",
        "virtual",
        "--period",
        "1ms",
    ]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let csv = text(&o.stdout);
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        rows[0],
        "tasks,processes,processes_idle,threads,threads_idle,linear"
    );
    assert_eq!(rows[1], "0,0,100,0,100,0");
    assert_eq!(rows.len(), 4, "{csv}");
    let (src, parse) = match lkp_parser() {
        Ok(p) => p,
        Err(why) => {
            println!("skipped: LKP's will-it-scale parser cannot run here: {why}");
            return;
        }
    };
    let mut child = Command::new("ruby")
        .arg(&parse)
        .env("LKP_SRC", &src)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(csv.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    // The parser's own keys, with our numbers.
    let one: Vec<&str> = rows[2].split(',').collect();
    assert!(out.contains(&format!("1.processes: {}\n", one[1])), "{out}");
    assert!(
        out.contains(&format!(
            "2.threads: {}\n",
            rows[3].split(',').nth(3).unwrap()
        )),
        "{out}"
    );
    for key in [
        "scalability: ",
        "per_process_ops: ",
        "per_thread_ops: ",
        "workload: ",
    ] {
        assert!(out.contains(key), "{key} missing: {out}");
    }
}
