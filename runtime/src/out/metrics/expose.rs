//! Families as an exposition, by `prometheus-client`'s encoders: the
//! Prometheus text format 0.0.4 by default, OpenMetrics 1.0 when the
//! scraper's `Accept` header prefers it (Prometheus does). The two differ
//! where it matters to parsers: a counter's `# TYPE` line names
//! `x_total` in the text format and `x` in OpenMetrics (whose samples are
//! `x_total` in both), and OpenMetrics ends with `# EOF`.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::families::{Family, MetricKind, Value};

/// An exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4.
    Text,
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The format a request's `Accept` header asks for: OpenMetrics when
    /// it accepts `application/openmetrics-text` at least as much as
    /// `text/plain` (q values compared; a range without q is q=1), the
    /// text format otherwise (also for no header, `*/*`, or nonsense).
    pub fn from_accept(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let (mut om, mut text) = (0.0f32, 0.0f32);
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    (k.trim().eq_ignore_ascii_case("q")).then(|| v.trim().parse::<f32>().ok())?
                })
                .next()
                .unwrap_or(1.0);
            let q = if q.is_finite() {
                q.clamp(0.0, 1.0)
            } else {
                0.0
            };
            match media.as_str() {
                "application/openmetrics-text" => om = om.max(q),
                "text/plain" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }
}

/// The families, written in `format`.
pub fn encode(families: Vec<Family>, format: Format) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Families(Arc::new(families))));
    let mut out = String::new();
    match format {
        Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?,
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry)?,
    }
    Ok(out)
}

/// The families of one scrape, as a collector.
#[derive(Debug)]
struct Families(Arc<Vec<Family>>);

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in self.0.iter() {
            let ty = match f.kind {
                MetricKind::Counter => MetricType::Counter,
                MetricKind::Gauge => MetricType::Gauge,
                MetricKind::Histogram => MetricType::Histogram,
            };
            let mut fam = encoder.encode_descriptor(&f.name, &f.help, None, ty)?;
            for s in &f.series {
                if s.labels.is_empty() {
                    write_value(&mut fam, &s.value)?;
                } else {
                    let mut m = fam.encode_family(&s.labels)?;
                    write_value(&mut m, &s.value)?;
                }
            }
        }
        Ok(())
    }
}

fn write_value(
    m: &mut prometheus_client::encoding::MetricEncoder<'_>,
    v: &Value,
) -> Result<(), std::fmt::Error> {
    match v {
        Value::Counter(x) => m.encode_counter::<NoLabelSet, u64, u64>(x, None),
        Value::Gauge(x) => m.encode_gauge(x),
        Value::GaugeUnsigned(x) => m.encode_gauge(x),
        Value::Histogram {
            buckets,
            count,
            sum,
        } => m.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::out::metrics::families::Series;

    #[test]
    fn accept_headers_choose_the_format() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prom)), Format::OpenMetrics);
        assert_eq!(Format::from_accept(None), Format::Text);
        assert_eq!(Format::from_accept(Some("*/*")), Format::Text);
        assert_eq!(Format::from_accept(Some("text/plain")), Format::Text);
        assert_eq!(
            Format::from_accept(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")),
            Format::Text
        );
        assert_eq!(
            Format::from_accept(Some("application/openmetrics-text; q=0")),
            Format::Text
        );
        assert_eq!(
            Format::from_accept(Some(";;,=;q=x,application/OpenMetrics-Text;q=NaN")),
            Format::Text
        );
    }

    #[test]
    fn both_formats_write_counters_gauges_and_histograms() {
        let fams = vec![
            Family {
                name: "w_calls".into(),
                help: "calls".into(),
                kind: MetricKind::Counter,
                series: vec![Series {
                    labels: vec![("key".into(), "a\"b\\c\nd".into())],
                    value: Value::Counter(3),
                }],
            },
            Family {
                name: "w_size".into(),
                help: "size".into(),
                kind: MetricKind::Histogram,
                series: vec![Series {
                    labels: Vec::new(),
                    value: Value::Histogram {
                        buckets: vec![(3.0, 2), (7.0, 1), (f64::INFINITY, 0)],
                        count: 3,
                        sum: 12.0,
                    },
                }],
            },
            Family {
                name: "w_min".into(),
                help: "min".into(),
                kind: MetricKind::Gauge,
                series: vec![Series {
                    labels: Vec::new(),
                    value: Value::Gauge(-4),
                }],
            },
        ];
        let text = encode(fams.clone(), Format::Text).unwrap();
        assert_eq!(
            text,
            "# HELP w_calls_total calls\n\
             # TYPE w_calls_total counter\n\
             w_calls_total{key=\"a\\\"b\\\\c\\nd\"} 3\n\
             # HELP w_size size\n\
             # TYPE w_size histogram\n\
             w_size_bucket{le=\"3\"} 2\n\
             w_size_bucket{le=\"7\"} 3\n\
             w_size_bucket{le=\"+Inf\"} 3\n\
             w_size_sum 12.0\n\
             w_size_count 3\n\
             # HELP w_min min\n\
             # TYPE w_min gauge\n\
             w_min -4\n"
        );
        let om = encode(fams, Format::OpenMetrics).unwrap();
        assert!(om.contains("# TYPE w_calls counter\n"), "{om}");
        assert!(
            om.contains("w_calls_total{key=\"a\\\"b\\\\c\\nd\"} 3\n"),
            "{om}"
        );
        assert!(om.contains("w_size_bucket{le=\"+Inf\"} 3\n"), "{om}");
        assert!(om.ends_with("# EOF\n"), "{om}");
    }
}
