//! The names of labs and of the server's instances: a lab's unguessable id and the instance
//! that owns it, past one machine.

use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::OnceLock;

use serde::Serialize;
use uuid::Uuid;

/// `value` reduced to 128 bits by SipHash under two keys drawn at random when the process
/// starts: the same within the process, different in the next, and not to be foreseen by anyone
/// without those keys. The ledger's fingerprints of keys and the keys a lab makes for its own
/// messages are both made so.
pub fn secret_hash(value: impl Hash) -> u128 {
    static HASHERS: OnceLock<[RandomState; 2]> = OnceLock::new();
    let [a, b] = HASHERS.get_or_init(|| [RandomState::new(), RandomState::new()]);
    u128::from(a.hash_one(&value)) << 64 | u128::from(b.hash_one(&value))
}

/// The name of one instance of the server, past one machine (Fly's machine id, say):
/// 1 to 32 lowercase letters and digits, kept inline so a lab id stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Instance {
    bytes: [u8; 32],
    len: u8,
}

impl Instance {
    pub fn parse(raw: &str) -> Result<Instance, String> {
        let fits = (1..=32).contains(&raw.len())
            && raw.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !fits {
            return Err(format!("'{raw}' is not an instance id: 1 to 32 lowercase letters and digits"));
        }
        let mut bytes = [0u8; 32];
        bytes[..raw.len()].copy_from_slice(raw.as_bytes());
        Ok(Instance { bytes, len: raw.len() as u8 })
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).expect("an instance id is ASCII")
    }
}

impl fmt::Debug for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A lab's id: a random UUID v4, so a lab's URL cannot be guessed from another's, followed,
/// past one machine, by the instance that owns it: `<uuid>-<instance>`. Ids without an
/// instance were made before instances had names, and are served wherever they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LabId {
    uuid: Uuid,
    instance: Option<Instance>,
}

impl LabId {
    /// Only the canonical spelling (lowercase, hyphenated) names a lab: one lab, one URL, so
    /// the same lab cannot be opened, cached or rate-limited under several names.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let refuse = || {
            let shown: String = raw.chars().take(64).collect();
            format!(
                "'{shown}' is not a lab id: lab ids are UUIDs written in lowercase with hyphens, \
                 like 6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a, with the instance that owns the lab \
                 after one more hyphen when there are several"
            )
        };
        let (uuid, instance) = match raw.get(36..) {
            Some("") | None => (raw, None),
            Some(rest) => (&raw[..36], Some(rest.strip_prefix('-').ok_or_else(refuse)?)),
        };
        let uuid =
            Uuid::try_parse(uuid).ok().filter(|id| id.hyphenated().to_string() == uuid).ok_or_else(refuse)?;
        let instance = instance.map(Instance::parse).transpose().map_err(|_| refuse())?;
        Ok(LabId { uuid, instance })
    }

    /// The instance that owns the lab, if it was made by a named one.
    pub fn instance(&self) -> Option<Instance> {
        self.instance
    }
}

impl fmt::Display for LabId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.instance {
            Some(instance) => write!(f, "{}-{instance}", self.uuid),
            None => self.uuid.fmt(f),
        }
    }
}

impl Serialize for LabId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for LabId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        LabId::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl LabId {
    /// A fresh, unguessable id for a lab made by `instance`.
    pub fn new(instance: Option<Instance>) -> LabId {
        LabId { uuid: Uuid::new_v4(), instance }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lab_id_has_one_spelling() {
        let canonical = "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a";
        assert_eq!(LabId::parse(canonical).unwrap().to_string(), canonical);
        for other in [
            "6F1C1C3E-9D5E-4A55-8F4A-3B3C2D1E0F9A",
            "{6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a}",
            "urn:uuid:6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a",
            "6f1c1c3e9d5e4a558f4a3b3c2d1e0f9a",
            " 6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a",
        ] {
            let refused = LabId::parse(other).unwrap_err();
            assert!(refused.contains("lowercase with hyphens"), "{other}: {refused}");
        }
    }

    #[test]
    fn a_lab_id_names_its_instance_after_the_uuid() {
        let plain = LabId::parse("6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a").unwrap();
        assert_eq!(plain.instance(), None);
        let owned = LabId::parse("6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a-3d8d9e2b7d5e89").unwrap();
        assert_eq!(owned.instance().unwrap().as_str(), "3d8d9e2b7d5e89");
        assert_eq!(owned.to_string(), "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a-3d8d9e2b7d5e89");
        for bad in [
            "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a-",
            "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a_abc",
            "6f1c1c3e-9d5e-4a55-8f4a-3b3c2d1e0f9a-UPPER",
            "6F1C1C3E-9D5E-4A55-8F4A-3B3C2D1E0F9A",
        ] {
            assert!(LabId::parse(bad).is_err(), "{bad}");
        }
        let json = serde_json::to_string(&owned).unwrap();
        assert_eq!(serde_json::from_str::<LabId>(&json).unwrap(), owned);
    }
}
