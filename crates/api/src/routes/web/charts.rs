//! The usage page's charts: inline SVG written by the server (no script, no image request, no
//! inline style — sizes are SVG attributes, colours come from `app.css`). Each chart holds no
//! text of its own: the labels and figures are HTML beside it (so they wrap on a phone and a
//! screen reader reads them), and the SVG is a picture of them with a short description.

use maud::{html, Markup};

/// One bar: its label, its value, and the value as the page writes it.
pub(super) struct Bar {
    pub label: String,
    pub value: f64,
    pub text: String,
}

/// Bars side by side in time order (the oldest left), e.g. one per day; `what` describes
/// the chart to a screen reader.
pub(super) fn columns(what: &str, bars: &[Bar]) -> Markup {
    const WIDTH: f64 = 600.0;
    const HEIGHT: f64 = 120.0;
    let max = bars.iter().map(|b| b.value).fold(0.0_f64, f64::max);
    let peak = bars
        .iter()
        .filter(|b| b.value > 0.0)
        .max_by(|a, b| a.value.total_cmp(&b.value));
    let slot = WIDTH / bars.len().max(1) as f64;
    // A cost the price table does not know is not zero: say so rather than draw nothing.
    let unpriced = bars.iter().any(|b| b.text.contains("unpriced"));
    let description = match (peak, unpriced) {
        (Some(peak), false) => format!("{what}: highest {} on {}", peak.text, peak.label),
        (Some(peak), true) => format!(
            "{what}: highest {} on {}; some calls unpriced",
            peak.text, peak.label
        ),
        (None, true) => format!("{what}: unpriced (no call had a price)"),
        (None, false) => format!("{what}: all zero"),
    };
    html! {
        figure.chart {
            figcaption {
                (what)
                @if let Some(peak) = peak { span.muted { " · highest " (peak.text) " (" (peak.label) ")" } }
                @if unpriced { span.muted { " · some calls unpriced" } }
            }
            svg.columns viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) preserveAspectRatio="none"
                role="img" aria-label=(description) {
                line.axis x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) {}
                @for (i, bar) in bars.iter().enumerate() {
                    @let height = if max > 0.0 { (bar.value / max * (HEIGHT - 2.0)).max(if bar.value > 0.0 { 1.0 } else { 0.0 }) } else { 0.0 };
                    rect.bar x=(format!("{:.1}", i as f64 * slot + slot * 0.15))
                        y=(format!("{:.1}", HEIGHT - height))
                        width=(format!("{:.1}", slot * 0.7))
                        height=(format!("{height:.1}")) {
                        title { (bar.label) ": " (bar.text) }
                    }
                }
            }
            @if let (Some(first), Some(last)) = (bars.first(), bars.last()) {
                p.axis-labels.muted { span { (first.label) } span { (last.label) } }
            }
        }
    }
}

/// One horizontal bar per row (largest first as given), each under its label and figure.
pub(super) fn rows(what: &str, bars: &[Bar]) -> Markup {
    let max = bars.iter().map(|b| b.value).fold(0.0_f64, f64::max);
    html! {
        figure.chart {
            figcaption { (what) }
            ul.hbars {
                @for bar in bars {
                    @let share = if max > 0.0 { bar.value / max * 100.0 } else { 0.0 };
                    li {
                        span.label.mono { (bar.label) }
                        span.figure { (bar.text) }
                        svg.hbar viewBox="0 0 100 4" preserveAspectRatio="none" aria-hidden="true" {
                            rect.track x="0" y="0" width="100" height="4" {}
                            rect.bar x="0" y="0" width=(format!("{share:.2}")) height="4" {}
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(label: &str, value: f64) -> Bar {
        Bar {
            label: label.into(),
            value,
            text: format!("${value}"),
        }
    }

    #[test]
    fn columns_scale_to_the_highest_and_say_it_in_words() {
        let svg = columns(
            "Cost per day",
            &[bar("12-01", 1.0), bar("12-02", 0.0), bar("12-03", 4.0)],
        )
        .into_string();
        assert!(
            svg.contains("aria-label=\"Cost per day: highest $4 on 12-03\""),
            "{svg}"
        );
        assert!(
            svg.contains("height=\"118.0\""),
            "the highest is full height: {svg}"
        );
        assert!(svg.contains("height=\"29.5\""), "a quarter of it: {svg}");
        assert!(!svg.contains("style"), "no inline style: {svg}");
        let empty = columns("Tokens per day", &[bar("12-01", 0.0)]).into_string();
        assert!(empty.contains("Tokens per day: all zero"), "{empty}");
    }

    #[test]
    fn rows_are_shares_of_the_largest_and_labels_are_escaped() {
        let html = rows("Cost per model", &[bar("<m>", 2.0), bar("n", 0.5)]).into_string();
        assert!(html.contains("&lt;m&gt;"));
        assert!(html.contains("width=\"100.00\""));
        assert!(html.contains("width=\"25.00\""));
    }
}
