//! The `.attr` file of an object: its policy tag and user attributes, versioned.

use maat_osd::StoreError;
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;

#[derive(Serialize, Deserialize, Default)]
pub(super) struct StoredAttributes {
    pub(super) policy_tag: u32,
    pub(super) user: Vec<(String, Vec<u8>)>,
}

/// `.attr` files start with this marker and a version byte. Format 0 had neither; its
/// files start with a postcard varint `u32`, which is never five `0xFF` bytes, so the two
/// cannot be confused.
const ATTR_MAGIC: [u8; 5] = [0xFF; 5];
/// The `.attr` version written now.
const ATTR_VERSION: u8 = 1;

fn invalid(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(std::io::Error::new(ErrorKind::InvalidData, e.to_string()))
}

impl StoredAttributes {
    pub(super) fn encode(&self) -> Result<Vec<u8>, StoreError> {
        let mut out = ATTR_MAGIC.to_vec();
        out.push(ATTR_VERSION);
        out.extend_from_slice(&postcard::to_stdvec(self).map_err(invalid)?);
        Ok(out)
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        match bytes.strip_prefix(&ATTR_MAGIC[..]) {
            Some([1, body @ ..]) => postcard::from_bytes(body).map_err(invalid),
            Some([v, ..]) => Err(invalid(format!(
                "attribute file version {v} is newer than this OSD knows ({ATTR_VERSION})"
            ))),
            Some([]) => Err(invalid("empty attribute file")),
            // Format 0: plain postcard.
            None => postcard::from_bytes(bytes).map_err(invalid),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn format_0_attribute_files_still_load_and_new_ones_carry_a_version() {
        let a = StoredAttributes {
            policy_tag: 7,
            user: vec![("k".into(), vec![1, 2])],
        };
        let v0 = postcard::to_stdvec(&a).unwrap();
        let back = StoredAttributes::decode(&v0).unwrap();
        assert_eq!(
            (back.policy_tag, back.user),
            (7, vec![("k".to_string(), vec![1, 2])])
        );
        let v1 = a.encode().unwrap();
        assert_eq!(v1.get(..6), Some(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 1][..]));
        assert_eq!(StoredAttributes::decode(&v1).unwrap().policy_tag, 7);
        let mut v9 = v1.clone();
        if let Some(b) = v9.get_mut(5) {
            *b = 9;
        }
        assert!(StoredAttributes::decode(&v9).is_err());
    }
}
