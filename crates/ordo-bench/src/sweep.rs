//! `sweep`: [`crate::throughput`] over several key counts, and the ratio to
//! the plain consumer group against keys as a plot.
//!
//! For each round of `--rounds` and each key count of `--keys`, one
//! `throughput` run with one instance (its baseline drained in the same run,
//! so every ratio compares two drains of the same minute). Per key count it
//! prints the median over the rounds of `ratio_keys_<K>`,
//! `ordered_msgs_per_s_keys_<K>`, `baseline_msgs_per_s_keys_<K>`,
//! `engine_cpu_us_per_msg_keys_<K>` and `redis_cpu_us_per_msg_keys_<K>`.
//!
//! `--svg PATH` draws the medians as a line, ratio against keys on a
//! logarithmic axis, beside the issue's targets; `--points PATH` writes the
//! medians as JSON, and `--previous PATH` draws another build's points (a
//! file `--points` wrote) beside them, so a change's effect shows as two
//! lines from the same minutes.

use std::fmt::Write as _;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;

use anyhow::{Context as _, Result, ensure};
use serde::{Deserialize, Serialize};

use crate::redis::BenchRedis;
use crate::report::{Figure, Report};
use crate::throughput::{self, ThroughputArgs};

/// Options of `ordo-bench sweep`.
#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    /// Key counts to drain a backlog over (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8,64,1024")]
    pub keys: Vec<NonZeroUsize>,
    /// Events in each backlog.
    #[arg(long, default_value = "100000")]
    pub events: NonZeroU64,
    /// Rounds over every key count; each figure is the median of the rounds.
    #[arg(long, default_value = "1")]
    pub rounds: NonZeroUsize,
    /// Connections of the instance's command pool (Ordo's default: 8).
    #[arg(long, default_value = "8")]
    pub pool_size: NonZeroUsize,
    /// The name of this build in the plot's legend.
    #[arg(long, default_value = "this build")]
    pub label: String,
    /// Write the plot (SVG) here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Write the medians (JSON) here, for another run's `--previous`.
    #[arg(long)]
    pub points: Option<PathBuf>,
    /// Draw another build's medians (a file `--points` wrote) beside these.
    #[arg(long)]
    pub previous: Option<PathBuf>,
}

/// One build's medians, per key count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Series {
    /// The build, as the legend names it.
    pub label: String,
    /// One point per key count, in the order measured.
    pub points: Vec<Point>,
}

/// The medians of one key count.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Point {
    /// The key count.
    pub keys: usize,
    /// `ratio_ordered_to_baseline`.
    pub ratio: f64,
    /// `ordered_msgs_per_s_1`.
    pub ordered_msgs_per_s: f64,
    /// `baseline_msgs_per_s`, drained in the same run.
    pub baseline_msgs_per_s: f64,
    /// `ordered_engine_cpu_us_per_msg_1`, where the process can read its CPU time.
    pub engine_cpu_us_per_msg: Option<f64>,
    /// `ordered_redis_cpu_us_per_msg_1`.
    pub redis_cpu_us_per_msg: f64,
}

/// Runs the rounds, then prints the medians and writes what was asked.
pub async fn run(args: &SweepArgs, redis: &BenchRedis) -> Result<Report> {
    ensure!(!args.keys.is_empty(), "--keys names no key count");
    let previous = args
        .previous
        .as_ref()
        .map(|path| -> Result<Series> {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --previous {}", path.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("--previous {} is not a file --points wrote", path.display()))
        })
        .transpose()?;
    let mut runs: Vec<Vec<Report>> = vec![Vec::new(); args.keys.len()];
    for _ in 0..args.rounds.get() {
        for (at, keys) in args.keys.iter().enumerate() {
            let one = ThroughputArgs {
                events: args.events,
                keys: *keys,
                batch: NonZeroUsize::new(64).context("64 is not zero")?,
                pool_size: args.pool_size,
                per_commit: NonZeroUsize::new(100).context("100 is not zero")?,
                instances: vec![NonZeroUsize::MIN],
                deadline_s: 300,
                ack_window: 0,
            };
            let report = throughput::run(&one, redis)
                .await
                .with_context(|| format!("the drain over {keys} keys failed"))?;
            runs[at].push(report);
        }
    }
    let series = Series {
        label: args.label.clone(),
        points: args
            .keys
            .iter()
            .zip(&runs)
            .map(|(keys, reports)| point(keys.get(), reports))
            .collect::<Result<_>>()?,
    };
    let mut report = Report::new();
    report.count("rounds", args.rounds.get() as u64);
    for point in &series.points {
        let k = point.keys;
        report
            .ratio(format!("ratio_keys_{k}"), point.ratio)
            .per_second(format!("ordered_msgs_per_s_keys_{k}"), point.ordered_msgs_per_s)
            .per_second(format!("baseline_msgs_per_s_keys_{k}"), point.baseline_msgs_per_s)
            .ratio(
                format!("redis_cpu_us_per_msg_keys_{k}"),
                point.redis_cpu_us_per_msg,
            );
        if let Some(engine) = point.engine_cpu_us_per_msg {
            report.ratio(format!("engine_cpu_us_per_msg_keys_{k}"), engine);
        }
    }
    if let Some(path) = &args.points {
        std::fs::write(path, serde_json::to_string_pretty(&series)?)
            .with_context(|| format!("cannot write --points {}", path.display()))?;
    }
    if let Some(path) = &args.svg {
        let drawn: Vec<&Series> = previous.iter().chain([&series]).collect();
        std::fs::write(path, plot(&drawn))
            .with_context(|| format!("cannot write --svg {}", path.display()))?;
    }
    Ok(report)
}

