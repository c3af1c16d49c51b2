//! Parses durations written the way operators write them: `500ms`, `5s`, `2m`, `7d`.

use std::time::Duration;

const MAX_SECONDS: f64 = 10.0 * 365.0 * 86_400.0;

/// Parses `<number><unit>` with unit `ms`, `s`, `m`, `h` or `d` (a bare number means seconds).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (write e.g. 500ms, 5s, 2m)"))?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        _ => {
            return Err(format!(
                "'{text}': unknown unit '{unit}' (use ms, s, m or h)"
            ))
        }
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("'{text}': a duration must be greater than zero"));
    }
    // Far beyond any sensible setting, and short of what timers can add to
    // the current time without overflowing.
    if secs > MAX_SECONDS {
        return Err(format!("'{text}' is too long (at most 10 years)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration as `--timeout` takes it, or zero (`0`, `0s`): the consumer
/// status window, where zero means off.
pub(crate) fn parse_window(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if !digits.is_empty() && digits.parse::<f64>() == Ok(0.0) {
        return parse_duration(&format!("1{}", &t[digits.len()..])).map(|_| Duration::ZERO);
    }
    parse_duration(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_rejects_garbage() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("99999999999999999999s").is_err());
        assert!(parse_duration("3651d").is_err());
    }
}
