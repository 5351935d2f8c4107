//! The console's two plots as inline SVG, drawn on the server: a device's days (alert
//! rate and mean prior by day) and a stretch of its adaptation points (the prior and the
//! share of records alerted at each), with incidents marked. A page carries them as
//! markup: no chart library to vendor, nothing for the browser to run.

use maud::{html, Markup};

use super::desk::{day_date, Day, Point, DAY_S};

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 230.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 48.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 34.0;

/// An incident on a plot: its span (Unix seconds) and how it is labelled.
#[derive(Debug, Clone)]
pub struct Mark {
    pub from: f64,
    pub until: f64,
    pub label: String,
    /// The incident the page is about (drawn stronger).
    pub current: bool,
}

struct Frame {
    x0: f64,
    x1: f64,
    /// Alert rate at the top of the left axis (0..1).
    rate_max: f64,
}

impl Frame {
    fn x(&self, t: f64) -> f64 {
        let span = (self.x1 - self.x0).max(1e-9);
        LEFT + (t - self.x0) / span * (WIDTH - LEFT - RIGHT)
    }

    fn y_rate(&self, r: f64) -> f64 {
        let h = HEIGHT - TOP - BOTTOM;
        TOP + h - (r / self.rate_max).clamp(0.0, 1.0) * h
    }

    fn y_prior(p: f64) -> f64 {
        let h = HEIGHT - TOP - BOTTOM;
        TOP + h - p.clamp(0.0, 1.0) * h
    }
}

/// A rate axis that shows small rates: the next of 1, 2, 5 % … 100 % above `max`.
fn rate_ceiling(max: f64) -> f64 {
    [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0].into_iter().find(|c| max <= *c).unwrap_or(1.0)
}

/// A number as SVG coordinates take it: one decimal.
fn n(v: f64) -> String {
    format!("{v:.1}")
}

/// The plot's frame: its title, the plotting area, both axes' labels, the incidents'
/// bands, `body` (the bars), the prior's line and the time ticks. Built with maud, which
/// escapes every text and attribute value: an incident id or a device name from the
/// topics cannot close an element.
fn frame(title: &str, f: &Frame, incidents: &[Mark], body: Markup, prior: &[(f64, f64)]) -> Markup {
    let (yb, yt) = (HEIGHT - BOTTOM, TOP);
    html! {
        svg class="plot" role="img" viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) xmlns="http://www.w3.org/2000/svg" {
            title { (title) }
            rect x=(LEFT) y=(yt) width=(WIDTH - LEFT - RIGHT) height=(yb - yt) fill="#fbfbfd" stroke="#ccd" {}
            // Left axis: alert rate; right axis: the prior.
            @for frac in [0.0, 0.5, 1.0] {
                @let y = TOP + (1.0 - frac) * (yb - yt) + 3.0;
                text x=(LEFT - 4.0) y=(n(y)) font-size="10" text-anchor="end" fill="#a33" { (percent(frac * f.rate_max)) }
                text x=(WIDTH - RIGHT + 4.0) y=(n(y)) font-size="10" fill="#236" { (format!("{frac:.1}")) }
            }
            text x=(LEFT) y=(TOP - 4.0) font-size="10" fill="#a33" { "alerted" }
            text x=(WIDTH - RIGHT) y=(TOP - 4.0) font-size="10" text-anchor="end" fill="#236" { "prior π̂" }
            (marks(f, incidents))
            (body)
            @if !prior.is_empty() {
                polyline class="prior" fill="none" stroke="#236" stroke-width="1.5"
                    points=(prior.iter().map(|(x, y)| format!("{x:.1},{y:.1} ")).collect::<String>()) {}
            }
            (time_ticks(f))
        }
    }
}

fn percent(r: f64) -> String {
    if r < 0.1 {
        format!("{:.1}%", 100.0 * r)
    } else {
        format!("{:.0}%", 100.0 * r)
    }
}

fn marks(f: &Frame, marks: &[Mark]) -> Markup {
    html! {
        @for m in marks {
            @let (a, b) = (f.x(m.from.max(f.x0)), f.x(m.until.min(f.x1)));
            @if b >= LEFT && a <= WIDTH - RIGHT {
                rect class="incident" x=(n(a)) y=(TOP) width=(n((b - a).max(3.0))) height=(HEIGHT - TOP - BOTTOM)
                    fill="#e58" fill-opacity=(if m.current { 0.35 } else { 0.25 }) {
                    title { (m.label) }
                }
            }
        }
    }
}

fn time_ticks(f: &Frame) -> Markup {
    html! {
        @for i in 0..=4 {
            @let t = f.x0 + (f.x1 - f.x0) * f64::from(i) / 4.0;
            text x=(n(f.x(t))) y=(HEIGHT - BOTTOM + 14.0) font-size="10" text-anchor="middle" fill="#555" { (tick_label(f, t)) }
        }
    }
}