/// The medians of one key count's reports.
fn point(keys: usize, reports: &[Report]) -> Result<Point> {
    let median_of = |name: &str| -> Result<f64> {
        let values = reports
            .iter()
            .map(|report| number(report, name).with_context(|| format!("a drain reported no {name}")))
            .collect::<Result<Vec<f64>>>()?;
        Ok(median(values))
    };
    Ok(Point {
        keys,
        ratio: median_of("ratio_ordered_to_baseline")?,
        ordered_msgs_per_s: median_of("ordered_msgs_per_s_1")?,
        baseline_msgs_per_s: median_of("baseline_msgs_per_s")?,
        // Absent where the process cannot read its own CPU time.
        engine_cpu_us_per_msg: median_of("ordered_engine_cpu_us_per_msg_1").ok(),
        redis_cpu_us_per_msg: median_of("ordered_redis_cpu_us_per_msg_1")?,
    })
}

fn number(report: &Report, name: &str) -> Option<f64> {
    match report.get(name)? {
        Figure::Count(n) => Some(*n as f64),
        Figure::PerSecond(x) | Figure::Millis(x) | Figure::Ratio(x) => Some(*x),
        Figure::Text(_) => None,
    }
}

/// The median (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[mid],
        _ => (values[mid - 1] + values[mid]) / 2.0,
    }
}

