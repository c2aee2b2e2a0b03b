//! `usermm usemem` and the `usemem` link from the outside: exit statuses, what goes to stdout
//! and what to stderr, the engine flags from the environment, `--host`, `-d` and SIGUSR1 —
//! and, at the end, one regression test for each difference found by running usemem built
//! from vm-scalability's sources beside it (`-t -1`, `--`, the process name, stdio's buffer
//! inherited by `fork`, the notes, `--host`'s pid-file message).

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_usermm");

/// A scratch directory with `usemem` linked to the binary (removed at the end).
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("usermm-usemem-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::symlink(BIN, d.join("usemem")).unwrap();
        Dir(d)
    }

    /// `./usemem ARGS` in this directory, with `env` set and no other `USERMM_*` variable.
    fn cmd(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        self.setup(Command::new("./usemem"), args, env)
    }

    /// [`Dir::cmd`] with the binary under its own file name and `usemem` only in argv[0]
    /// (`exec -a usemem usermm ARGS`).
    fn cmd_argv0(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(BIN);
        std::os::unix::process::CommandExt::arg0(&mut c, "usemem");
        self.setup(c, args, env)
    }

    fn setup(&self, mut c: Command, args: &[&str], env: &[(&str, &str)]) -> Command {
        c.current_dir(&self.0).args(args).stdin(Stdio::null());
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("USERMM_")) {
            c.env_remove(k);
        }
        c.env_remove("POSIXLY_CORRECT");
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.cmd(args, env).output().unwrap()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn usermm(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// stderr without the `usermm: note:` lines.
fn err_lines(o: &Output) -> Vec<String> {
    text(&o.stderr)
        .lines()
        .filter(|l| !l.starts_with("usermm: note:"))
        .map(str::to_string)
        .collect()
}

fn is_bytes_line(l: &str, bytes: u64) -> bool {
    l.starts_with(&format!("{bytes} bytes / ")) && l.ends_with(" KB/s")
}

fn is_free_line(l: &str) -> bool {
    l.ends_with(" usecs to free memory")
        && l.split(' ')
            .next()
            .is_some_and(|n| n.parse::<u64>().is_ok())
}

#[test]
fn the_link_is_usemem() {
    let d = Dir::new("link");
    let o = d.run(&["1M"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(is_bytes_line(lines[0], 1179648), "{out}");
    assert!(is_free_line(lines[1]), "{out}");
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    // The link's command line is usemem's alone: --mem abbreviates --memfd there.
    let o = d.run(&["--mem", "64K"], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(is_bytes_line(
        text(&o.stdout).lines().next().unwrap(),
        73728
    ));
}

#[test]
fn usage_and_errors_go_to_stderr_with_usemems_statuses() {
    let d = Dir::new("usage");
    // Missing SIZE and -h: usage on stderr, status 0.
    for args in [&[][..], &["-h"], &["--help"], &["1M", "2M"]] {
        let o = d.run(args, &[]);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
        assert_eq!(
            err_lines(&o).first().map(String::as_str),
            Some("Usage: ./usemem [options] size[k|m|g|t]"),
            "{args:?}"
        );
    }
    // A bad option: glibc's line then the usage, status 1.
    let o = d.run(&["--bogus", "1M"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    let err = err_lines(&o);
    assert_eq!(err[0], "./usemem: unrecognized option '--bogus'");
    assert_eq!(err[1], "Usage: ./usemem [options] size[k|m|g|t]");
    // The same through `usermm usemem`, named so.
    let o = usermm(&["usemem", "-h"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty());
    assert!(text(&o.stderr).starts_with("Usage: usermm usemem [options] size[k|m|g|t]\n"));
    let o = usermm(&["usemem"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty() && !o.stderr.is_empty());
    let o = usermm(&["usemem", "-y", "-u", "4096", "1M"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        err_lines(&o),
        ["usermm usemem: to sync tasks after allocation, unit must equal total size"]
    );
    // A failing worker does not change the parent's status.
    let o = d.run(&["-U", "4M"], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        err_lines(&o),
        [
            "./usemem: MAP_HUGETLB relies on MAP_ANONYMOUS",
            "./usemem: mmap failed: Invalid argument"
        ]
    );
}

#[test]
fn engine_flags_and_their_variables() {
    let d = Dir::new("env");
    // A bad engine flag is usermm's: one line, status 2.
    for o in [
        usermm(&["usemem", "--mem", "0", "1M"]),
        d.run(&["1M"], &[("USERMM_MEM", "0")]),
        d.run(&["1M"], &[("USERMM_SET", "nonsense=1")]),
    ] {
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
        let err = text(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("usermm: error: "), "{err}");
    }
    for var in [("USERMM_MEM", "0"), ("USERMM_SET", "nonsense=1")] {
        assert!(
            text(&d.run(&["1M"], &[var]).stderr).contains("USERMM_"),
            "{var:?}"
        );
    }
    // Good ones shape the machine: --json shows it.
    let o = d.run(
        &["64K"],
        &[
            ("USERMM_CPUS", "3"),
            ("USERMM_SET", "nr_hugepages=4"),
            ("USERMM_JSON", "1"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["config"]["cpus"], 3);
    assert_eq!(v["config"]["nr_hugepages"], 4);
    assert_eq!(v["status"], 0);
    assert_eq!(v["workers"][0]["bytes"], 73728);
    // With a hugetlb pool, -U -O maps 2 MiB pages: 4M = two of them.
    let o = d.run(&["-U", "-O", "4M"], &[("USERMM_SET", "nr_hugepages=4")]);
    assert_eq!(o.status.code(), Some(0));
    assert!(is_bytes_line(
        text(&o.stdout).lines().next().unwrap_or(""),
        (4 << 20) / 8 * 9
    ));
    // The engine's limits are usermm's errors.
    let o = usermm(&["usemem", "-n", "100000", "1M"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn host_runs_the_same_semantics() {
    let d = Dir::new("host");
    for o in [
        usermm(&["usemem", "--host", "-n", "2", "-j", "12", "1048576"]),
        d.run(&["-n", "2", "-j", "12", "1048576"], &[("USERMM_HOST", "1")]),
    ] {
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        assert_eq!(
            out.lines().filter(|l| is_bytes_line(l, 1179648)).count(),
            2,
            "{out}"
        );
        assert_eq!(out.lines().filter(|l| is_free_line(l)).count(), 2, "{out}");
    }
    let o = d.run(&["--bogus"], &[("USERMM_HOST", "1")]);
    assert_eq!(o.status.code(), Some(1));
    let o = d.run(&["-P", "1M"], &[("USERMM_HOST", "1")]);
    assert_eq!(text(&o.stdout).lines().count(), 1);
}

/// Stdout to a file: each worker's throughput line, then its free line (usemem's order, as
/// the lines are written when they happen).
#[test]
fn lines_reach_a_file_in_usemems_order() {
    let d = Dir::new("file");
    for (args, host) in [
        (&["-r", "2", "1M"][..], false),
        (&["-r", "2", "1M"], true),
        (&["-x", "-n", "2", "64K"], false),
    ] {
        let path = d.path("out");
        let f = File::create(&path).unwrap();
        let env: &[(&str, &str)] = if host { &[("USERMM_HOST", "1")] } else { &[] };
        let st = d.cmd(args, env).stdout(f).status().unwrap();
        assert!(st.success());
        let out = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        if args[0] == "-x" {
            assert!(
                is_bytes_line(lines[0], 73728) && is_bytes_line(lines[1], 73728),
                "{out}"
            );
            assert!(is_free_line(lines[2]) && is_free_line(lines[3]), "{out}");
        } else {
            // The dot of the second walk comes first, on the throughput line.
            assert!(
                lines[0].starts_with('.') && is_bytes_line(&lines[0][1..], 131072 + 2 * 1048576),
                "{out}"
            );
            assert!(is_free_line(lines[1]), "{out}");
        }
    }
}

fn wait_gone(pid: &str, limit: Duration) -> bool {
    let t = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// `-d`: the command returns once the walk is done, the pid file names the process that holds
/// the memory, and that process prints the free line when it is done.
#[test]
fn detach_returns_and_the_background_frees() {
    let d = Dir::new("detach");
    for host in [false, true] {
        let (out, pidf) = (d.path("out"), d.path("pid"));
        let _ = std::fs::remove_file(&pidf);
        let env: &[(&str, &str)] = if host { &[("USERMM_HOST", "1")] } else { &[] };
        let st = d
            .cmd(&["-d", "-s", "1", "-p", pidf.to_str().unwrap(), "64K"], env)
            .stdout(File::create(&out).unwrap())
            .status()
            .unwrap();
        assert!(st.success());
        let pid = std::fs::read_to_string(&pidf).unwrap();
        let pid = pid.trim();
        assert!(pid.parse::<u32>().is_ok(), "{pid:?}");
        assert!(
            wait_gone(pid, Duration::from_secs(60)),
            "{pid} still running"
        );
        let text = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            is_bytes_line(lines[0], 73728) && is_free_line(lines[1]),
            "{text}"
        );
    }
}

/// `-W`: write, say so, wait for SIGUSR1, read, print.
#[test]
fn write_signal_read_waits_for_sigusr1() {
    let d = Dir::new("usr1");
    for host in [false, true] {
        let env: &[(&str, &str)] = if host { &[("USERMM_HOST", "1")] } else { &[] };
        let mut child = d
            .cmd(&["-W", "64K"], env)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut r = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let pid = line
            .strip_prefix("Read Process ")
            .and_then(|l| l.strip_suffix(" is waiting signal\n"))
            .unwrap_or_else(|| panic!("{line:?}"))
            .to_string();
        assert!(Command::new("kill")
            .args(["-USR1", &pid])
            .status()
            .unwrap()
            .success());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut r, &mut rest).unwrap();
        assert!(child.wait().unwrap().success());
        let lines: Vec<&str> = rest.lines().collect();
        // The read pass counts only its accesses: 8192 words.
        assert!(is_bytes_line(lines[0], 65536), "{rest}");
        assert!(is_free_line(lines[1]), "{rest}");
    }
}

/// A worker's pid file that cannot be written: usemem's `perror` line (path and strerror).
fn assert_pid_file_message(o: &Output, path: &str) {
    let want = format!("{path}: No such file or directory");
    let err = text(&o.stderr);
    assert!(err.lines().any(|l| l == want), "{err}");
    assert!(!err.contains("os error"), "{err}");
}

/// Regression: `-t -1` ran one worker; usemem's loop starting threads runs zero times for a
/// negative count, so nothing is printed and the status is 0 — on the engine and the host,
/// with one process or several, with the barriers (`-x`, `-y`) on.
#[test]
fn negative_thread_count_starts_no_worker() {
    let d = Dir::new("negt");
    for host in ["0", "1"] {
        for args in [
            &["-t", "-1", "1M"][..],
            &["-n", "2", "-t", "-1", "-x", "-y", "1M"],
        ] {
            let o = d.run(args, &[("USERMM_HOST", host)]);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{args:?} host={host}: {}",
                text(&o.stderr)
            );
            assert!(
                o.stdout.is_empty(),
                "{args:?} host={host}: {}",
                text(&o.stdout)
            );
            assert!(
                o.stderr.is_empty(),
                "{args:?} host={host}: {}",
                text(&o.stderr)
            );
        }
    }
    let o = usermm(&["usemem", "-t", "-1", "1M"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
}

/// Regression: `usermm usemem -- -5` read `-5` as an option (clap took the `--`); after `--`
/// every word is an operand, as getopt reads it and as the `usemem` link always did.
#[test]
fn double_dash_makes_the_rest_operands() {
    let d = Dir::new("dashdash");
    let via_cmd = usermm(&["usemem", "--", "-5"]);
    let via_link = d.run(&["--", "-5"], &[]);
    for (o, name) in [(&via_cmd, "usermm usemem"), (&via_link, "./usemem")] {
        // -5 is SIZE: 2^64 - 5 bytes, which no mmap gives; the parent's status stays 0.
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert_eq!(
            err_lines(o),
            [format!("{name}: mmap failed: Cannot allocate memory")]
        );
    }
    // `--` alone as SIZE after the separator: 0 bytes, only a free line.
    let o = common::usermm(&["usemem", "-q", "--", "--"]);
    assert_eq!(o.status.code(), Some(0));
    let out = common::stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(is_free_line(out.trim_end()), "{out}");
}

/// Regression: started as `usemem` under the binary's own file name (`exec -a usemem usermm`),
/// the detached worker's name was `usermm`; case-migrate waits while `/proc/PID/comm` says
/// `usemem`.
#[test]
fn detached_worker_is_named_usemem() {
    // The SIGINT below must reach a worker with the default action: a test run from a shell's
    // background job has SIGINT ignored, which exec keeps; a handler here is reset by it.
    signal_hook::flag::register(
        signal_hook::consts::SIGINT,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    )
    .unwrap();
    let d = Dir::new("comm");
    for host in ["0", "1"] {
        let pidf = d.path("pid");
        let _ = std::fs::remove_file(&pidf);
        let st = d
            .cmd_argv0(
                &["-d", "-s", "60", "-p", pidf.to_str().unwrap(), "64K"],
                &[("USERMM_HOST", host)],
            )
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "host={host}");
        let pid = std::fs::read_to_string(&pidf).unwrap();
        let pid = pid.trim().to_string();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        // case-migrate's end: SIGINT, then wait while the name is usemem's.
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        assert_eq!(comm, "usemem\n", "host={host}");
        assert!(
            wait_gone(&pid, Duration::from_secs(60)),
            "{pid} still running"
        );
    }
}

/// Regression: the `usemem` link printed `usermm: note:` lines where usemem prints nothing;
/// they stay in `usermm usemem`, and come back in the link with `USERMM_NOTES=1`.
#[test]
fn notes_only_where_asked_for_in_the_link() {
    let d = Dir::new("notes");
    let note = |o: &Output| {
        text(&o.stderr)
            .lines()
            .filter(|l| l.starts_with("usermm: note: "))
            .count()
    };
    // The engine: -a is modelled as an anonymous mmap, and says so.
    let o = usermm(&["usemem", "-a", "64K"]);
    assert_eq!(
        (o.status.code(), note(&o)),
        (Some(0), 1),
        "{}",
        text(&o.stderr)
    );
    let o = d.run(&["-a", "64K"], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    assert_eq!(common::stdout(&o).lines().count(), 2);
    for on in ["1", "yes"] {
        let o = d.run(&["-a", "64K"], &[("USERMM_NOTES", on)]);
        assert_eq!(note(&o), 1, "USERMM_NOTES={on}: {}", text(&o.stderr));
    }
    let o = d.run(&["-a", "64K"], &[("USERMM_NOTES", "0")]);
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    // The host: -d with -t stays attached, and each thread says so.
    let args = ["-d", "-t", "2", "64K"];
    let o = common::usermm_env(&["usemem", "--host", "-d", "-t", "2", "64K"], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(note(&o) > 0, "{}", text(&o.stderr));
    let o = d.run(&args, &[("USERMM_HOST", "1")]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    let o = d.run(&args, &[("USERMM_HOST", "1"), ("USERMM_NOTES", "1")]);
    assert!(note(&o) > 0, "{}", text(&o.stderr));
    // The link's usage names the variable, and both usages say where usermm differs.
    let o = d.run(&["-h"], &[]);
    assert!(text(&o.stderr).contains("USERMM_NOTES"));
    for o in [o, usermm(&["usemem", "-h"])] {
        assert!(text(&o.stderr).contains("usermm differs from usemem"));
    }
}

/// Regression: `--host`'s detaching worker wrote an unwritable pid file's error as Rust's
/// `io::Error` (`... (os error 2)`); usemem's `perror` line is the path and strerror alone.
#[test]
fn pid_file_error_is_usemems_perror_line() {
    let d = Dir::new("pidfile");
    let path = format!("/nonexistent-usermm-{}/pid", std::process::id());
    for o in [
        usermm(&["usemem", "--host", "-d", "-p", &path, "64K"]),
        d.run(&["-d", "-p", &path, "64K"], &[("USERMM_HOST", "1")]),
        usermm(&["usemem", "-d", "-p", &path, "64K"]),
    ] {
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert_pid_file_message(&o, &path);
    }
}

/// Regression: with `--show-addr --prealloc` and stdout a file or a pipe, usemem's parent
/// line is still in its stdio buffer when it forks, so every process prints a copy (before
/// its own line) and the parent its own at exit: `-n 2` gives three. A terminal (line
/// buffering) gets it once.
#[test]
fn prealloc_address_line_follows_stdios_buffering() {
    let d = Dir::new("showaddr");
    let args = ["--show-addr", "--prealloc", "-n", "2", "64K"];
    let is_addr = |l: &str| {
        let w: Vec<&str> = l.split(' ').collect();
        w.len() == 2 && w[0].parse::<u32>().is_ok() && w[1].starts_with("0x")
    };
    for host in ["0", "1"] {
        let path = d.path("out");
        let st = d
            .cmd(&args, &[("USERMM_HOST", host)])
            .stdout(File::create(&path).unwrap())
            .status()
            .unwrap();
        assert!(st.success());
        let file = std::fs::read_to_string(&path).unwrap();
        let piped = common::stdout(&d.run(&args, &[("USERMM_HOST", host)]));
        for out in [&file, &piped] {
            let lines: Vec<&str> = out.lines().collect();
            let addrs: Vec<&str> = lines.iter().copied().filter(|l| is_addr(l)).collect();
            assert_eq!(addrs.len(), 3, "host={host}: {out}");
            assert!(addrs.iter().all(|a| *a == addrs[0]), "host={host}: {out}");
            assert_eq!(lines.len(), 5, "host={host}: {out}");
            assert!(is_addr(lines[0]) && is_addr(lines[4]), "host={host}: {out}");
        }
    }
    // A terminal, through script(1)'s pseudo-terminal where the host has it.
    let cmd = format!("./usemem {}", args.join(" "));
    match Command::new("script")
        .args(["-qc", &cmd, "/dev/null"])
        .current_dir(&d.0)
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => {
            let out = text(&o.stdout);
            assert_eq!(
                out.lines().filter(|l| is_addr(l.trim_end())).count(),
                1,
                "{out}"
            );
        }
        _ => eprintln!("skipped the terminal half: script(1) cannot run here"),
    }
}
