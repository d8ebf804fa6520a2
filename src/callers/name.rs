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
    /// control character or an invisible or text-direction one (`is_format`); `user_agent` is
    /// used, cleaned (of both) and cut, when no name is given.
    pub fn from_request(
        client_name: Option<&[u8]>,
        user_agent: Option<&[u8]>,
        address: Option<&str>,
    ) -> Result<CallerName, String> {
        if let Some(raw) = client_name {
            let name = std::str::from_utf8(raw).map_err(|_| "X-Client-Name must be UTF-8".to_owned())?;
            if name.chars().any(char::is_control) {
                return Err("X-Client-Name must not hold control characters".into());
            }
            if let Some(hidden) = name.chars().find(|&c| is_format(c)) {
                return Err(format!(
                    "X-Client-Name must not hold invisible or text-direction characters (it holds \
                     U+{:04X}): such a name can show as another caller's; send plain text",
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
                let shown = agent.chars().filter(|&c| !c.is_control() && !is_format(c));
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

/// Unicode's format characters (general category Cf, Unicode 16): bidi embeddings, overrides
/// and isolates (U+202A-U+202E, U+2066-U+2069) reorder how a name is shown, and the
/// zero-width and other invisible ones (U+200B-U+200F, U+2060-U+2064, U+FEFF, U+00AD, tags)
/// hide in it, so "billing" and "bil\u{200B}ling" would look alike (Unicode TR 36, "Unicode
/// Security Considerations"). Spelled out here: the standard library has no table of them.
fn is_format(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}

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
        assert!(CallerName::from_request(Some("caf\u{e9} \u{4e2d}".as_bytes()), None, None).is_ok());
        let agent = CallerName::from_request(None, Some("cu\u{202E}rl/8".as_bytes()), None).unwrap();
        assert_eq!(agent.as_str(), "curl/8", "a User-Agent is cleaned of them");
        let agent = "y".repeat(200);
        let cut = CallerName::from_request(None, Some(agent.as_bytes()), None).unwrap();
        assert_eq!(cut.as_str().len(), 64, "a long User-Agent is cut, not refused");
    }
}
