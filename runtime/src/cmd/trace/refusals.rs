//! The functions a trace leaves out, said once and grouped by reason:
//! those it does not select, and those whose probes the transport refused
//! (its refusals without what is particular to each function).

use std::collections::BTreeMap;

use crate::session::Session;
use crate::transport::{Error, Rule};

use super::funcs::NotTraced;
use super::handlers::HandlerModule;
use super::views;

/// Why a transport did not arm a function's probes, without what is
/// particular to that function (its address, its name and file), so that
/// the functions refused for one reason are listed together: a program of
/// thousands of functions had a line each. A refusal is keyed by its rule
/// and what it says alike of every site it refuses (given where the
/// transport made it: [`Error::alike`]), a failure to arm by what it says
/// alike of every site, any other error by its text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Reason {
    /// In words (first: the lines are in the order of their words).
    words: String,
    /// The rule of a refusal.
    rule: Option<Rule>,
}

impl Reason {
    /// The reason of `why`.
    fn of(why: &Error) -> Reason {
        Reason {
            words: why.said_alike().into_owned(),
            rule: why.rule(),
        }
    }
}

/// Why a transport that breaks in code refuses a library function the
/// executable calls through a GOT slot ([`super::funcs::Origin::Got`]).
const GOT_ONLY_INPROC: &str = "called through its GOT slot, with no PLT entry (code built with \
     -fno-plt): only --transport inproc traces such calls";

/// Prints the functions not traced, once, grouped by reason.
pub(super) fn list_not_traced(skipped: &[NotTraced]) {
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in skipped {
        by_reason.entry(&s.reason).or_default().push(&s.name);
    }
    for (reason, names) in by_reason {
        say_not_traced(reason, &names);
    }
}

/// Says that the functions `names` are not traced, for `reason`.
fn say_not_traced(reason: &str, names: &[&str]) {
    crate::elog!("wprobe: not traced ({reason}): {}", names.join(", "));
}

/// Says, once, which functions could not be traced and why (the
/// transport refused their entry or return probe).
pub(super) fn report_arm_failures(
    session: &Session,
    table: &views::Table,
    modules: &[HandlerModule],
    notices: &[bool],
) {
    let mut by_reason: BTreeMap<Reason, Vec<&str>> = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    for (prog, index, why) in session.arm_failures() {
        // Two probes per function, or only its return probe.
        let per = if notices.get(*prog) == Some(&true) {
            1
        } else {
            2
        };
        let Some(&fi) = modules.get(*prog).and_then(|m| m.funcs.get(index / per)) else {
            continue;
        };
        if seen.insert(fi) {
            // A ptrace breakpoint or a uprobe goes into code; a GOT slot
            // holds an address.
            let reason = if table[fi].origin == super::funcs::Origin::Got
                && why.rule() == Some(Rule::NotExecutable)
            {
                Reason {
                    words: GOT_ONLY_INPROC.to_string(),
                    rule: Some(Rule::NotExecutable),
                }
            } else {
                Reason::of(why)
            };
            by_reason.entry(reason).or_default().push(&table[fi].shown);
        }
    }
    for (reason, names) in by_reason {
        say_not_traced(&reason.words, &names);
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;
    use crate::transport::{Error, Rule};

    /// The reason of a refusal made as the transports make it, with the
    /// context the in-process seam adds.
    fn reason(e: Error, function_at: u64) -> (String, Option<Rule>) {
        let r = Reason::of(&e.site_context(format_args!(
            "cannot patch the function at {function_at:#x}"
        )));
        (r.words, r.rule)
    }

    #[test]
    fn refusals_lose_what_is_particular_to_the_function() {
        let p = std::path::Path::new("/tmp/p");
        let no_ret = crate::transport::retsites::no_ret("_RNvYNtf", p, "inproc", Some(0x5599));
        assert_eq!(
            no_ret.to_string(),
            "_RNvYNtf in /tmp/p has no `ret` instruction (it ends in calls that do not return, or \
             in tail calls out of the module): --transport inproc cannot observe its returns; use \
             --transport ptrace"
        );
        assert_eq!(
            reason(no_ret, 0x5599),
            (
                "it has no `ret` instruction (it ends in calls that do not return, or in tail \
                 calls out of the module): --transport inproc cannot observe its returns; use \
                 --transport ptrace"
                    .into(),
                Some(Rule::Returns)
            )
        );
        let shared = Error::refused_at(
            Rule::Patch,
            0x55996e4adae0,
            "is a `ret` where a return probe's calls return: a probe cannot share it",
        );
        assert_eq!(
            shared.to_string(),
            "0x55996e4adae0 is a `ret` where a return probe's calls return: a probe cannot share it"
        );
        assert_eq!(
            reason(shared, 0x55996e4adae0),
            (
                "its entry is a `ret` where a return probe's calls return: a probe cannot share it"
                    .into(),
                Some(Rule::Patch)
            )
        );
        let plain = Error::refused(
            Rule::Patch,
            Some(0x5599),
            "no function symbol covers it (branch targets in the window cannot be ruled out)",
        );
        let shown = plain
            .clone()
            .site_context("cannot patch the function at 0x5599");
        assert_eq!(
            shown.to_string(),
            "cannot patch the function at 0x5599: no function symbol covers it (branch targets \
             in the window cannot be ruled out)"
        );
        assert_eq!(
            reason(plain, 0x5599).0,
            "no function symbol covers it (branch targets in the window cannot be ruled out)"
        );
        // A context that is no site's stays in both.
        let ctx = Error::refused(Rule::Patch, None, "no room").context("f is too short");
        assert_eq!(reason(ctx, 1).0, "f is too short: no room");
        // A failure to arm: without the site's context too.
        let arm = Error::arm("no room for a watchpoint's stub");
        assert_eq!(
            reason(arm, 0x10),
            ("no room for a watchpoint's stub".into(), None)
        );
        // Any other error: its text, whole.
        let other = Error::gone(5, "process 5 is not traced");
        assert_eq!(
            reason(other, 0x10),
            (
                "cannot patch the function at 0x10: process 5 is not traced".into(),
                None
            )
        );
    }
}
