//! [`Report`]: the figures a subcommand measured, in the order it measured them.
//!
//! Printed one `name: value` per line, or as one JSON object with `--json`.
//! Each kind of figure has a fixed format (rates without decimals,
//! milliseconds with two, ratios with three), and the JSON numbers carry the
//! same digits as the text, so the two outputs never disagree.

use std::fmt::Write as _;
use std::time::Duration;

/// One measured value and how it is formatted.
#[derive(Debug, Clone, PartialEq)]
pub enum Figure {
    /// A count, printed as an integer.
    Count(u64),
    /// A rate per second, printed without decimals.
    PerSecond(f64),
    /// Milliseconds, printed with two decimals.
    Millis(f64),
    /// A dimensionless ratio, printed with three decimals.
    Ratio(f64),
    /// Text, e.g. a seed or a Redis version; a JSON string.
    Text(String),
}

impl Figure {
    /// The value as printed. Non-finite numbers print as `NaN`/`inf` in text
    /// (and as `null` in JSON).
    pub fn formatted(&self) -> String {
        match self {
            Figure::Count(n) => n.to_string(),
            Figure::PerSecond(rate) => format!("{rate:.0}"),
            Figure::Millis(ms) => format!("{ms:.2}"),
            Figure::Ratio(ratio) => format!("{ratio:.3}"),
            Figure::Text(text) => text.clone(),
        }
    }

    /// The value as a JSON value: the same digits as [`Figure::formatted`].
    fn json(&self) -> String {
        match self {
            Figure::Text(text) => json_string(text),
            Figure::PerSecond(x) | Figure::Millis(x) | Figure::Ratio(x) if !x.is_finite() => {
                "null".to_owned()
            }
            number => number.formatted(),
        }
    }
}

/// The figures of one run, in insertion order, and whether it passed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    figures: Vec<(String, Figure)>,
    failures: Vec<String>,
}

impl Report {
    /// An empty report.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `figure` under `name`, or replaces the figure already there
    /// (keeping its position), so a name never appears twice.
    pub fn push(&mut self, name: impl Into<String>, figure: Figure) -> &mut Self {
        let name = name.into();
        match self.figures.iter_mut().find(|(existing, _)| *existing == name) {
            Some((_, slot)) => *slot = figure,
            None => self.figures.push((name, figure)),
        }
        self
    }

    /// Adds a [`Figure::Count`].
    pub fn count(&mut self, name: impl Into<String>, value: u64) -> &mut Self {
        self.push(name, Figure::Count(value))
    }

    /// Adds a [`Figure::PerSecond`].
    pub fn per_second(&mut self, name: impl Into<String>, value: f64) -> &mut Self {
        self.push(name, Figure::PerSecond(value))
    }

    /// Adds a duration as [`Figure::Millis`].
    pub fn millis(&mut self, name: impl Into<String>, value: Duration) -> &mut Self {
        self.push(name, Figure::Millis(value.as_secs_f64() * 1_000.0))
    }

    /// Adds a [`Figure::Ratio`].
    pub fn ratio(&mut self, name: impl Into<String>, value: f64) -> &mut Self {
        self.push(name, Figure::Ratio(value))
    }

    /// Adds a [`Figure::Text`].
    pub fn text(&mut self, name: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.push(name, Figure::Text(value.into()))
    }

    /// The figure named `name`.
    pub fn get(&self, name: &str) -> Option<&Figure> {
        self.figures
            .iter()
            .find_map(|(existing, figure)| (existing == name).then_some(figure))
    }

    /// The figures, in order.
    pub fn figures(&self) -> impl Iterator<Item = (&str, &Figure)> {
        self.figures.iter().map(|(name, figure)| (name.as_str(), figure))
    }

    /// Marks the run as failed because of `reason` (a checker found a
    /// violation): the figures are still printed, then the reasons on
    /// stderr, and the program exits non-zero.
    pub fn fail(&mut self, reason: impl Into<String>) -> &mut Self {
        self.failures.push(reason.into());
        self
    }

    /// Why the run failed; empty when it passed.
    pub fn failures(&self) -> &[String] {
        &self.failures
    }

    /// One `name: value` line per figure.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for (name, figure) in &self.figures {
            // Writing to a String cannot fail.
            let _ = writeln!(text, "{name}: {}", figure.formatted());
        }
        text
    }

    /// One JSON object on one line, keys in the report's order.
    pub fn to_json(&self) -> String {
        let members: Vec<String> = self
            .figures
            .iter()
            .map(|(name, figure)| format!("{}:{}", json_string(name), figure.json()))
            .collect();
        format!("{{{}}}\n", members.join(","))
    }
}

/// `count` events over `elapsed`, per second (0 when no time passed).
pub fn rate(count: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

fn json_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        let mut report = Report::new();
        report
            .per_second("baseline_msgs_per_s", 123_456.7)
            .count("events", 2_000)
            .millis("elapsed_ms", Duration::from_micros(16_204_567))
            .ratio("ratio", 0.83333)
            .text("seed", "a \"quoted\" seed");
        report
    }

    #[test]
    fn text_has_one_line_per_figure_in_order_with_fixed_formats() {
        assert_eq!(
            sample().to_text(),
            "baseline_msgs_per_s: 123457\nevents: 2000\nelapsed_ms: 16204.57\nratio: 0.833\n\
             seed: a \"quoted\" seed\n"
        );
    }

    #[test]
    fn json_keeps_the_order_and_the_digits_of_the_text() {
        let json = sample().to_json();
        assert_eq!(
            json,
            "{\"baseline_msgs_per_s\":123457,\"events\":2000,\"elapsed_ms\":16204.57,\"ratio\":0.833,\
             \"seed\":\"a \\\"quoted\\\" seed\"}\n"
        );
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["events"], 2000);
        assert_eq!(parsed["seed"], "a \"quoted\" seed");
    }

    #[test]
    fn a_repeated_name_replaces_the_figure_in_place() {
        let mut report = sample();
        report.count("events", 7);
        assert_eq!(report.get("events"), Some(&Figure::Count(7)));
        let names: Vec<&str> = report.figures().map(|(name, _)| name).collect();
        assert_eq!(
            names,
            ["baseline_msgs_per_s", "events", "elapsed_ms", "ratio", "seed"]
        );
    }

    #[test]
    fn non_finite_numbers_are_null_in_json() {
        let mut report = Report::new();
        report.ratio("ratio", f64::NAN).per_second("rate", f64::INFINITY);
        assert_eq!(report.to_json(), "{\"ratio\":null,\"rate\":null}\n");
        let parsed: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert!(parsed["ratio"].is_null());
    }

    #[test]
    fn failures_are_kept_apart_from_the_figures() {
        let mut report = sample();
        assert!(report.failures().is_empty());
        report.fail("2 overlaps");
        assert_eq!(report.failures(), ["2 overlaps"]);
        assert_eq!(report.to_text(), sample().to_text());
    }

    #[test]
    fn rate_is_events_per_second_and_zero_without_time() {
        assert_eq!(rate(500, Duration::from_millis(250)), 2_000.0);
        assert_eq!(rate(500, Duration::ZERO), 0.0);
    }
}
