//! The console's pages, as HTML the server renders from the desk: incidents (open and
//! recent, filtered), one incident, devices, one device. The markup is escaped by maud;
//! the plots are inline SVG (`plots.rs`); `console.js` only sends verdicts and waits for
//! the daemon's answer.

use maud::{html, Markup, DOCTYPE};

use super::access::{Analyst, Role};
use super::desk::{verdict_name, Case, Desk, DeviceCase, Standing};
use super::plots::{self, Mark};
use super::views::{IncidentFilter, IncidentRow};
use crate::monitor::incidents::fanout::RaisedBy;
use crate::monitor::incidents::incident_traffic::Severity;
use crate::monitor::output::iso8601;
use strum::VariantNames;

/// Rows listed on a page at most (newest first).
pub const ROWS_SHOWN: usize = 200;
/// A plot around an incident reaches as far before and after it as it lasted, within
/// these bounds (seconds).
const AROUND_S: (f64, f64) = (300.0, 6.0 * 3_600.0);

/// Who reads a page: the signed-in analyst (none where reading needs no token), and
/// whether verdicts may be given here.
#[derive(Debug, Clone, Default)]
pub struct Viewer {
    pub analyst: Option<Analyst>,
    /// The console takes verdicts (it is not read-only).
    pub verdicts: bool,
}

impl Viewer {
    /// May this reader give verdicts here?
    pub fn may_answer(&self) -> bool {
        self.verdicts && self.analyst.as_ref().is_some_and(|a| a.role == Role::Answer)
    }
}

fn layout(title: &str, viewer: &Viewer, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · metapu console" }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body {
                header {
                    a.brand href="/" { "metapu console" }
                    nav { a href="/" { "Incidents" } a href="/devices" { "Devices" } a href="/api" { "API" } }
                    @if !viewer.verdicts { span.mode { "read-only" } }
                    @match &viewer.analyst {
                        Some(a) => {
                            form.session method="post" action="/logout" {
                                span.who id="signed-in" { (a.name) " (" (a.role.as_str()) ")" }
                                button type="submit" { "sign out" }
                            }
                        }
                        None => { a.session href="/login" { "sign in" } }
                    }
                }
                main { (body) }
            }
        }
    }
}

fn when(t: f64) -> String {
    let s = iso8601(t);
    s.get(..19).map_or(s.clone(), |x| x.replace('T', " "))
}

fn standing(s: Standing) -> &'static str {
    match s {
        Standing::Open => "open",
        Standing::Suppressed => "suppressed",
        Standing::Joined => "joined",
        Standing::Closed => "closed",
    }
}

fn severity_badge(s: &str) -> Markup {
    html! { span class={"sev sev-" (s)} { (s) } }
}

