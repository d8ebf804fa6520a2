//! A setting's unusable value, naming its field as the page's forms name it
//! (`policy.timeout_ms`, `downstream.capacity`), so a 422 can say which input to fix.
//! A leaf: the settings' own modules return it.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The field, dotted from its settings' name.
    pub field: String,
    /// What is wrong with it, in words.
    pub detail: String,
}

impl Invalid {
    pub fn new(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Invalid { field: field.into(), detail: detail.into() }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for Invalid {}

/// Readers for settings that must come as JSON objects. serde's derived structs also take an
/// array, by position, and one whose fields all have defaults takes `[]` as all of them: so
/// `"admission": []` turned the admission filter on with its defaults. With these, an array
/// (or anything else) is refused as "expected an object", naming the field.
pub mod object {
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::value::MapAccessDeserializer;
    use serde::de::{MapAccess, Visitor};
    use serde::{Deserialize, Deserializer};

    /// The settings, read from an object only.
    pub fn required<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
        Object::deserialize(d).map(|Object(settings)| settings)
    }

    /// `null` (none) or the settings, read from an object only.
    pub fn or_null<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
        Option::<Object<T>>::deserialize(d).map(|o| o.map(|Object(settings)| settings))
    }

    /// As `or_null`, telling a `null` given (`Some(None)`: turn them off) from a field left out
    /// (`None`, with `#[serde(default)]`: keep them).
    pub fn present_or_null<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        or_null(d).map(Some)
    }

    struct Object<T>(T);

    impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Only<T>(PhantomData<T>);
            impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<T> {
                type Value = T;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an object of settings, {...}")
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                    T::deserialize(MapAccessDeserializer::new(map))
                }
            }
            d.deserialize_map(Only(PhantomData)).map(Object)
        }
    }
}

/// A JSON value read whole, refusing an object that names a key twice: serde_json's `Value`
/// keeps the last (RFC 8259 §4 leaves what to do to the reader), so
/// `{"size": 1, "size": 100}` read as 100 though the person may have meant either. For the
/// parts read as JSON before their type is known (a policy's protections).
pub mod unique_keys {
    use std::fmt;

    use serde::de::{Error, MapAccess, SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer};
    use serde_json::{Map, Number, Value};

    /// A list of values, each read with its keys once.
    pub fn list_or_absent<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Value>>, D::Error> {
        let listed = Option::<Vec<Unique>>::deserialize(d)?;
        Ok(listed.map(|values| values.into_iter().map(|Unique(value)| value).collect()))
    }

    struct Unique(Value);

    impl<'de> Deserialize<'de> for Unique {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(Read).map(Unique)
        }
    }

    struct Read;

    impl<'de> Visitor<'de> for Read {
        type Value = Value;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E: Error>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<Value, E> {
            Ok(Value::Number(v.into()))
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<Value, E> {
            Ok(Value::Number(v.into()))
        }
        fn visit_f64<E: Error>(self, v: f64) -> Result<Value, E> {
            Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_owned()))
        }
        fn visit_string<E: Error>(self, v: String) -> Result<Value, E> {
            Ok(Value::String(v))
        }
        fn visit_unit<E: Error>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_none<E: Error>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            Unique::deserialize(d).map(|Unique(value)| value)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut items = Vec::new();
            while let Some(Unique(item)) = seq.next_element()? {
                items.push(item);
            }
            Ok(Value::Array(items))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut object = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                let Unique(value) = map.next_value()?;
                if object.contains_key(&key) {
                    return Err(A::Error::custom(format!(
                        "duplicate field `{key}`: give each key once (the reader would keep only one)"
                    )));
                }
                object.insert(key, value);
            }
            Ok(Value::Object(object))
        }
    }
}
