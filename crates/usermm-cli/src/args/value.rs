//! Value parsers for clap: sizes in the kernel's `memparse` syntax, and how sizes are printed
//! back. Each returns an error message clap prints after "invalid value ... for ...", so the
//! message names the limit and the flag is named by clap.

use usermm::config::{parse_size, MAX_MEM_BYTES, MIN_MEM_BYTES};

use crate::report::format::human_bytes;

/// A size flag: `memparse` syntax, any value (usemem accepts 0).
pub fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s)
        .map_err(|_| format!("expected a size such as 4G, 512M, 0x200000 or 4096, got '{s}'"))
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
        assert!(parse_nonzero_size_arg("0").is_err());
    }
}
