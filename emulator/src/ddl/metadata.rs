//! Metadata.

use base64::Engine as _;
use base64::engine::general_purpose::{URL_SAFE_NO_PAD, URL_SAFE_NO_PAD_INDIFFERENT};
use serde::{Deserialize, Serialize};

use super::error::DdlError;
use super::{META_PREFIX, META_VERSION};

/// The queue metadata stored (as JSON) in the DEFAULT of [`META_COLUMN`]. Version 1.
///
/// Every field is optional and unknown fields are ignored, so later fronts can add fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(super) struct QueueMeta {
    /// `receive_mode`, when set explicitly (`"PULL"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) receive_mode: Option<String>,
    /// `disable_send`, when set explicitly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) disable_send: Option<bool>,
    /// `disable_delivery`, when set explicitly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) disable_delivery: Option<bool>,
    /// `locality_group`, when set explicitly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) locality_group: Option<String>,
    /// The parent of a non-PARENT `INTERLEAVE IN` clause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) interleave_in: Option<String>,
    /// The user columns declared `HIDDEN`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) hidden: Vec<String>,
}

/// Encodes metadata as `sqe1:` + base64url-no-pad(JSON).
pub(super) fn encode_meta(meta: &QueueMeta) -> String {
    // Serializing a struct of strings, booleans and vectors cannot fail.
    let json = serde_json::to_vec(meta).unwrap_or_default();
    format!("{META_PREFIX}{}", URL_SAFE_NO_PAD.encode(json))
}

/// Decodes metadata written by [`encode_meta`] (or by a front with the same major version).
pub(super) fn decode_meta(queue: &str, value: &str) -> Result<QueueMeta, DdlError> {
    let corrupt = |reason: String| DdlError::CorruptBackend {
        queue: queue.to_owned(),
        reason,
    };
    let rest = value
        .strip_prefix("sqe")
        .ok_or_else(|| corrupt(format!("metadata {value:?} does not start with `sqe`")))?;
    let (version, payload) = rest
        .split_once(':')
        .ok_or_else(|| corrupt("metadata has no version".to_owned()))?;
    let version: u32 = version
        .parse()
        .map_err(|_| corrupt(format!("metadata version {version:?} is not a number")))?;
    if version != META_VERSION {
        return Err(corrupt(format!(
            "metadata version {version} is not supported (this emulator reads version \
             {META_VERSION}); use the emulator version that created the queue"
        )));
    }
    let json = URL_SAFE_NO_PAD_INDIFFERENT
        .decode(payload.trim())
        .map_err(|err| corrupt(format!("metadata is not base64url: {err}")))?;
    serde_json::from_slice(&json)
        .map_err(|err| corrupt(format!("metadata is not valid JSON: {err}")))
}
