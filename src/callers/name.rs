//! How an outside caller is named: by the `X-Client-Name` it sends, else by its `User-Agent`,
//! else by its address. Only the name it gives itself is checked strictly (it is what the
//! page and the report card show as the caller's own word); a `User-Agent` is cut and cleaned.

/// The most characters a caller's name may have.
pub const MAX_NAME_CHARS: usize = 64;

/// A caller's name, as the page and the report card show it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallerName(String);

impl CallerName {
    /// Names a caller from what it sent. `client_name` is the raw `X-Client-Name` value,
    /// refused (with the reason) when it is empty, longer than `MAX_NAME_CHARS` or holds a
    /// character that shows as nothing or as a gap (`unseen`); `user_agent` is used, cleaned
    /// (of those) and cut, when no name is given.
    pub fn from_request(
        client_name: Option<&[u8]>,
        user_agent: Option<&[u8]>,
        address: Option<&str>,
    ) -> Result<CallerName, String> {
        if let Some(raw) = client_name {
            let name = std::str::from_utf8(raw).map_err(|_| "X-Client-Name must be UTF-8".to_owned())?;
            if let Some(hidden) = unseen_in(name) {
                return Err(format!(
                    "X-Client-Name must not hold control, invisible, blank, separator or \
                     text-direction characters (it holds U+{:04X}): such a name can show as \
                     another caller's; send plain text, with plain spaces",
                    u32::from(hidden)
                ));
            }
            let name = name.trim();
            if name.is_empty() {
                return Err("X-Client-Name must not be empty".into());
            }
            if name.chars().count() > MAX_NAME_CHARS {
                return Err(format!("X-Client-Name must be at most {MAX_NAME_CHARS} characters"));
            }
            return Ok(CallerName(name.to_owned()));
        }
        let agent = user_agent
            .map(String::from_utf8_lossy)
            .map(|agent| {
                let shown = agent.chars().filter(|&c| c == ' ' || !unseen(c));
                shown.take(MAX_NAME_CHARS).collect::<String>()
            })
            .map(|agent| agent.trim().to_owned())
            .filter(|agent| !agent.is_empty());
        Ok(CallerName(agent.or_else(|| address.map(str::to_owned)).unwrap_or_else(|| "unknown".into())))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The first character of `name` that a shown name may not hold (`unseen`); the plain space
/// (U+0020) is the one gap a name may have.
pub fn unseen_in(name: &str) -> Option<char> {
    name.chars().find(|&c| c != ' ' && unseen(c))
}

/// Characters that show as nothing, as a gap or not as themselves, so that "billing" and
/// "bil\u{200B}ling" or "bil\u{3164}ling" would look alike (Unicode TR 36, "Unicode Security
/// Considerations"; UTS 39 leaves them out of identifiers), by their Unicode properties:
/// `Default_Ignorable_Code_Point` (zero-width ones, joiners, U+034F, the Hangul fillers,
/// variation selectors, tags), `White_Space` and the separators (`Z`: U+00A0, U+2028,
/// U+3000, ...), controls (`Cc`) and format characters (`Cf`: bidi overrides and isolates
/// such as U+202E). One more by name: U+2800 BRAILLE PATTERN BLANK, a symbol (`So`) to the
/// properties, which Unicode's chart notes is shown as a blank cell.
pub fn unseen(c: char) -> bool {
    let ranges = &*UNSEEN;
    let i = ranges.partition_point(|&(_, end)| end < c);
    ranges.get(i).is_some_and(|&(start, _)| start <= c)
}

/// The ranges `unseen` holds, sorted, read from regex-syntax's tables of the properties
/// (Unicode 16) once.
static UNSEEN: std::sync::LazyLock<Vec<(char, char)>> = std::sync::LazyLock::new(|| {
    use regex_syntax::hir::{Class, HirKind};
    const PROPERTIES: &str = r"[\p{Default_Ignorable_Code_Point}\p{White_Space}\p{Z}\p{Cc}\p{Cf}\x{2800}]";
    let hir = regex_syntax::Parser::new().parse(PROPERTIES).expect("the properties are known");
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => {
            class.ranges().iter().map(|r| (r.start(), r.end())).collect()
        }
        other => unreachable!("a class of characters, not {other:?}"),
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_it_gives_comes_first_then_its_agent_then_its_address() {
        let named = CallerName::from_request(Some(b"billing"), Some(b"curl/8"), Some("10.0.0.1")).unwrap();
        assert_eq!(named.as_str(), "billing");
        let agent = CallerName::from_request(None, Some(b"curl/8.5.0"), Some("10.0.0.1")).unwrap();
        assert_eq!(agent.as_str(), "curl/8.5.0");
        let address = CallerName::from_request(None, None, Some("10.0.0.1")).unwrap();
        assert_eq!(address.as_str(), "10.0.0.1");
    }

    #[test]
    fn a_name_too_long_or_with_control_characters_is_refused() {
        let long = "x".repeat(65);
        assert!(CallerName::from_request(Some(long.as_bytes()), None, None).unwrap_err().contains("64"));
        assert!(
            CallerName::from_request(Some("é".repeat(64).as_bytes()), None, None).is_ok(),
            "characters, not bytes"
        );
        assert!(CallerName::from_request(Some(b"a\tb"), None, None).is_err());
        assert!(CallerName::from_request(Some("a\u{85}b".as_bytes()), None, None).is_err());
        assert!(CallerName::from_request(Some(b"  "), None, None).is_err());
        for hidden in ['\u{202E}', '\u{2067}', '\u{200B}', '\u{2060}', '\u{FEFF}', '\u{AD}', '\u{E0041}'] {
            let name = format!("bill{hidden}ing");
            let refused = CallerName::from_request(Some(name.as_bytes()), None, None).unwrap_err();
            assert!(refused.contains(&format!("U+{:04X}", u32::from(hidden))), "{refused}");
        }
        // Issue 61: default ignorables (U+034F, U+115F, U+3164), a blank (U+2800) and a line
        // separator (U+2028) read as nothing, or as a space, and were kept.
        for unseen in
            ['\u{34F}', '\u{115F}', '\u{3164}', '\u{2800}', '\u{2028}', '\u{202E}', '\u{A0}', '\u{3000}']
        {
            let name = format!("Z{unseen}W");
            let refused = CallerName::from_request(Some(name.as_bytes()), None, None).unwrap_err();
            assert!(refused.contains(&format!("U+{:04X}", u32::from(unseen))), "{refused}");
        }
        assert!(CallerName::from_request(Some("caf\u{e9} \u{4e2d}".as_bytes()), None, None).is_ok());
        let agent = CallerName::from_request(None, Some("cu\u{202E}rl/8".as_bytes()), None).unwrap();
        assert_eq!(agent.as_str(), "curl/8", "a User-Agent is cleaned of them");
        let agent = "y".repeat(200);
        let cut = CallerName::from_request(None, Some(agent.as_bytes()), None).unwrap();
        assert_eq!(cut.as_str().len(), 64, "a long User-Agent is cut, not refused");
    }
}
