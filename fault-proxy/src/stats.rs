//! Counters of what a proxy has seen.

use std::collections::BTreeMap;

#[cfg(doc)]
use crate::FaultProxy;
use crate::plan::FaultKind;

/// Counters of what a [`FaultProxy`] has seen since it started; see [`FaultProxy::stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Client connections accepted.
    pub connections: u64,
    /// Client connections the proxy reset on purpose.
    pub connections_reset: u64,
    /// Requests received from clients, by `:path`.
    pub requests: BTreeMap<String, u64>,
    /// Requests forwarded to the upstream, by `:path`.
    pub forwarded: BTreeMap<String, u64>,
    /// Faults applied, by kind (a fault that matched but could not be applied is not counted).
    pub faults_fired: BTreeMap<FaultKind, u64>,
}

impl Stats {
    /// Requests received whose `:path` ends with `suffix`.
    pub fn requests_to(&self, suffix: &str) -> u64 {
        sum_matching(&self.requests, suffix)
    }

    /// Requests forwarded whose `:path` ends with `suffix`.
    pub fn forwarded_to(&self, suffix: &str) -> u64 {
        sum_matching(&self.forwarded, suffix)
    }

    /// How many faults of this kind were applied.
    pub fn fired(&self, kind: FaultKind) -> u64 {
        self.faults_fired.get(&kind).copied().unwrap_or(0)
    }
}

fn sum_matching(counts: &BTreeMap<String, u64>, suffix: &str) -> u64 {
    counts
        .iter()
        .filter(|(path, _)| path.ends_with(suffix))
        .map(|(_, n)| n)
        .sum()
}
