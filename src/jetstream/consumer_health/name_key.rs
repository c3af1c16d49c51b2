//! A consumer's name as the key of its stream's map: held in the key
//! itself when it is short, as most names are, so that a consumer kept
//! across polls costs no allocation of its own for its name (one of the
//! allocator's smallest blocks, 32 bytes, for a name of a few bytes).

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// The longest name held in the key itself.
const INLINE: usize = 22;

/// A name, in the key (up to [`INLINE`] bytes) or in a box of its own.
/// Hashed and compared as the `str` it holds, so a map keyed by it is
/// looked up by `&str`.
#[derive(Debug, Clone)]
pub(crate) enum NameKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<str>),
}

impl NameKey {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            NameKey::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).expect("copied from a str")
            }
            NameKey::Boxed(name) => name,
        }
    }
}

impl From<&str> for NameKey {
    fn from(name: &str) -> NameKey {
        if name.len() > INLINE {
            return NameKey::Boxed(name.into());
        }
        let mut bytes = [0; INLINE];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        NameKey::Inline {
            len: name.len() as u8,
            bytes,
        }
    }
}

impl Borrow<str> for NameKey {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Hash for NameKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq for NameKey {
    fn eq(&self, other: &NameKey) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for NameKey {}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn short_names_are_held_in_the_key_and_found_by_str() {
        assert_eq!(std::mem::size_of::<NameKey>(), 24);
        let long = "a-consumer-name-longer-than-the-key";
        let names = [
            "",
            "C7",
            "exactly-22-bytes-long!",
            "exactly-23-bytes-long!!",
            long,
        ];
        let map: HashMap<NameKey, usize> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (NameKey::from(*n), i))
            .collect();
        for (i, n) in names.iter().enumerate() {
            assert_eq!(map.get(*n), Some(&i), "{n}");
            assert_eq!(NameKey::from(*n).as_str(), *n);
        }
        assert!(matches!(
            NameKey::from("exactly-22-bytes-long!"),
            NameKey::Inline { .. }
        ));
        assert!(matches!(
            NameKey::from("exactly-23-bytes-long!!"),
            NameKey::Boxed(_)
        ));
        assert!(matches!(NameKey::from(long), NameKey::Boxed(_)));
        assert_eq!(map.get("C8"), None);
    }
}
