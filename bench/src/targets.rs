//! The ratios' targets, from `bench/targets.toml` (built into the binary, so a run from any
//! directory reads the same file), and the checks of a run against them.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::report::{Table, round};

/// The targets file, as built into the binary.
const TARGETS_TOML: &str = include_str!("../targets.toml");

/// The prefix of ratios measured on a PostgreSQL-dialect database.
pub(crate) const PG_PREFIX: &str = "pg_";

/// Exit code of a gate run that missed a target (behaviour problems exit with 1).
pub(crate) const GATE_FAILED_EXIT: i32 = 3;

/// Everything `targets.toml` says.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Targets {
    pub(crate) gate: GateSettings,
    pub(crate) ratios: BTreeMap<String, Target>,
}

/// The gate's settings.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GateSettings {
    /// How far a gated ratio may miss its target, as a fraction of the target.
    pub(crate) noise: f64,
}

/// One ratio's target.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Target {
    /// The ratio must be at least this.
    pub(crate) min: Option<f64>,
    /// The ratio must be at most this.
    pub(crate) max: Option<f64>,
    /// Whether the gate measures and checks it.
    #[serde(default)]
    pub(crate) gate: bool,
    /// Where the target comes from.
    #[serde(default)]
    pub(crate) why: String,
}

/// How a measured ratio stands against its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The target is met.
    Met,
    /// Missed, but by no more than the noise margin.
    WithinNoise,
    /// Missed by more than the noise margin.
    Missed,
    /// Not measured in this run: neither meets nor misses its target, and neither passes
    /// nor fails the gate.
    NotMeasured,
}

impl Verdict {
    fn text(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::WithinNoise => "missed, within the gate's noise margin",
            Verdict::Missed => "MISSED",
            Verdict::NotMeasured => "not measured",
        }
    }
}

impl Target {
    /// `>= 0.9`, `<= 1.05`, or both.
    pub(crate) fn describe(&self) -> String {
        match (self.min, self.max) {
            (Some(min), Some(max)) => format!(">= {min} and <= {max}"),
            (Some(min), None) => format!(">= {min}"),
            (None, Some(max)) => format!("<= {max}"),
            (None, None) => String::new(),
        }
    }

    /// Where the gate fails: the target widened by the noise margin.
    pub(crate) fn gate_bound(&self, noise: f64) -> String {
        match (self.min, self.max) {
            (Some(min), Some(max)) => format!(
                "below {} or above {}",
                round(min * (1.0 - noise), 3),
                round(max * (1.0 + noise), 3)
            ),
            (Some(min), None) => format!("below {}", round(min * (1.0 - noise), 3)),
            (None, Some(max)) => format!("above {}", round(max * (1.0 + noise), 3)),
            (None, None) => "never".to_owned(),
        }
    }

    /// How `value` stands against this target with a noise margin of `noise`. A value that is
    /// not a finite number was not measured.
    pub(crate) fn verdict(&self, value: f64, noise: f64) -> Verdict {
        if !value.is_finite() {
            return Verdict::NotMeasured;
        }
        let low = self.min.map_or(Verdict::Met, |min| {
            if value >= min {
                Verdict::Met
            } else if value >= min * (1.0 - noise) {
                Verdict::WithinNoise
            } else {
                Verdict::Missed
            }
        });
        let high = self.max.map_or(Verdict::Met, |max| {
            if value <= max {
                Verdict::Met
            } else if value <= max * (1.0 + noise) {
                Verdict::WithinNoise
            } else {
                Verdict::Missed
            }
        });
        match (low, high) {
            (Verdict::Missed, _) | (_, Verdict::Missed) => Verdict::Missed,
            (Verdict::WithinNoise, _) | (_, Verdict::WithinNoise) => Verdict::WithinNoise,
            _ => Verdict::Met,
        }
    }
}

impl Targets {
    /// The targets built into this binary.
    pub(crate) fn load() -> Result<Self, String> {
        Self::parse(TARGETS_TOML)
    }

    fn parse(text: &str) -> Result<Self, String> {
        let targets: Self = toml::from_str(text).map_err(|e| format!("bench/targets.toml: {e}"))?;
        if !(0.0..1.0).contains(&targets.gate.noise) {
            return Err(format!(
                "bench/targets.toml: gate.noise must be in [0, 1), not {}",
                targets.gate.noise
            ));
        }
        for (name, target) in &targets.ratios {
            if target.min.is_none() && target.max.is_none() {
                return Err(format!(
                    "bench/targets.toml: ratios.{name} has neither min nor max"
                ));
            }
            if let Some(base) = name.strip_prefix(PG_PREFIX)
                && !targets.ratios.contains_key(base)
            {
                return Err(format!(
                    "bench/targets.toml: ratios.{name} overrides ratios.{base}, which does not \
                     exist"
                ));
            }
        }
        Ok(targets)
    }

