//! `/proc/<pid>/maps` rendering (`show_vma_header_prefix` + `show_map_vma` of
//! `fs/proc/task_mmu.c`), byte-exact with Linux 6.18; the format is in the parent module's doc.

use std::fmt::Write as _;

use super::area::{Vma, VmaKind, HUGETLBFS_DEV, SHMEM_DEV};
use super::flags::VmFlags;
use super::tree::VmaTree;
use crate::addr::PAGE_SHIFT;

impl VmaTree {
    /// `/proc/<pid>/maps`, byte-exact with Linux 6.18 (see the module doc).
    pub fn render_maps(&self) -> String {
        let mut m = String::with_capacity(self.vmas.len() * 64);
        for v in self.vmas.values() {
            self.show_map_vma(v, &mut m);
        }
        m
    }

    /// One maps line, with its newline.
    #[doc(alias = "show_vma_header_prefix")]
    pub fn show_map_vma(&self, vma: &Vma, m: &mut String) {
        let file_off = vma.pgoff << PAGE_SHIFT;
        let (pgoff, dev, ino, name) = match vma.kind {
            // show_map_vma: an anonymous VMA overlapping [start_brk, brk] is the heap.
            VmaKind::Anon if vma.start <= self.brk && vma.end >= self.start_brk => {
                (0, (0, 0), 0, Some("[heap]"))
            }
            VmaKind::Anon | VmaKind::PfnMap => (0, (0, 0), 0, None),
            VmaKind::DevZero => (
                file_off,
                (self.dev_zero.major, self.dev_zero.minor),
                self.dev_zero.ino,
                Some("/dev/zero"),
            ),
            VmaKind::SharedAnon => (file_off, SHMEM_DEV, vma.file, Some("/dev/zero (deleted)")),
            VmaKind::Hugetlb => (
                file_off,
                HUGETLBFS_DEV,
                vma.file,
                Some("/anon_hugepage (deleted)"),
            ),
        };
        // show_map_vma's permission column: one character a flag.
        let flag = |bit: VmFlags, set: char, clear: char| {
            if vma.flags.contains(bit) {
                set
            } else {
                clear
            }
        };
        let line_start = m.len();
        let _ = write!(
            m,
            "{:08x}-{:08x} {}{}{}{} {:08x} {:02x}:{:02x} {} ",
            vma.start,
            vma.end,
            flag(VmFlags::VM_READ, 'r', '-'),
            flag(VmFlags::VM_WRITE, 'w', '-'),
            flag(VmFlags::VM_EXEC, 'x', '-'),
            flag(VmFlags::VM_MAYSHARE, 's', 'p'),
            pgoff,
            dev.0,
            dev.1,
            ino,
        );
        if let Some(name) = name {
            // seq_setwidth(m, 25 + sizeof(void *) * 6 - 1) then seq_pad(m, ' ').
            const PAD_UNTIL: usize = 25 + 8 * 6 - 1;
            let written = m.len() - line_start;
            for _ in written..PAD_UNTIL {
                m.push(' ');
            }
            m.push(' ');
            m.push_str(name);
        }
        m.push('\n');
    }
}
