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
    /// control character; `user_agent` is used, cleaned and cut, when no name is given.
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
            .map(|agent| agent.chars().filter(|c| !c.is_control()).take(MAX_NAME_CHARS).collect::<String>())
            .map(|agent| agent.trim().to_owned())
            .filter(|agent| !agent.is_empty());
        Ok(CallerName(agent.or_else(|| address.map(str::to_owned)).unwrap_or_else(|| "unknown".into())))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
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
        let agent = "y".repeat(200);
        let cut = CallerName::from_request(None, Some(agent.as_bytes()), None).unwrap();
        assert_eq!(cut.as_str().len(), 64, "a long User-Agent is cut, not refused");
    }
}
