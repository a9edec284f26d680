//! Sizes written by people, read the same way everywhere: the CLI's flags
//! and the host defaults' environment variables. The grammar is on
//! [`parse_mib`].

/// Why a text is not a size in MiB; the message quotes the text and says
/// what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseSizeError(String);

/// A size in MiB, as `--memory`, `--disk` and the `BURROW_DEFAULT_MEMORY`
/// variable take it: a bare number is MiB
/// (`1024`), else a number with a binary unit, in any case: `K`/`KB`/`KiB`,
/// `M`/`MB`/`MiB`, `G`/`GB`/`GiB`, `T`/`TB`/`TiB` (`512M`, `4G`, `1.5g`;
/// every unit is a power of 1024, as docker reads them). The size must be a
/// whole, non-zero number of MiB. A bad size is [`ParseSizeError`],
/// whose message quotes the text and says what is accepted.
pub fn parse_mib(text: &str) -> Result<u64, ParseSizeError> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    // The size in KiB per unit of `number`.
    let kib_per_unit: u128 = match unit.to_ascii_lowercase().as_str() {
        "k" | "kb" | "kib" | "ki" => 1,
        "" | "m" | "mb" | "mib" | "mi" => 1 << 10,
        "g" | "gb" | "gib" | "gi" => 1 << 20,
        "t" | "tb" | "tib" | "ti" => 1 << 30,
        _ => {
            return Err(ParseSizeError(format!(
                "{text:?} is not a size: a number of MiB (1024) or a number with \
                 a unit (512M, 4G)"
            )))
        }
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() || frac.contains('.') || frac.len() > 9 {
        return Err(ParseSizeError(format!(
            "{text:?} is not a size: the number is not valid"
        )));
    }
    let digits = |d: &str| -> Result<u128, ParseSizeError> {
        if d.is_empty() {
            Ok(0)
        } else {
            d.parse::<u128>().map_err(|_| {
                ParseSizeError(format!("{text:?} is not a size: the number is too large"))
            })
        }
    };
    let scale = 10u128.pow(frac.len() as u32);
    // Exactly: (whole + frac / scale) * kib_per_unit KiB.
    let scaled = digits(whole)?
        .checked_mul(scale)
        .and_then(|w| w.checked_add(digits(frac).ok()?))
        .and_then(|n| n.checked_mul(kib_per_unit))
        .ok_or_else(|| ParseSizeError(format!("{text:?} is too large")))?;
    let per_mib = scale * 1024;
    if scaled % per_mib != 0 {
        return Err(ParseSizeError(format!(
            "{text:?} is not a whole number of MiB"
        )));
    }
    match u64::try_from(scaled / per_mib) {
        Ok(0) => Err(ParseSizeError(format!(
            "{text:?}: the size must be at least 1 MiB"
        ))),
        Ok(mib) => Ok(mib),
        Err(_) => Err(ParseSizeError(format!("{text:?} is too large"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_take_units() {
        for (text, mib) in [
            ("1024", 1024),
            ("512M", 512),
            ("512m", 512),
            ("512MiB", 512),
            ("512MB", 512),
            ("4G", 4096),
            ("4g", 4096),
            ("4GiB", 4096),
            ("1.5G", 1536),
            ("0.5g", 512),
            ("2048K", 2),
            ("1T", 1 << 20),
            (" 64 ", 64),
        ] {
            assert_eq!(parse_mib(text).ok(), Some(mib), "{text}");
        }
        for bad in [
            "",
            "0",
            "0G",
            "-1",
            "4X",
            "4 G",
            "G",
            ".",
            "1.2.3G",
            "1536K",
            "0.1G",
            "1e3",
            "4GBs",
            "99999999999999999999999999999999999999999T",
        ] {
            assert!(parse_mib(bad).is_err(), "{bad:?}");
        }
    }
}