    /// The target of ratio `name`: its own, or for `pg_X` the target of `X`.
    pub(crate) fn get(&self, name: &str) -> Option<&Target> {
        self.ratios.get(name).or_else(|| {
            name.strip_prefix(PG_PREFIX)
                .and_then(|base| self.ratios.get(base))
        })
    }

    /// The ratios the gate run must measure: those gated in either dialect, by their GoogleSQL
    /// name (a gate run measures each in both dialects).
    pub(crate) fn gated(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self
            .ratios
            .iter()
            .filter(|(_, t)| t.gate)
            .map(|(name, _)| name.strip_prefix(PG_PREFIX).unwrap_or(name))
            .collect();
        names.sort_unstable();
        names.dedup();
        names.into_iter()
    }

    /// Every measured ratio that has a target, with its verdict (noise margin 0: a full run
    /// reports whether each target is met).
    pub(crate) fn check_all(&self, measured: &BTreeMap<String, f64>) -> Vec<Checked> {
        measured
            .iter()
            .filter_map(|(name, value)| {
                let target = self.get(name)?;
                Some(Checked {
                    name: name.clone(),
                    value: *value,
                    target: target.clone(),
                    verdict: target.verdict(*value, 0.0),
                })
            })
            .collect()
    }

    /// The gated ratios (and their `pg_` twins when measured) against their targets widened by
    /// the noise margin; a gated GoogleSQL ratio that was not measured is
    /// [`Verdict::NotMeasured`]. A `pg_` twin is checked against its own table when it has one
    /// (its `gate` included), else against the GoogleSQL ratio's.
    pub(crate) fn check_gate(&self, measured: &BTreeMap<String, f64>) -> Vec<Checked> {
        let noise = self.gate.noise;
        let mut checked = Vec::new();
        for base in self.ratios.keys().filter(|n| !n.starts_with(PG_PREFIX)) {
            let pg = format!("{PG_PREFIX}{base}");
            for (name, listed_unmeasured) in [(base.clone(), true), (pg, false)] {
                let Some(target) = self.get(&name).filter(|t| t.gate) else {
                    continue;
                };
                let value = measured.get(&name).copied();
                if value.is_none() && !listed_unmeasured {
                    continue;
                }
                let value = value.unwrap_or(f64::NAN);
                checked.push(Checked {
                    verdict: target.verdict(value, noise),
                    name,
                    value,
                    target: target.clone(),
                });
            }
        }
        checked
    }
}

/// What the gate decides from its checked ratios.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GateDecision {
    /// Every measured gated ratio is within its target's noise margin (ratios that were not
    /// measured count neither way).
    Passed,
    /// These ratios missed their targets by more than the noise margin.
    Failed(Vec<String>),
    /// None of the gated ratios was measured: the run decides nothing (an error of the run).
    NothingMeasured,
}

/// The gate's decision: it fails when a measured ratio missed its target beyond the noise
/// margin; a ratio that was not measured neither passes nor fails it.
pub(crate) fn gate_decision(checked: &[Checked]) -> GateDecision {
    let missed: Vec<String> = checked
        .iter()
        .filter(|c| c.verdict == Verdict::Missed)
        .map(|c| c.name.clone())
        .collect();
    if !missed.is_empty() {
        GateDecision::Failed(missed)
    } else if checked.iter().all(|c| c.verdict == Verdict::NotMeasured) {
        GateDecision::NothingMeasured
    } else {
        GateDecision::Passed
    }
}

/// One ratio checked against its target.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub(crate) name: String,
    pub(crate) value: f64,
    pub(crate) target: Target,
    pub(crate) verdict: Verdict,
}

/// The printed table of checked ratios.
pub(crate) fn table(title: &str, checked: &[Checked]) -> Table {
    let mut table = Table::new(title, &["ratio", "value", "target", "verdict"]);
    for c in checked {
        let value = if c.verdict == Verdict::NotMeasured {
            "-".to_owned()
        } else {
            format!("{:.3}", c.value)
        };
        table.row(vec![
            c.name.clone(),
            value,
            c.target.describe(),
            c.verdict.text().to_owned(),
        ]);
    }
    table
}

