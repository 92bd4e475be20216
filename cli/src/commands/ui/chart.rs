//! Inline SVG charts of a queue's history, drawn on the server.

use std::fmt::Write as _;

use maud::{Markup, html};

use super::history::Point;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 120.0;
/// Room for the y-axis labels.
const LEFT: f64 = 56.0;
/// Room for the x-axis labels.
const BOTTOM: f64 = 18.0;
const TOP: f64 = 8.0;

/// A span of seconds as the x-axis says it: `45 s`, `12 min`, `2.5 h`.
pub(crate) fn span(seconds: f64) -> String {
    if seconds < 120.0 {
        format!("{seconds:.0} s")
    } else if seconds < 7200.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

/// x of time `at` on an axis from `first` to `last`.
fn x(at: f64, first: f64, last: f64) -> f64 {
    if last > first {
        LEFT + (at - first) / (last - first) * (WIDTH - LEFT - 4.0)
    } else {
        WIDTH - 4.0
    }
}

/// y of `value` on an axis from `low` (bottom) to `high` (top).
fn y(value: f64, low: f64, high: f64) -> f64 {
    let bottom = HEIGHT - BOTTOM;
    if high > low {
        bottom - (value - low) / (high - low) * (bottom - TOP)
    } else {
        bottom
    }
}

fn points(
    series: &[Point],
    value: impl Fn(&Point) -> i64,
    first: f64,
    last: f64,
    high: f64,
) -> String {
    let mut out = String::new();
    for p in series {
        // Counts are far below 2^52: exact as f64.
        #[allow(clippy::cast_precision_loss)]
        let v = value(p) as f64;
        let _ = write!(out, "{:.1},{:.1} ", x(p.at, first, last), y(v, 0.0, high));
    }
    out.trim_end().to_owned()
}

fn frame(label_top: &str, label_bottom: &str, first: f64, last: f64) -> Markup {
    let bottom = HEIGHT - BOTTOM;
    html! {
        line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(bottom) stroke="#999" {}
        line x1=(LEFT) y1=(bottom) x2=(WIDTH - 4.0) y2=(bottom) stroke="#999" {}
        text x=(LEFT - 4.0) y=(TOP + 8.0) text-anchor="end" { (label_top) }
        text x=(LEFT - 4.0) y=(bottom) text-anchor="end" { (label_bottom) }
        text x=(LEFT) y=(HEIGHT - 4.0) { "−" (span(last - first)) }
        text x=(WIDTH - 4.0) y=(HEIGHT - 4.0) text-anchor="end" { "now" }
    }
}

/// A queue's depth and messages due, over the samples kept.
pub(crate) fn depth(series: &[Point]) -> Markup {
    let (Some(first), Some(last)) = (series.first(), series.last()) else {
        return html! { p.muted { "No samples yet." } };
    };
    let top = series
        .iter()
        .map(|p| p.depth.max(p.due))
        .max()
        .unwrap_or(0)
        .max(1);
    #[allow(clippy::cast_precision_loss)]
    let high = top as f64;
    html! {
        svg.chart role="img" width=(WIDTH) height=(HEIGHT) viewBox={"0 0 " (WIDTH) " " (HEIGHT)} {
            title { "Depth and due over the last " (span(last.at - first.at)) }
            (frame(&top.to_string(), "0", first.at, last.at))
            polyline.depth points=(points(series, |p| p.depth, first.at, last.at, high)) fill="none" stroke="#2563eb" stroke-width="2" {}
            polyline.due points=(points(series, |p| p.due, first.at, last.at, high)) fill="none" stroke="#ea580c" stroke-width="2" stroke-dasharray="4 3" {}
        }
    }
}

/// The net drain rate between samples, as bars: up when the queue shrank, down when it grew.
pub(crate) fn drain(rates: &[(f64, f64)], first_at: f64) -> Markup {
    let Some(&(last_at, _)) = rates.last() else {
        return html! { p.muted { "Two samples are needed for a rate." } };
    };
    let peak = rates
        .iter()
        .map(|(_, r)| r.abs())
        .fold(0.0, f64::max)
        .max(1.0);
    let zero = y(0.0, -peak, peak);
    let bar = ((WIDTH - LEFT) / rates.len().max(1) as f64 - 1.0).clamp(1.0, 12.0);
    html! {
        svg.chart role="img" width=(WIDTH) height=(HEIGHT) viewBox={"0 0 " (WIDTH) " " (HEIGHT)} {
            title { "Net messages drained per second" }
            (frame(&format!("{peak:.1}/s"), &format!("−{peak:.1}/s"), first_at, last_at))
            line x1=(LEFT) y1=(zero) x2=(WIDTH - 4.0) y2=(zero) stroke="#ccc" {}
            @for &(at, rate) in rates {
                @let top = y(rate.max(0.0), -peak, peak);
                @let height = (y(rate.min(0.0), -peak, peak) - top).max(0.5);
                rect x=(format!("{:.1}", x(at, first_at, last_at) - bar)) y=(format!("{top:.1}"))
                    width=(format!("{bar:.1}")) height=(format!("{height:.1}"))
                    fill=(if rate >= 0.0 { "#16a34a" } else { "#dc2626" }) {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_chart_draws_one_point_per_sample() {
        let series = [
            Point {
                at: 0.0,
                depth: 4,
                due: 2,
            },
            Point {
                at: 5.0,
                depth: 2,
                due: 2,
            },
            Point {
                at: 10.0,
                depth: 0,
                due: 0,
            },
        ];
        let svg = depth(&series).into_string();
        assert!(svg.starts_with("<svg"), "{svg}");
        let depth_points = svg
            .split("class=\"depth\" points=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("a depth polyline");
        assert_eq!(depth_points.split(' ').count(), 3, "{depth_points}");
        // The newest sample sits on the right edge, at zero on the bottom axis.
        assert!(depth_points.ends_with("636.0,102.0"), "{depth_points}");
        assert!(svg.contains("−10 s"), "{svg}");
        assert!(depth(&[]).into_string().contains("No samples yet"));
    }

    #[test]
    fn drain_bars_go_up_for_shrinking_and_down_for_growing() {
        let svg = drain(&[(5.0, 2.0), (10.0, -1.0)], 0.0).into_string();
        assert_eq!(svg.matches("<rect").count(), 2, "{svg}");
        assert!(svg.contains("#16a34a") && svg.contains("#dc2626"), "{svg}");
        assert!(drain(&[], 0.0).into_string().contains("Two samples"));
    }

    #[test]
    fn spans_read_in_fitting_units() {
        assert_eq!(span(45.0), "45 s");
        assert_eq!(span(720.0), "12 min");
        assert_eq!(span(9000.0), "2.5 h");
    }
}
