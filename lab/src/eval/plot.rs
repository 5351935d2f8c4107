//! Minimal SVG line charts for the paper's figures (accuracy vs N_p, accuracy vs π,
//! prior RMSE vs N_p): categorical x axis, one line per series, a legend.

use super::report::Summary;

pub struct Series {
    pub name: String,
    pub values: Vec<f64>,
}

const COLOURS: [&str; 12] = [
    "#d62728", "#ff7f0e", "#e377c2", "#bcbd22", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf",
    "#7f7f7f", "#aec7e8", "#98df8a",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A line chart as an SVG document.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, x: &[String], series: &[Series]) -> String {
    let (w, h) = (640.0, 420.0);
    let (left, right, top, bottom) = (70.0, 170.0, 40.0, 60.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let values: Vec<f64> =
        series.iter().flat_map(|s| s.values.iter().copied()).filter(|v| v.is_finite()).collect();
    let (mut lo, mut hi) =
        values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.1).max(1e-3);
    let (lo, hi) = (lo - pad, hi + pad);
    let px = |i: usize| left + if x.len() > 1 { pw * i as f64 / (x.len() - 1) as f64 } else { pw / 2.0 };
    let py = |v: f64| top + ph * (1.0 - (v - lo) / (hi - lo));
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        left + pw / 2.0,
        escape(title)
    );
    // Axes, ticks and grid.
    svg.push_str(&format!(
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n",
        top + ph,
        left + pw,
        top + ph,
        top + ph
    ));
    for k in 0..=5 {
        let v = lo + (hi - lo) * k as f64 / 5.0;
        let y = py(v);
        svg.push_str(&format!(
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v:.3}</text>\n",
            left + pw,
            left - 6.0,
            y + 4.0
        ));
    }
    for (i, label) in x.iter().enumerate() {
        svg.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            px(i),
            top + ph + 18.0,
            escape(label)
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n<text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">{}</text>\n",
        left + pw / 2.0,
        h - 15.0,
        escape(x_label),
        top + ph / 2.0,
        top + ph / 2.0,
        escape(y_label)
    ));
    for (k, s) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let points: Vec<String> = s
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, &v)| format!("{:.1},{:.1}", px(i), py(v)))
            .collect();
        svg.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>\n",
            points.join(" ")
        ));
        for p in &points {
            let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
            svg.push_str(&format!("<circle cx=\"{cx}\" cy=\"{cy}\" r=\"3\" fill=\"{colour}\"/>\n"));
        }
        let ly = top + 10.0 + 18.0 * k as f64;
        svg.push_str(&format!(
            "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"2\"/>\n<text x=\"{}\" y=\"{}\">{}</text>\n",
            left + pw + 12.0,
            left + pw + 32.0,
            left + pw + 38.0,
            ly + 4.0,
            escape(&s.name)
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

/// The three figures of a summary: (file name, SVG).
pub fn figures(s: &Summary) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some(first) = s.methods.first() else { return out };
    let nps: Vec<usize> = first.by_positives.keys().copied().collect();
    let pis: Vec<u32> = first.by_prior.keys().copied().collect();
    let by_np: Vec<Series> = s
        .methods
        .iter()
        .map(|m| Series { name: m.label.clone(), values: nps.iter().map(|k| m.by_positives[k]).collect() })
        .collect();
    let by_pi: Vec<Series> = s
        .methods
        .iter()
        .map(|m| Series { name: m.label.clone(), values: pis.iter().map(|k| m.by_prior[k]).collect() })
        .collect();
    let np_labels: Vec<String> = nps.iter().map(|n| n.to_string()).collect();
    let pi_labels: Vec<String> = pis.iter().map(|p| format!("{:.1}", f64::from(*p) / 100.0)).collect();
    out.push((
        "accuracy-vs-positives.svg".into(),
        line_chart(
            &format!("{}: accuracy vs N_p", s.dataset),
            "positive support size N_p",
            "test accuracy",
            &np_labels,
            &by_np,
        ),
    ));
    out.push((
        "accuracy-vs-prior.svg".into(),
        line_chart(
            &format!("{}: accuracy vs π", s.dataset),
            "target class prior π",
            "test accuracy",
            &pi_labels,
            &by_pi,
        ),
    ));
    if let Some(p) = &s.prior {
        let rmse = vec![Series {
            name: "Ours".into(),
            values: nps.iter().map(|k| p.by_positives.get(k).copied().unwrap_or(f64::NAN)).collect(),
        }];
        out.push((
            "prior-rmse-vs-positives.svg".into(),
            line_chart(
                &format!("{}: prior RMSE vs N_p", s.dataset),
                "positive support size N_p",
                "RMSE of π̂",
                &np_labels,
                &rmse,
            ),
        ));
    }
    out
}