/// `targets` in `summary.json`: each checked ratio's value, target and whether it is met
/// (`value` and `met` are `null` for a ratio that was not measured).
pub(crate) fn json(checked: &[Checked]) -> Value {
    let map: serde_json::Map<String, Value> = checked
        .iter()
        .map(|c| {
            let measured = c.verdict != Verdict::NotMeasured;
            (
                c.name.clone(),
                json!({
                    "value": measured.then_some(c.value),
                    "min": c.target.min,
                    "max": c.target.max,
                    "met": measured.then_some(c.verdict == Verdict::Met),
                }),
            )
        })
        .collect();
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(min: Option<f64>, max: Option<f64>) -> Target {
        Target {
            min,
            max,
            gate: true,
            why: String::new(),
        }
    }

    /// Each checked ratio's name and verdict, in order.
    fn verdicts(checked: &[Checked]) -> Vec<(&str, Verdict)> {
        checked
            .iter()
            .map(|c| (c.name.as_str(), c.verdict))
            .collect()
    }

    #[test]
    fn the_built_in_targets_parse_and_every_one_has_a_bound() {
        let targets = Targets::load().unwrap();
        assert!(targets.gated().count() > 0, "the gate must check something");
        for (name, t) in &targets.ratios {
            assert!(!t.why.is_empty(), "{name}: say where the target comes from");
        }
    }

    #[test]
    fn the_gate_checks_only_ratios_its_run_measures() {
        let targets = Targets::load().unwrap();
        for name in targets.gated() {
            assert!(
                crate::GATE_RATIOS.contains(&name),
                "{name} is gated but the gate run does not measure it"
            );
        }
    }

    #[test]
    fn a_minimum_is_met_then_within_noise_then_missed() {
        let t = target(Some(0.9), None);
        assert_eq!(t.verdict(0.95, 0.15), Verdict::Met);
        assert_eq!(t.verdict(0.9, 0.15), Verdict::Met);
        assert_eq!(t.verdict(0.8, 0.15), Verdict::WithinNoise);
        assert_eq!(t.verdict(0.7, 0.15), Verdict::Missed);
        assert_eq!(t.verdict(f64::NAN, 0.15), Verdict::NotMeasured);
        assert_eq!(t.verdict(f64::INFINITY, 0.15), Verdict::NotMeasured);
    }

    #[test]
    fn a_maximum_is_met_then_within_noise_then_missed() {
        let t = target(None, Some(1.05));
        assert_eq!(t.verdict(1.0, 0.1), Verdict::Met);
        assert_eq!(t.verdict(1.1, 0.1), Verdict::WithinNoise);
        assert_eq!(t.verdict(1.2, 0.1), Verdict::Missed);
    }

    #[test]
    fn pg_ratios_share_the_googlesql_target_and_are_gated_when_measured() {
        let targets = Targets::parse(
            "[gate]\nnoise = 0.1\n[ratios.a]\nmin = 1.0\ngate = true\nwhy = \"x\"\n",
        )
        .unwrap();
        assert_eq!(targets.get("pg_a").and_then(|t| t.min), Some(1.0));
        let measured = BTreeMap::from([("a".to_owned(), 1.2), ("pg_a".to_owned(), 0.5)]);
        let checked = targets.check_gate(&measured);
        let verdicts = verdicts(&checked);
        assert_eq!(verdicts, [("a", Verdict::Met), ("pg_a", Verdict::Missed)]);
    }

    #[test]
    fn a_pg_table_of_its_own_overrides_the_googlesql_target_in_the_gate() {
        let targets = Targets::parse(
            "[gate]\nnoise = 0.1\n\
             [ratios.a]\nmin = 1.0\ngate = true\n\
             [ratios.pg_a]\nmin = 0.5\ngate = true\n\
             [ratios.b]\nmin = 1.0\ngate = true\n\
             [ratios.pg_b]\nmin = 1.0\n\
             [ratios.c]\nmin = 1.0\n\
             [ratios.pg_c]\nmin = 2.0\ngate = true\n",
        )
        .unwrap();
        assert_eq!(targets.get("pg_a").and_then(|t| t.min), Some(0.5));
        // pg_c is gated while c is not: the gate run must still measure c (in both dialects).
        assert_eq!(targets.gated().collect::<Vec<_>>(), ["a", "b", "c"]);
        let measured = BTreeMap::from([
            ("a".to_owned(), 1.0),
            // Below a's 1.0 but above its own 0.5.
            ("pg_a".to_owned(), 0.6),
            ("b".to_owned(), 1.0),
            // Not gated in PostgreSQL: not checked at all.
            ("pg_b".to_owned(), 0.1),
            // Not gated in GoogleSQL.
            ("c".to_owned(), 0.1),
            ("pg_c".to_owned(), 1.5),
        ]);
        let checked = targets.check_gate(&measured);
        let verdicts = verdicts(&checked);
        assert_eq!(
            verdicts,
            [
                ("a", Verdict::Met),
                ("pg_a", Verdict::Met),
                ("b", Verdict::Met),
                ("pg_c", Verdict::Missed),
            ]
        );
        assert_eq!(
            gate_decision(&checked),
            GateDecision::Failed(vec!["pg_c".to_owned()])
        );
    }

    #[test]
    fn an_unmeasured_ratio_reads_as_not_measured_and_decides_nothing() {
        let targets = Targets::parse(
            "[gate]\nnoise = 0.1\n[ratios.a]\nmin = 1.0\ngate = true\n\
             [ratios.b]\nmin = 1.0\ngate = true\n",
        )
        .unwrap();
        let only_a = BTreeMap::from([("a".to_owned(), 1.2)]);
        let checked = targets.check_gate(&only_a);
        assert_eq!(checked[1].name, "b");
        assert_eq!(checked[1].verdict, Verdict::NotMeasured);
        assert!(table("t", &checked).render().contains("not measured"));
        assert_eq!(json(&checked)["b"]["met"], Value::Null);
        assert_eq!(gate_decision(&checked), GateDecision::Passed);
        // Nothing measured: the gate cannot pass.
        let none = targets.check_gate(&BTreeMap::new());
        assert_eq!(gate_decision(&none), GateDecision::NothingMeasured);
    }

    #[test]
    fn a_slowed_worker_fails_the_gate_with_the_built_in_targets() {
        // What a run with a slowed worker measures (SPANNER_QUEUES_BENCH_SLOW_HANDLER_MS=25:
        // the worker's rates fall, the baselines' do not).
        let targets = Targets::load().unwrap();
        let slowed = BTreeMap::from([
            ("worker_vs_handwritten_1x1".to_owned(), 0.45),
            ("worker_vs_handwritten_1x4".to_owned(), 1.1),
            ("worker_1x4_vs_1x1".to_owned(), 2.5),
            ("worker_1x1_vs_sequential_txn".to_owned(), 0.2),
            ("worker_vs_polling_4_commits".to_owned(), 2.0),
        ]);
        match gate_decision(&targets.check_gate(&slowed)) {
            GateDecision::Failed(names) => assert_eq!(
                names,
                ["worker_1x1_vs_sequential_txn", "worker_vs_handwritten_1x1"]
            ),
            other => panic!("the gate must fail, not {other:?}"),
        }
        let healthy = BTreeMap::from([
            ("worker_vs_handwritten_1x1".to_owned(), 0.8),
            ("worker_vs_handwritten_1x4".to_owned(), 1.1),
            ("worker_1x4_vs_1x1".to_owned(), 1.2),
            ("worker_1x1_vs_sequential_txn".to_owned(), 0.45),
            ("worker_vs_polling_4_commits".to_owned(), 2.0),
            // Not gated: its value decides nothing.
            ("worker_4x4_vs_1x1".to_owned(), 0.1),
        ]);
        assert_eq!(
            gate_decision(&targets.check_gate(&healthy)),
            GateDecision::Passed
        );
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let no_bound = Targets::parse("[gate]\nnoise = 0.1\n[ratios.a]\ngate = true\n");
        assert!(no_bound.unwrap_err().contains("neither min nor max"));
        let bad_noise = Targets::parse("[gate]\nnoise = 1.5\n[ratios]\n");
        assert!(bad_noise.unwrap_err().contains("gate.noise"));
        let typo = Targets::parse("[gate]\nnoise = 0.1\n[ratios.a]\nminn = 1.0\n");
        assert!(typo.unwrap_err().contains("minn"));
        let orphan = Targets::parse("[gate]\nnoise = 0.1\n[ratios.pg_a]\nmin = 1.0\n");
        assert!(
            orphan
                .unwrap_err()
                .contains("ratios.a, which does not exist")
        );
    }
}
