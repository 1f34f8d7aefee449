//! The outputs a trace's options ask for: one text view (the duration
//! view, `-T`'s call tree or `--report`) to standard output, a file or a
//! file per thread, and the Chrome trace events and the flame graph.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::TraceArgs;
use super::out;
use super::views::{self, Clock, TimeFmt};

/// The views of `a`'s outputs, over the functions of `table`; `stop` is
/// set when a text output can no longer be written.
pub(super) fn views(
    a: &TraceArgs,
    table: &views::Table,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<Box<dyn views::View>>, String> {
    let time = TimeFmt::local(if a.micros {
        Clock::Micros
    } else if a.time {
        Clock::Seconds
    } else {
        Clock::None
    });
    let start_ns = crate::sys::time::realtime_ns();
    let text_out = || -> Result<out::TextOut, String> {
        match &a.output {
            Some(p) if a.per_thread => Ok(out::TextOut::per_thread(p.clone(), stop.clone())),
            Some(p) => {
                let f = std::fs::File::create(p)
                    .map_err(|e| format!("creating {}: {e}", p.display()))?;
                Ok(out::TextOut::file(f, stop.clone()))
            }
            None => Ok(out::TextOut::single(
                Box::new(std::io::stdout()),
                std::io::stdout().is_terminal(),
                stop.clone(),
            )),
        }
    };
    let mut list: Vec<Box<dyn views::View>> = Vec::new();
    if a.report {
        list.push(Box::new(views::report::ReportView::new(
            table.clone(),
            text_out()?,
            a.format == "json",
        )));
    } else if a.call_tree {
        list.push(Box::new(views::calltree::CallTreeView::new(
            table.clone(),
            text_out()?,
            views::calltree::TreeOpts {
                pid: !a.no_pid,
                ip: !a.no_ip,
                lines: a.line_numbers,
                offset: a.offset,
                time,
            },
        )));
    } else {
        list.push(Box::new(views::duration::DurationView::new(
            table.clone(),
            text_out()?,
            time,
            a.line_numbers,
        )));
    }
    if let Some(p) = &a.chrome {
        list.push(Box::new(views::chrome::ChromeView::create(
            table.clone(),
            p,
            start_ns,
        )?));
    }
    if let Some(p) = &a.flame {
        let title = format!(
            "wprobe trace {}",
            a.pid.map_or_else(
                || {
                    a.command
                        .iter()
                        .map(|s| s.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(" ")
                },
                |p| format!("-p {p}")
            )
        );
        list.push(Box::new(views::flame::FlameView::new(
            table.clone(),
            p,
            title,
        )));
    }
    Ok(list)
}
