//! `/proc/meminfo`, in the kernel's exact layout (`fs/proc/meminfo.c`, `show_val_kb`):
//! the label padded to 16 columns, the value right-aligned in 8, then ` kB`.
//!
//! As in the kernel, `MemFree` is `NR_FREE_PAGES`: pages on the per-CPU lists are *not* free.

use serde::Serialize;

/// The figures behind one `/proc/meminfo` rendering, in kB (counts where the kernel prints
/// counts).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct MemInfo {
    pub mem_total: u64,
    pub mem_free: u64,
    pub mem_available: u64,
    pub active_anon: u64,
    pub inactive_anon: u64,
    pub unevictable: u64,
    pub mlocked: u64,
    pub anon_pages: u64,
    pub page_tables: u64,
    pub percpu: u64,
    pub anon_huge_pages: u64,
    pub huge_pages_total: u64,
    pub huge_pages_free: u64,
    pub hugepagesize: u64,
    pub hugetlb: u64,
}

fn line(out: &mut String, label: &str, kb: u64) {
    use std::fmt::Write;
    let _ = writeln!(out, "{:<16}{:>8} kB", format!("{label}:"), kb);
}

fn count(out: &mut String, label: &str, n: u64) {
    use std::fmt::Write;
    let _ = writeln!(out, "{:<16}{:>8}", format!("{label}:"), n);
}

impl MemInfo {
    /// The text of `/proc/meminfo` (the lines the engine models, in the kernel's order).
    pub fn render(&self) -> String {
        let mut s = String::new();
        line(&mut s, "MemTotal", self.mem_total);
        line(&mut s, "MemFree", self.mem_free);
        line(&mut s, "MemAvailable", self.mem_available);
        line(&mut s, "Buffers", 0);
        line(&mut s, "Cached", 0);
        line(&mut s, "SwapCached", 0);
        line(&mut s, "Active", self.active_anon);
        line(&mut s, "Inactive", self.inactive_anon);
        line(&mut s, "Active(anon)", self.active_anon);
        line(&mut s, "Inactive(anon)", self.inactive_anon);
        line(&mut s, "Active(file)", 0);
        line(&mut s, "Inactive(file)", 0);
        line(&mut s, "Unevictable", self.unevictable);
        line(&mut s, "Mlocked", self.mlocked);
        line(&mut s, "SwapTotal", 0);
        line(&mut s, "SwapFree", 0);
        line(&mut s, "AnonPages", self.anon_pages);
        line(&mut s, "Mapped", 0);
        line(&mut s, "Shmem", 0);
        line(&mut s, "PageTables", self.page_tables);
        line(&mut s, "Percpu", self.percpu);
        line(&mut s, "AnonHugePages", self.anon_huge_pages);
        count(&mut s, "HugePages_Total", self.huge_pages_total);
        count(&mut s, "HugePages_Free", self.huge_pages_free);
        count(&mut s, "HugePages_Rsvd", 0);
        count(&mut s, "HugePages_Surp", 0);
        line(&mut s, "Hugepagesize", self.hugepagesize);
        line(&mut s, "Hugetlb", self.hugetlb);
        s
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn kernel_column_layout() {
        let m = MemInfo {
            mem_total: 4194304,
            hugepagesize: 2048,
            ..Default::default()
        };
        let r = m.render();
        assert!(r.starts_with("MemTotal:        4194304 kB\n"), "{r}");
        assert!(r.contains("\nHugePages_Total:       0\n"), "{r}");
        assert!(r.contains("\nHugepagesize:       2048 kB\n"), "{r}");
    }
}