/// `/`: open and recent incidents.
pub fn incidents(desk: &Desk, filter: &IncidentFilter, viewer: &Viewer) -> Markup {
    let rows = IncidentRow::list(desk, filter, ROWS_SHOWN);
    let (open, recent): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.standing == Standing::Open);
    let body = html! {
        h1 { "Incidents" }
        form.filter method="get" action="/" {
            label { "device " input name="device" value=(filter.device.clone().unwrap_or_default()); }
            label { "raised by "
                select name="kind" {
                    option value="" { "any" }
                    @for k in RaisedBy::VARIANTS {
                        option value=(k) selected[filter.raised_by.map(<&str>::from) == Some(*k)] { (k) }
                    }
                }
            }
            label { "severity "
                select name="severity" {
                    option value="" { "any" }
                    @for s in Severity::VARIANTS {
                        option value=(s) selected[filter.severity.map(Severity::as_str) == Some(*s)] { (s) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
        h2 { "Open (" (open.len()) ")" }
        (incident_table(&open, "open-incidents"))
        h2 { "Recent" }
        (incident_table(&recent, "recent-incidents"))
        @if rows.len() == ROWS_SHOWN { p.note { "The newest " (ROWS_SHOWN) " shown; filter to see others." } }
    };
    layout("Incidents", viewer, body)
}

fn incident_table(rows: &[&IncidentRow], id: &str) -> Markup {
    html! {
        @if rows.is_empty() { p.note { "None." } } @else {
            table id=(id) {
                thead { tr { th { "opened" } th { "device" } th { "severity" } th { "raised by" } th { "standing" } th { "what" } } }
                tbody {
                    @for r in rows {
                        tr data-incident=(r.incident_id) {
                            td { (when(r.opened_at)) }
                            td { a href={"/devices/" (r.device)} { (r.device) } }
                            td { (severity_badge(r.severity.as_str())) }
                            td { (<&str>::from(r.raised_by)) }
                            td class={"standing st-" (standing(r.standing))} {
                                (standing(r.standing))
                                @if let Some(v) = &r.verdict { br; span.verdict { (v) } }
                            }
                            td {
                                a href={"/incidents/" (r.incident_id)} { (r.sentence) }
                                @if !r.peers.is_empty() { div.peers { "peers: " (r.peers.join(", ")) } }
                                @if !r.members.is_empty() { div.peers { "fleet: " (r.members.join(", ")) } }
                                @if let Some(s) = &r.suppressed_by { div.suppressed { "suppressed: " (s) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `/incidents/{id}`.
pub fn incident(desk: &Desk, case: &Case, viewer: &Viewer) -> Markup {
    let r = &case.report;
    let row = IncidentRow::of(case);
    let device = desk.device(&r.device);
    let (from, end) = case.span();
    let around = (end - from).clamp(AROUND_S.0, AROUND_S.1);
    let window = (from - around, end + around);
    let plot = device.map(|d| {
        let marks = incident_marks(desk, d, Some(&r.incident_id));
        plots::timeline(
            &format!("{}: alerts and prior around incident {}", r.device, r.incident_id),
            &d.points,
            window,
            &marks,
        )
    });
    let body = html! {
        h1 { "Incident " code { (r.incident_id) } }
        p.sentence id="sentence" { (r.summary) }
        dl.facts {
            dt { "device" } dd { a href={"/devices/" (r.device)} { (r.device) } }
            dt { "standing" } dd id="standing" class={"standing st-" (standing(case.standing))} {
                (standing(case.standing))
                @if let Some(res) = &r.resolution { " (" (res) ")" }
            }
            dt { "severity" } dd { (severity_badge(row.severity.as_str())) }
            dt { "raised by" } dd { (<&str>::from(row.raised_by)) @if let Some(l) = &r.look { ": " (l.why) } }
            dt { "opened" } dd { (when(r.figures.opened_at)) }
            dt { "records" } dd { (r.figures.anomalous) " of " (r.figures.records) " anomalous, peak score " (format!("{:.2}", r.figures.peak_score)) }
            @if !row.peers.is_empty() { dt { "peers" } dd { (row.peers.join(", ")) } }
            @if !row.members.is_empty() { dt { "fleet members" } dd { (row.members.join(", ")) } }
            @if let Some(f) = &r.fleet { dt { "joined" } dd { a href={"/incidents/" (f.incident_id)} { (f.incident_id) } " on " (f.device) } }
            @if let Some(s) = &row.suppressed_by { dt { "suppressed" } dd.suppressed { (s) } }
            @if let Some(n) = &r.news { dt { "news" } dd { (n.why) } }
            @if let Some(f) = &r.footprint { dt { "footprint" } dd { (f.words()) } }
        }
        section.verdicts id="verdicts" {
            h2 { "Verdicts" }
            ul id="verdict-list" {
                @for f in case.verdicts() {
                    li.given {
                        (verdict_name(f.verdict)) " by " strong { (f.by) } @if !f.note.is_empty() { ": " (f.note) }
                        @if f.at > 0.0 || !f.from.is_empty() {
                            span.audit { " (given" @if f.at > 0.0 { " " (when(f.at)) } @if !f.from.is_empty() { " from " (f.from) } ")" }
                        }
                    }
                }
                @for s in case.pending() {
                    li.pending { (verdict_name(s.verdict)) " by " (s.by) ": sent, waiting for the daemon" }
                }
                @for s in &case.refused {
                    li.refused { (verdict_name(s.verdict)) " by " (s.by) " refused: " (s.reason.clone().unwrap_or_default()) }
                }
            }
            @if !viewer.verdicts {
                p.note { "Read-only: verdicts are given with `metapu feedback`, or here once an analyst may answer (docs/analysts.md)." }
            } @else if !viewer.may_answer() {
                p.note { "Verdicts need an analyst's token with the role answer: " a href="/login" { "sign in" } "." }
            } @else {
                form id="verdict" data-incident=(r.incident_id) data-device=(r.device) {
                    label { "note " input name="note" id="note"; }
                    button type="button" id="false-positive" data-verdict="false_positive" { "False positive" }
                    button type="button" id="confirmed" data-verdict="confirmed" { "Confirmed" }
                    output id="verdict-result" {}
                }
            }
        }
        section { h2 { "Around it" } @if let Some(plot) = plot { (plot) } }
        section {
            h2 { "Events" }
            table id="events" {
                thead { tr { th { "time" } th { "event" } th { "severity" } th { "what" } } }
                tbody {
                    @for (i, e) in case.events.iter().enumerate() {
                        @if case.events_dropped > 0 && i == super::desk::EVENTS_HEAD {
                            tr { td colspan="4" { "… " (case.events_dropped) " events not kept …" } }
                        }
                        tr {
                            td { (when(e.time)) }
                            td { (e.event) @if let Some(res) = &e.resolution { " (" (res) ")" } }
                            td { (severity_badge(e.severity.as_str())) }
                            td {
                                (e.summary)
                                @if let Some(n) = &e.news { div.news { "news: " (n) } }
                                @if let Some(f) = &e.footprint { div.footprint { "footprint: " (f) } }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(&format!("Incident {}", r.incident_id), viewer, body)
}

/// A device's incidents as bands on its plots.
fn incident_marks(desk: &Desk, d: &DeviceCase, current: Option<&str>) -> Vec<Mark> {
    d.incidents
        .iter()
        .filter_map(|id| desk.case(id))
        .map(|c| {
            let r = &c.report;
            let (from, until) = c.span();
            Mark {
                from,
                until,
                label: format!("incident {} ({})", r.incident_id, standing(c.standing)),
                current: current == Some(r.incident_id.as_str()),
            }
        })
        .collect()
}

/// `/devices`.
pub fn devices(desk: &Desk, viewer: &Viewer) -> Markup {
    let body = html! {
        h1 { "Devices" }
        table id="devices" {
            thead { tr { th { "device" } th { "kind" } th { "prior π̂" } th { "known-normal" } th { "alerted, last day" } th { "incidents" } th { "open" } } }
            tbody {
                @for (id, d) in desk.devices() {
                    tr {
                        td { a href={"/devices/" (id)} { (id) } }
                        td { (d.kind.clone().unwrap_or_default()) }
                        td { (d.latest.as_ref().map(|p| format!("{:.3}", p.prior)).unwrap_or_default()) }
                        td { (d.latest.as_ref().map(|p| p.positive_window.to_string()).unwrap_or_default()) }
                        td { (d.days.values().next_back().map(|day| format!("{} of {}", day.alerted, day.scored)).unwrap_or_default()) }
                        td { (d.incidents.len()) }
                        td { (d.incidents.iter().filter(|i| desk.case(i).is_some_and(|c| c.standing == Standing::Open)).count()) }
                    }
                }
            }
        }
    };
    layout("Devices", viewer, body)
}

/// `/devices/{id}`.
pub fn device(desk: &Desk, id: &str, d: &DeviceCase, viewer: &Viewer) -> Markup {
    let marks = incident_marks(desk, d, None);
    let days: Vec<_> = d.days.iter().map(|(k, v)| (*k, *v)).collect();
    let by_day = plots::by_day(&format!("{id}: alerted records and mean prior by day"), &days, &marks);
    let span = d.points.front().zip(d.points.back()).map(|(a, b)| (a.ts, b.ts.max(a.ts + 1.0)));
    let over_time = span.map(|span| {
        plots::timeline(&format!("{id}: prior and alerts at each adaptation"), &d.points, span, &marks)
    });
    let siblings = d.kind.as_deref().map(|k| desk.siblings(id, k)).unwrap_or_default();
    let latest = d.latest.as_ref();
    let body = html! {
        h1 { "Device " code { (id) } }
        @if let Some(u) = &d.unmonitored { p.warning { (u) } }
        dl.facts {
            dt { "kind" } dd { (d.kind.clone().unwrap_or_else(|| "none (metapu onboard --kind)".into())) }
            @if !siblings.is_empty() {
                dt { "siblings" } dd { @for s in &siblings { a href={"/devices/" (s)} { (s) } " " } }
            }
            @if let Some(p) = latest {
                dt { "prior π̂" } dd id="prior" { (format!("{:.3}", p.prior)) " at " (when(if p.ts > 0.0 { p.ts } else { p.time })) }
                dt { "known-normal" } dd id="known-normal" {
                    (p.positive_window) " records"
                    @if let Some((from, until)) = d.known_normal_span {
                        ", taken from " (when(from)) " to " (when(until))
                    }
                    @if let Some(o) = &d.onboarding {
                        ", onboarded by " (o.by) " from " (when(o.from)) " to " (when(o.until))
                    }
                }
                dt { "unlabeled window" } dd { (p.unlabeled_window) " records" }
                dt { "scored since tracked" } dd { (p.scored) ", " (p.alerted) " alerted" }
            }
        }
        section { h2 { "By day" } (by_day) }
        section { h2 { "Over time" } @if let Some(plot) = over_time { (plot) } }
        section {
            h2 { "Remembered behaviours" }
            @if d.remembered().is_empty() { p.note { "None." } } @else {
                table id="remembered" {
                    thead { tr { th { "incident" } th { "how" } th { "until" } } }
                    tbody {
                        @for b in d.remembered() {
                            tr {
                                td { a href={"/incidents/" (b.incident_id)} { (b.incident_id) } }
                                td { @if b.learned { "learned (closed quietly)" } @else { "dismissed by " (b.by) @if !b.note.is_empty() { ": " (b.note) } } }
                                td { (b.expires_at.map(when).unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
        }
        section {
            h2 { "Incidents" }
            @let rows: Vec<IncidentRow> = d.incidents.iter().rev().filter_map(|i| desk.case(i)).take(ROWS_SHOWN).map(IncidentRow::of).collect();
            @let refs: Vec<&IncidentRow> = rows.iter().collect();
            (incident_table(&refs, "device-incidents"))
        }
    };
    layout(&format!("Device {id}"), viewer, body)
}

pub fn not_found(what: &str, viewer: &Viewer) -> Markup {
    layout("Not found", viewer, html! { h1 { "Not found" } p { (what) } })
}

/// `/login`: an analyst gives their token once; the browser keeps it in a cookie no
/// script can read.
pub fn login(message: Option<&str>) -> Markup {
    let body = html! {
        h1 { "Sign in" }
        @if let Some(m) = message { p.warning id="login-message" { (m) } }
        form.login method="post" action="/login" {
            label { "your token " input name="token" id="login-token" type="password" autocomplete="current-password" required; }
            button type="submit" id="sign-in" { "Sign in" }
        }
        p.note { "Each analyst has a token of their own (metapu console add-analyst); verdicts are signed with its name." }
    };
    layout("Sign in", &Viewer { analyst: None, verdicts: true }, body)
}
