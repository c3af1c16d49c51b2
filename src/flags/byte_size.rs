//! Parses sizes written the way operators write them: `512KiB`, `256MiB`, `1GB`.

/// Parses `<number>[unit]` with unit `B`, `KB`, `MB`, `GB` (powers of 1000)
/// or `KiB`, `MiB`, `GiB` (powers of 1024); a bare number means bytes.
pub(crate) fn parse_byte_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: u64 = num
        .parse()
        .map_err(|_| format!("'{text}' is not a size (write e.g. 256MiB, 100MB)"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "'{text}': unknown unit '{other}' (use B, KB, MB, GB, KiB, MiB or GiB)"
            ))
        }
    };
    let bytes = value
        .checked_mul(scale)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("'{text}' is too large"))?;
    if bytes == 0 {
        return Err(format!("'{text}': a size must be greater than zero"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_rejects_garbage() {
        assert_eq!(parse_byte_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_byte_size("100MB"), Ok(100_000_000));
        assert_eq!(parse_byte_size("4096"), Ok(4096));
        assert_eq!(parse_byte_size("2 KiB"), Ok(2048));
        assert!(parse_byte_size("0").is_err());
        assert!(parse_byte_size("lots").is_err());
        assert!(parse_byte_size("5 parsecs").is_err());
        assert!(parse_byte_size("99999999999999999999GiB").is_err());
    }
}
