//! Value parsers for clap: sizes in the kernel's `memparse` syntax. Each returns an error
//! message that clap prints after `invalid value '...' for '<FLAG>':`, so the flag is named by
//! clap and the message names the limit.
//!
//! Every size is at most [`MAX_MEM_BYTES`] (16T), the most RAM an emulated machine has: a
//! mapping, a step or a unit larger than that cannot exist in it, and keeping sizes there keeps
//! every later sum (SIZE + page tables + slack) far from `u64` overflow.

use usermm::config::{parse_size, MAX_MEM_BYTES, MIN_MEM_BYTES};

use crate::report::format::human_bytes;

/// A size flag: `memparse` syntax, 0 ..= [`MAX_MEM_BYTES`] (usemem accepts 0).
pub fn parse_size_arg(s: &str) -> Result<u64, String> {
    let n = parse_size(s)
        .map_err(|_| format!("expected a size such as 4G, 512M, 0x200000 or 4096, got '{s}'"))?;
    if n > MAX_MEM_BYTES {
        return Err(format!(
            "must be at most {}, the most RAM an emulated machine has",
            human_bytes(MAX_MEM_BYTES)
        ));
    }
    Ok(n)
}

/// A size flag that must be non-zero.
pub fn parse_nonzero_size_arg(s: &str) -> Result<u64, String> {
    match parse_size_arg(s)? {
        0 => Err("the size must be greater than 0".into()),
        n => Ok(n),
    }
}

/// `--mem`: a size the engine can emulate.
pub fn parse_mem_arg(s: &str) -> Result<u64, String> {
    let n = parse_size_arg(s)?;
    if n < MIN_MEM_BYTES {
        Err(format!("must be at least {}", human_bytes(MIN_MEM_BYTES)))
    } else if n > MAX_MEM_BYTES {
        Err(format!("must be at most {}", human_bytes(MAX_MEM_BYTES)))
    } else if n % usermm::PAGE_SIZE != 0 {
        Err(format!(
            "must be a multiple of {} bytes (the page size)",
            usermm::PAGE_SIZE
        ))
    } else {
        Ok(n)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_mem_arg("4G"), Ok(4 << 30));
        assert!(parse_mem_arg("0").is_err());
        assert!(parse_mem_arg("99999T").is_err());
        assert!(parse_mem_arg("abc").is_err());
        assert!(parse_mem_arg("16777217").is_err());
        assert_eq!(parse_size_arg("0"), Ok(0));
        assert_eq!(parse_size_arg("16T"), Ok(16 << 40));
        for huge in ["0xffffffffffffffff", "0xfffffffffffff000", "17T"] {
            let e = parse_size_arg(huge).unwrap_err();
            assert!(e.contains("at most 16T"), "{huge}: {e}");
        }
        assert!(parse_nonzero_size_arg("0").is_err());
    }
}