/// Plot size and margins, in SVG user units.
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 50.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// One colour per series, then the targets' grey.
const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// Ratio (0 to 1, or the largest point if above) against keys on a log axis,
/// one line per series, the targets dashed: 0.8 from 64 keys on, 0.6 at 8.
pub fn plot(series: &[&Series]) -> String {
    let keys = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.keys))
        .chain([8, 1024]);
    let (low, high) = keys.fold((usize::MAX, 1), |(lo, hi), k| (lo.min(k), hi.max(k)));
    let (log_low, log_high) = ((low.max(1) as f64).log10(), (high.max(2) as f64).log10());
    let top_ratio = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.ratio))
        .filter(|r| r.is_finite())
        .fold(1.0_f64, f64::max);
    let x = |keys: usize| {
        let span = (log_high - log_low).max(f64::EPSILON);
        LEFT + ((keys.max(1) as f64).log10() - log_low) / span * (WIDTH - LEFT - RIGHT)
    };
    let y = |ratio: f64| TOP + (1.0 - ratio / top_ratio) * (HEIGHT - TOP - BOTTOM);

    // The legend goes under the plot, a row per series and one for the targets.
    let legend_row = |row: usize| HEIGHT + 18.0 * row as f64;
    let total_height = legend_row(series.len() + 2);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{total_height}" viewBox="0 0 {WIDTH} {total_height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{WIDTH}" height="{total_height}" fill="white"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="22" font-size="14">Ordered drain / plain consumer group, by keys (ordo-bench sweep)</text>"#
    );
    // Axes, grid and ticks.
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, y(0.0), y(top_ratio));
    let _ = writeln!(
        svg,
        r#"<path d="M{x0} {y1} V{y0} H{x1}" fill="none" stroke="black"/>"#
    );
    let ticks = (0..)
        .map(|step| f64::from(step) * 0.2)
        .take_while(|r| *r <= top_ratio + 1e-9);
    for ratio in ticks {
        let at = y(ratio);
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" y1="{at:.1}" x2="{x1}" y2="{at:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{ratio:.1}</text>"##,
            x0 - 6.0,
            at + 4.0
        );
    }
    let mut tick = 1usize;
    while tick <= high.saturating_mul(10) {
        if tick >= low && tick <= high {
            let at = x(tick);
            let _ = writeln!(
                svg,
                r#"<line x1="{at:.1}" y1="{y0}" x2="{at:.1}" y2="{:.1}" stroke="black"/><text x="{at:.1}" y="{:.1}" text-anchor="middle">{tick}</text>"#,
                y0 + 5.0,
                y0 + 18.0
            );
        }
        tick = tick.saturating_mul(10);
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">keys (log scale)</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 10.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">ratio to the plain consumer group</text>"#,
        (y0 + y1) / 2.0
    );
    // The targets: 0.6 with 8 keys (a short mark), 0.8 from 64 keys on.
    let target = |from: f64, to: f64, ratio: f64| {
        format!(
            r##"<line x1="{from:.1}" y1="{:.1}" x2="{to:.1}" y2="{:.1}" stroke="#888" stroke-width="2" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" fill="#888">{ratio:.1}</text>"##,
            y(ratio),
            y(ratio),
            to + 4.0,
            y(ratio) + 4.0
        )
    };
    let _ = writeln!(svg, "{}", target(x(8) - 15.0, x(8) + 15.0, 0.6));
    let _ = writeln!(svg, "{}", target(x(64.min(high)), x(high), 0.8));
    // One line per series, with its points and values.
    for (n, one) in series.iter().enumerate() {
        let colour = COLOURS[n % COLOURS.len()];
        let mut points: Vec<&Point> = one.points.iter().filter(|p| p.ratio.is_finite()).collect();
        points.sort_by_key(|p| p.keys);
        let path: Vec<String> = points
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.keys), y(p.ratio)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            path.join(" ")
        );
        // Values above the points of the first series, below the second's, ...
        let label_dy = if n % 2 == 0 { -7.0 } else { 16.0 };
        for p in &points {
            let (px, py) = (x(p.keys), y(p.ratio));
            let _ = writeln!(
                svg,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="3.5" fill="{colour}"/><text x="{:.1}" y="{:.1}" fill="{colour}">{:.2}</text>"#,
                px + 5.0,
                py + label_dy,
                p.ratio
            );
        }
        let legend = legend_row(n + 1);
        let _ = writeln!(
            svg,
            r#"<line x1="{x0:.1}" y1="{legend:.1}" x2="{:.1}" y2="{legend:.1}" stroke="{colour}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            x0 + 20.0,
            x0 + 26.0,
            legend + 4.0,
            escape(&one.label)
        );
    }
    let legend = legend_row(series.len() + 1);
    let _ = writeln!(
        svg,
        r##"<line x1="{x0:.1}" y1="{legend:.1}" x2="{:.1}" y2="{legend:.1}" stroke="#888" stroke-width="2" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}">target</text>"##,
        x0 + 20.0,
        x0 + 26.0,
        legend + 4.0
    );
    svg.push_str("</svg>\n");
    svg
}

/// `text` safe inside an SVG text node.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(label: &str, ratios: &[(usize, f64)]) -> Series {
        Series {
            label: label.to_owned(),
            points: ratios
                .iter()
                .map(|&(keys, ratio)| Point {
                    keys,
                    ratio,
                    ordered_msgs_per_s: 1.0,
                    baseline_msgs_per_s: 1.0,
                    engine_cpu_us_per_msg: None,
                    redis_cpu_us_per_msg: 1.0,
                })
                .collect(),
        }
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn the_plot_draws_each_series_with_its_values_and_escaped_label() {
        let before = series("main <before>", &[(1, 0.07), (8, 0.27), (64, 0.52), (1024, 0.53)]);
        let after = series("after", &[(1, 0.1), (8, 0.4), (64, 0.7), (1024, 0.75)]);
        let svg = plot(&[&before, &after]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 8, "{svg}");
        for value in ["0.27", "0.52", "0.40", "0.75"] {
            assert!(
                svg.contains(&format!(">{value}</text>")),
                "{value} missing: {svg}"
            );
        }
        assert!(svg.contains("main &lt;before&gt;"), "{svg}");
        // A higher ratio is drawn higher (a smaller y).
        let y_of = |svg: &str, value: &str| -> f64 {
            let at = svg.find(&format!(">{value}</text>")).unwrap();
            let head = &svg[..at];
            let y = head.rfind(" y=\"").unwrap();
            head[y + 4..].split('"').next().unwrap().parse().unwrap()
        };
        assert!(y_of(&svg, "0.75") < y_of(&svg, "0.53"), "{svg}");
    }
}