fn tick_label(f: &Frame, t: f64) -> String {
    let iso = crate::monitor::output::iso8601(t);
    match f.x1 - f.x0 {
        s if s > 3.0 * DAY_S => iso[..10].to_string(),
        s if s > 2.0 * 3_600.0 => iso[5..16].replace('T', " "),
        _ => iso[11..19].to_string(),
    }
}

/// A device's days: bars of the share of its scored records alerted each day, its mean
/// prior as a line, its incidents as bands. `days`: days since the epoch (UTC).
pub fn by_day(title: &str, days: &[(i64, Day)], incidents: &[Mark]) -> Markup {
    let Some((&(first, _), &(last, _))) = days.first().zip(days.last()) else {
        return no_data(title);
    };
    let (x0, x1) = (first as f64 * DAY_S, (last + 1) as f64 * DAY_S);
    let max = days.iter().filter_map(|(_, d)| d.alert_rate()).fold(0.0, f64::max);
    let f = Frame { x0, x1, rate_max: rate_ceiling(max) };
    let bar = (f.x(DAY_S + x0) - f.x(x0)) * 0.7;
    let mid = |day: i64| f.x((day as f64 + 0.5) * DAY_S);
    let line: Vec<(f64, f64)> =
        days.iter().filter_map(|(day, d)| Some((mid(*day), Frame::y_prior(d.mean_prior()?)))).collect();
    let bars = html! {
        @for (day, d) in days {
            @if let Some(r) = d.alert_rate() {
                @let y = f.y_rate(r);
                rect class="day" x=(n(mid(*day) - bar / 2.0)) y=(n(y)) width=(n(bar)) height=(n(HEIGHT - BOTTOM - y)) fill="#c44" {
                    title { (day_date(*day)) ": " (d.alerted) " of " (d.scored) " records alerted (" (percent(r)) ")" }
                }
            }
        }
    };
    frame(title, &f, incidents, bars, &line)
}

/// A stretch of adaptation points from `from` to `until` (Unix seconds): the share of
/// records alerted since each point before as bars, the prior as a line, incidents as
/// bands.
pub fn timeline<'a>(
    title: &str,
    points: impl IntoIterator<Item = &'a Point>,
    (from, until): (f64, f64),
    incidents: &[Mark],
) -> Markup {
    let shown: Vec<&Point> = points.into_iter().filter(|p| p.ts >= from && p.ts <= until).collect();
    if shown.is_empty() {
        return no_data(title);
    }
    let rate = |p: &Point| p.alerted as f64 / p.scored.max(1) as f64;
    let max = shown.iter().map(|p| rate(p)).fold(0.0, f64::max);
    let f = Frame { x0: from, x1: until.max(from + 1.0), rate_max: rate_ceiling(max) };
    let line: Vec<(f64, f64)> =
        shown.iter().map(|p| (f.x(p.ts), Frame::y_prior(f64::from(p.prior)))).collect();
    let bars = html! {
        @for p in shown.iter().filter(|p| p.alerted > 0) {
            @let x = n(f.x(p.ts));
            line x1=(x) x2=(x) y1=(HEIGHT - BOTTOM) y2=(n(f.y_rate(rate(p)))) stroke="#c44" stroke-width="2" {}
        }
    };
    frame(title, &f, incidents, bars, &line)
}

fn no_data(title: &str) -> Markup {
    html! {
        svg class="plot" viewBox=(format!("0 0 {WIDTH} 40")) xmlns="http://www.w3.org/2000/svg" {
            title { (title) }
            text x="8" y="24" font-size="12" fill="#666" { (title) ": no prior updates yet" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_draws_a_bar_per_day_and_escapes_its_labels() {
        let day = Day { scored: 100, alerted: 3, prior_sum: 1.8, points: 2 };
        let mark = Mark {
            from: 20_000.0 * DAY_S,
            until: 20_000.0 * DAY_S + 60.0,
            label: "<i1>".into(),
            current: true,
        };
        let svg = by_day("cam", &[(20_000, day), (20_002, day)], &[mark]).into_string();
        assert_eq!(svg.matches(r#"class="day""#).count(), 2);
        assert!(svg.contains("3 of 100 records alerted (3.0%)"), "{svg}");
        assert!(svg.contains("&lt;i1&gt;") && !svg.contains("<i1>"));
        assert!(by_day("cam", &[], &[]).into_string().contains("no prior updates yet"));
    }

    #[test]
    fn a_timeline_shows_only_its_stretch() {
        let p = |ts, alerted| Point { ts, prior: 0.9, scored: 10, alerted };
        let svg = timeline("cam", &[p(1.0, 1), p(50.0, 2), p(500.0, 3)], (0.0, 100.0), &[]).into_string();
        assert_eq!(svg.matches("<line").count(), 2);
    }
}
