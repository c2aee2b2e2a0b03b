//! The fixed-size binary protocol between [`super::HostBackend`] and its child.
//!
//! Parent → child: one [`Req`] (7 native-endian `u64`s: a code and six arguments); a `WRITE`
//! request is followed by exactly `len` payload bytes.
//!
//! Child → parent: a sequence of [`Frame`]s (24 bytes: kind `u32`, errno `i32`, value `u64`,
//! payload length `u64`, then the payload). Zero or more `CHUNK` frames (payload bytes of stream
//! `value`) are followed by exactly one final frame (`OK`, `ERR`, `FAULT`, `MISPLACED`). After
//! start-up the child sends one `READY` frame.

pub(super) const REQ_BYTES: usize = 7 * 8;
pub(super) const FRAME_BYTES: usize = 24;

pub(super) const REQ_MMAP: u64 = 1;
pub(super) const REQ_MUNMAP: u64 = 2;
pub(super) const REQ_MPROTECT: u64 = 3;
pub(super) const REQ_MADVISE: u64 = 4;
pub(super) const REQ_MLOCK: u64 = 5;
pub(super) const REQ_MUNLOCK: u64 = 6;
pub(super) const REQ_READ: u64 = 7;
pub(super) const REQ_WRITE: u64 = 8;
pub(super) const REQ_PROBE: u64 = 9;
pub(super) const REQ_MAPS: u64 = 10;
pub(super) const REQ_COUNTERS: u64 = 11;
pub(super) const REQ_MREMAP: u64 = 12;
pub(super) const REQ_BRK: u64 = 13;
pub(super) const REQ_FORK: u64 = 14;
pub(super) const REQ_SWITCH: u64 = 15;
pub(super) const REQ_EXIT: u64 = 16;

/// Tokens on a process's control pipe: "you are current now", and the same with "the other
/// process exited".
pub(super) const TOKEN_SWITCH: u8 = 1;
pub(super) const TOKEN_OTHER_EXITED: u8 = 2;

/// `MapSource` on the wire (argument 4 of `REQ_MMAP`).
pub(super) const SRC_ANON: u64 = 0;
pub(super) const SRC_DEV_ZERO: u64 = 1;

pub(super) const F_CHUNK: u32 = 1;
pub(super) const F_OK: u32 = 2;
pub(super) const F_ERR: u32 = 3;
pub(super) const F_FAULT: u32 = 4;
pub(super) const F_MISPLACED: u32 = 5;
pub(super) const F_READY: u32 = 6;

/// Streams carried by `CHUNK` frames.
pub(super) const STREAM_MAIN: u64 = 0;
pub(super) const STREAM_ROLLUP: u64 = 1;
pub(super) const STREAM_SMAPS: u64 = 2;
pub(super) const NR_STREAMS: usize = 3;

/// Probe result byte flags.
pub(super) const PROBE_R: u8 = 1;
pub(super) const PROBE_W: u8 = 2;

/// One request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Req {
    pub code: u64,
    pub args: [u64; 6],
}

impl Req {
    pub(super) fn new(code: u64, args: &[u64]) -> Req {
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        Req { code, args: a }
    }

    pub(super) fn encode(&self) -> [u8; REQ_BYTES] {
        let mut b = [0u8; REQ_BYTES];
        b[..8].copy_from_slice(&self.code.to_ne_bytes());
        for (i, a) in self.args.iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        b
    }

    pub(super) fn decode(b: &[u8; REQ_BYTES]) -> Req {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[8 * i..8 * i + 8]);
            u64::from_ne_bytes(w)
        };
        Req {
            code: word(0),
            args: [word(1), word(2), word(3), word(4), word(5), word(6)],
        }
    }
}

/// One response frame header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Frame {
    pub kind: u32,
    pub errno: i32,
    pub value: u64,
    pub len: u64,
}

impl Frame {
    pub(super) fn encode(&self) -> [u8; FRAME_BYTES] {
        let mut b = [0u8; FRAME_BYTES];
        b[..4].copy_from_slice(&self.kind.to_ne_bytes());
        b[4..8].copy_from_slice(&self.errno.to_ne_bytes());
        b[8..16].copy_from_slice(&self.value.to_ne_bytes());
        b[16..24].copy_from_slice(&self.len.to_ne_bytes());
        b
    }

    pub(super) fn decode(b: &[u8; FRAME_BYTES]) -> Frame {
        let mut w4 = [0u8; 4];
        let mut w8 = [0u8; 8];
        w4.copy_from_slice(&b[..4]);
        let kind = u32::from_ne_bytes(w4);
        w4.copy_from_slice(&b[4..8]);
        let errno = i32::from_ne_bytes(w4);
        w8.copy_from_slice(&b[8..16]);
        let value = u64::from_ne_bytes(w8);
        w8.copy_from_slice(&b[16..24]);
        let len = u64::from_ne_bytes(w8);
        Frame {
            kind,
            errno,
            value,
            len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = Req::new(REQ_MMAP, &[1, 2, 3, u64::MAX, 5, 6]);
        assert_eq!(Req::decode(&r.encode()), r);
        let f = Frame {
            kind: F_ERR,
            errno: -3,
            value: 0xdead_beef,
            len: 7,
        };
        assert_eq!(Frame::decode(&f.encode()), f);
    }
}
